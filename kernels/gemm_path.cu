// The cuBLAS GEMM path (contract in gemm_path.h): plan (the pieces: batch slices by context
// chunks within a workspace budget), the gather / masked-softmax / merge kernels, the
// strided-batched QK^T and PV calls, and its entry in the decode-variant table.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "api/check.h"
#include "api/internal/cuda_check.h"
#include "kernels/attention_merge.cuh"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"
#include "kernels/gemm_stages.h"

namespace attnrt::kernels {
namespace gemm_detail {
namespace {

constexpr std::size_t kAlign = 256;  // cudaMalloc alignment; cublasSetWorkspace needs 256
// A gather grid's y extent (batch rows of a slice x Hkv) is at most this.
constexpr int kMaxGridY = 65535;

std::size_t AlignUp(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
int RoundUpTo(int n, int q) { return (n + q - 1) / q * q; }
int CeilDiv(int n, int d) { return (n + d - 1) / d; }

// Per-batch-row facts every kernel agrees on: 0 = padding, -1 = cannot run (length past Tpad or
// the block-table row, or a layer outside the pools: out/lse become NaN), else the length.
struct BatchRowParams {
  const std::int32_t* kv_lengths;
  const std::int32_t* layers;
  int num_layers;
  int limit;  // min(Tpad, max_blocks_per_seq * block_size)
};

__device__ __forceinline__ int RunnableLength(const BatchRowParams& s, int batch_row) {
  const int len = s.kv_lengths[batch_row];
  if (len <= 0) return 0;
  const int layer = s.layers[batch_row];
  if (len > s.limit || layer < 0 || layer >= s.num_layers) return -1;
  return len;
}

BatchRowParams MakeBatchRowParams(const GemmPathPlan& plan, const DecodeBatchView& batch,
                                  const KvPoolView& pools) {
  return BatchRowParams{batch.kv_lengths, batch.layers, pools.num_layers,
                        std::min(plan.t_pad, batch.max_blocks_per_seq * pools.block_size)};
}

// Where a piece sits in the batch and the context; every kernel of the piece gets one.
struct PieceParams {
  int first_batch_row;  // of the slice
  int chunk_begin;      // first token of the chunk
  int chunk_tokens;     // C: the workspace's row length
};

PieceParams MakePieceParams(const GemmPathPlan& plan, const GemmPathPiece& piece) {
  return PieceParams{piece.first_batch_row, piece.chunk * plan.chunk_tokens, plan.chunk_tokens};
}

// ---- stage 1: gather ---------------------------------------------------------------------
constexpr int kGatherThreads = 128;
constexpr int kGatherVecsPerThread = 4;  // 16-byte vectors of K and of V in flight per thread
// Tokens one gather CTA covers: a fixed 8 KB of K and 8 KB of V whatever the head dim.
constexpr int GatherTokensPerCta(int head_dim) {
  return kGatherThreads * kGatherVecsPerThread * 8 / head_dim;
}
static_assert(kGemmPathTpadQuantum % GatherTokensPerCta(64) == 0,
              "a Tpad quantum (and so a chunk) must hold whole gather tiles");

struct GatherParams {
  BatchRowParams batch_rows;
  PieceParams piece;
  const __half* k_pool;
  const __half* v_pool;
  std::int64_t layer_stride;
  std::int64_t block_stride;
  const std::int32_t* block_tables;
  int max_blocks_per_seq;
  int num_kv_heads;
  int block_shift;  // log2(block_size)
  __half* k_ws;
  __half* v_ws;
};

template <int kHeadDim>
__global__ void __launch_bounds__(kGatherThreads) GemmGatherKernel(GatherParams p) {
  constexpr int kVecsPerRow = kHeadDim / 8;
  constexpr int kTokensPerCta = GatherTokensPerCta(kHeadDim);
  const int bh = blockIdx.y;  // batch row in the slice * Hkv + kv head
  const int local_batch_row = bh / p.num_kv_heads;
  const int kv_head = bh - local_batch_row * p.num_kv_heads;
  const int batch_row = p.piece.first_batch_row + local_batch_row;
  const int len = RunnableLength(p.batch_rows, batch_row);
  // Padding (untouched), invalid (finalize writes NaN), or a chunk past the row's end (its
  // softmax and merge skip it; nothing reads what this CTA would write).
  if (len <= p.piece.chunk_begin) return;
  const int t0 = blockIdx.x * kTokensPerCta;  // within the chunk
  const int block_mask = (1 << p.block_shift) - 1;
  const std::int32_t* table =
      p.block_tables + static_cast<std::int64_t>(batch_row) * p.max_blocks_per_seq;
  const std::int64_t layer_base = p.batch_rows.layers[batch_row] * p.layer_stride;
  const std::int64_t ws_base =
      (static_cast<std::int64_t>(bh) * p.piece.chunk_tokens + t0) * kHeadDim;

  // All loads first (several independent 16-byte loads in flight), then the stores.
  uint4 k_reg[kGatherVecsPerThread];
  uint4 v_reg[kGatherVecsPerThread];
#pragma unroll
  for (int i = 0; i < kGatherVecsPerThread; ++i) {
    const int idx = i * kGatherThreads + threadIdx.x;
    const int t = p.piece.chunk_begin + t0 + idx / kVecsPerRow;
    const int vec = idx % kVecsPerRow;
    if (t < len) {
      const std::int32_t block = table[t >> p.block_shift];
      const std::int64_t off = layer_base + block * p.block_stride +
                               (static_cast<std::int64_t>(kv_head) << p.block_shift |
                                (t & block_mask)) * kHeadDim + vec * 8;
      k_reg[i] = __ldg(reinterpret_cast<const uint4*>(p.k_pool + off));
      v_reg[i] = __ldg(reinterpret_cast<const uint4*>(p.v_pool + off));
    } else {
      v_reg[i] = make_uint4(0, 0, 0, 0);  // P is 0 past the length, and 0 * (stale Inf) = NaN
    }
  }
#pragma unroll
  for (int i = 0; i < kGatherVecsPerThread; ++i) {
    const int idx = i * kGatherThreads + threadIdx.x;
    const int t = p.piece.chunk_begin + t0 + idx / kVecsPerRow;
    const std::int64_t dst = ws_base + static_cast<std::int64_t>(idx) * 8;
    if (t < len) *reinterpret_cast<uint4*>(p.k_ws + dst) = k_reg[i];  // K pad rows: masked
    *reinterpret_cast<uint4*>(p.v_ws + dst) = v_reg[i];
  }
}

// ---- stage 3: masked softmax -------------------------------------------------------------
constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxWarps = kSoftmaxThreads / 32;

struct SoftmaxParams {
  BatchRowParams batch_rows;
  PieceParams piece;
  int num_q_heads;
  int row_begin;  // within the slice
  const float* scores;
  __half* probs;
  float* row_max;  // the running state (chunk 0) or the chunk's
  float* row_sum;
};

template <typename Op>
__device__ __forceinline__ float BlockReduce(float v, Op op, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  v = smem[0];
#pragma unroll
  for (int w = 1; w < kSoftmaxWarps; ++w) v = op(v, smem[w]);
  __syncthreads();  // smem reusable
  return v;
}

__global__ void __launch_bounds__(kSoftmaxThreads) GemmSoftmaxKernel(SoftmaxParams p) {
  __shared__ float smem[kSoftmaxWarps];
  const int row = p.row_begin + blockIdx.x;  // within the slice
  const int len = RunnableLength(p.batch_rows, p.piece.first_batch_row + row / p.num_q_heads);
  // Keys of this row in the chunk; none: no state (the merge skips the chunk, never reads it).
  const int n = min(len - p.piece.chunk_begin, p.piece.chunk_tokens);
  if (n <= 0) return;
  const int c_tokens = p.piece.chunk_tokens;
  const float* s = p.scores + static_cast<std::int64_t>(row) * c_tokens;
  __half* out = p.probs + static_cast<std::int64_t>(row) * c_tokens;

  // Pass 1: max over t < n (16-byte loads; scores past n may be garbage and are not read).
  float m = -INFINITY;
  const int n4 = n / 4;
  for (int i = threadIdx.x; i < n4; i += kSoftmaxThreads) {
    const float4 x = reinterpret_cast<const float4*>(s)[i];
    m = fmaxf(m, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
  }
  for (int t = n4 * 4 + threadIdx.x; t < n; t += kSoftmaxThreads) m = fmaxf(m, s[t]);
  m = BlockReduce(m, [](float a, float b) { return fmaxf(a, b); }, smem);

  // Pass 2: FP16 weights over the whole chunk row (zero past n) and the sum of the rounded
  // weights, so out = sum(p v) / sum(p) is an exact convex combination. The state keeps the max
  // in log2 units, the units of the one merge (attention_merge.cuh): e^(s - m) = 2^(s*log2e - m2).
  const float m_log2 = m * kLog2e;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < c_tokens / 8; c += kSoftmaxThreads) {
    const int t = c * 8;
    alignas(16) __half w[8];
    if (t < n) {
      const float4 a = reinterpret_cast<const float4*>(s + t)[0];
      const float4 b = reinterpret_cast<const float4*>(s + t)[1];
      const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        w[j] = t + j < n ? __float2half_rn(exp2f(fmaf(x[j], kLog2e, -m_log2))) : __half(0.0f);
        sum += __half2float(w[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) w[j] = __half(0.0f);
    }
    reinterpret_cast<uint4*>(out)[c] = *reinterpret_cast<const uint4*>(w);
  }
  sum = BlockReduce(sum, [](float a, float b) { return a + b; }, smem);
  if (threadIdx.x == 0) {
    p.row_max[row] = m_log2;
    p.row_sum[row] = sum;
  }
}

// ---- stages 5 and 6: merge a chunk into the running state; finalize -----------------------
constexpr int kMergeThreads = 64;

struct MergeParams {
  BatchRowParams batch_rows;
  PieceParams piece;
  int num_q_heads;
  int head_dim;
  bool has_chunk;  // the piece's chunk is >= 1 (its state is beside the running one)
  float* row_max;  // running state [S][H], [S][H][D]
  float* row_sum;
  float* acc;
  const float* chunk_max;  // the chunk's state
  const float* chunk_sum;
  const float* chunk_acc;
  __half* out;  // finalize only
  float* lse;
  int* overflow;
};

// One CTA per (batch row, q head) row of the slice. kFinal: the slice's last chunk, then the
// output (with one chunk, the running state alone); else chunk 1 .. n-2 into the running state,
// in place.
template <bool kFinal>
__global__ void __launch_bounds__(kMergeThreads) GemmMergeKernel(MergeParams p) {
  const int local_row = blockIdx.x;
  const int batch_row = p.piece.first_batch_row + local_row / p.num_q_heads;
  const std::int64_t row =
      static_cast<std::int64_t>(p.piece.first_batch_row) * p.num_q_heads + local_row;
  const int len = RunnableLength(p.batch_rows, batch_row);
  if (len == 0) return;  // padding: no write
  if (len < 0) {
    if constexpr (kFinal) {  // a row that cannot run: NaN out, NaN lse, counted once
      __half2* out = reinterpret_cast<__half2*>(p.out + row * p.head_dim);
      const __half2 nan2 = __floats2half2_rn(NAN, NAN);
      for (int d = threadIdx.x; d < p.head_dim / 2; d += kMergeThreads) out[d] = nan2;
      if (threadIdx.x == 0) {
        if (p.lse != nullptr) p.lse[row] = NAN;
        if (row % p.num_q_heads == 0) atomicAdd(p.overflow, 1);
      }
    }
    return;
  }
  // The chunk holds keys of this row only if the length reaches into it; a chunk past the end
  // left no state (its softmax returned), so it is not a part.
  const int num_parts = p.has_chunk && len > p.piece.chunk_begin ? 2 : 1;
  if (!kFinal && num_parts == 1) return;  // the running state already is the merge
  const float m0 = p.row_max[local_row];
  const float l0 = p.row_sum[local_row];
  const float m1 = num_parts == 2 ? p.chunk_max[local_row] : kNoScore;
  const float l1 = num_parts == 2 ? p.chunk_sum[local_row] : 0.0f;
  const std::int64_t acc_row = static_cast<std::int64_t>(local_row) * p.head_dim;
  float4* acc = reinterpret_cast<float4*>(p.acc + acc_row);
  const float4* chunk_acc = reinterpret_cast<const float4*>(p.chunk_acc + acc_row);
  AttentionState<float4> merged{};
  for (int e = threadIdx.x; e < p.head_dim / 4; e += kMergeThreads) {
    merged = MergeAttentionStates<float4>(
        num_parts, [&](int i) { return i == 0 ? m0 : m1; },
        [&](int i) { return i == 0 ? l0 : l1; },
        [&](int i) { return i == 0 ? acc[e] : chunk_acc[e]; });
    if constexpr (kFinal) {
      // The softmax's states are log2 units (see GemmSoftmaxKernel); one division per element.
      StoreOutput<Normalize::kDivide, ScoreUnits::kLog2>(
          p.out + row * p.head_dim, p.lse != nullptr ? p.lse + row : nullptr, 4 * e, merged);
    } else {
      acc[e] = merged.acc;  // each element read and written by this thread only
    }
  }
  if constexpr (!kFinal) {
    __syncthreads();  // every thread has read the running max and sum before they change
    if (threadIdx.x == 0) {  // thread 0 always merged element 0 (head_dim / 4 >= 16 > 0)
      p.row_max[local_row] = merged.m;
      p.row_sum[local_row] = merged.l;
    }
  }
}

Status Mismatch(const char* field, long long got, long long want) {
  return InvalidArgumentError(std::string(field) + " = " + std::to_string(got) +
                              ", expected " + std::to_string(want) + " (from the GemmPathPlan)");
}

// The workspace of (slice_rows, chunk_tokens); every other plan field is filled by the caller.
GemmPathPlan Lay(const ModelShape& shape, int capacity, int t_pad, int slice_rows,
                 int chunk_tokens) {
  GemmPathPlan plan;
  plan.shape = shape;
  plan.capacity = capacity;
  plan.t_pad = t_pad;
  plan.slice_rows = slice_rows;
  plan.num_slices = CeilDiv(capacity, slice_rows);
  plan.chunk_tokens = chunk_tokens;
  plan.num_chunks = CeilDiv(t_pad, chunk_tokens);
  const std::size_t rows = static_cast<std::size_t>(slice_rows) * shape.num_q_heads;
  const std::size_t kv = static_cast<std::size_t>(slice_rows) * shape.num_kv_heads *
                         chunk_tokens * shape.head_dim * 2;
  const std::size_t row_state = rows * sizeof(float);
  const std::size_t acc = rows * shape.head_dim * sizeof(float);
  const bool chunked = plan.num_chunks > 1;
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at += AlignUp(bytes);
    return offset;
  };
  plan.cublas_offset = take(kGemmPathCublasWorkspaceBytes);
  plan.k_offset = take(kv);
  plan.v_offset = take(kv);
  plan.scores_offset = take(rows * chunk_tokens * sizeof(float));
  plan.probs_offset = take(rows * chunk_tokens * 2);
  plan.row_max_offset = take(row_state);
  plan.row_sum_offset = take(row_state);
  plan.acc_offset = take(acc);
  plan.chunk_max_offset = take(chunked ? row_state : 0);
  plan.chunk_sum_offset = take(chunked ? row_state : 0);
  plan.chunk_acc_offset = take(chunked ? acc : 0);
  plan.overflow_offset = take(sizeof(int));
  plan.workspace_bytes = at;
  return plan;
}

// Largest x in [lo, hi] with fits(x), given fits(lo) and fits non-increasing in x.
template <typename Fits>
int LargestThatFits(int lo, int hi, Fits fits) {
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

GemmPathBuffers Buffers(const GemmPathPlan& plan, DecodeWorkspace workspace) {
  char* base = static_cast<char*>(workspace.data);
  GemmPathBuffers b;
  b.k = reinterpret_cast<__half*>(base + plan.k_offset);
  b.v = reinterpret_cast<__half*>(base + plan.v_offset);
  b.scores = reinterpret_cast<float*>(base + plan.scores_offset);
  b.probs = reinterpret_cast<__half*>(base + plan.probs_offset);
  b.row_max = reinterpret_cast<float*>(base + plan.row_max_offset);
  b.row_sum = reinterpret_cast<float*>(base + plan.row_sum_offset);
  b.acc = reinterpret_cast<float*>(base + plan.acc_offset);
  if (plan.num_chunks > 1) {
    b.chunk_max = reinterpret_cast<float*>(base + plan.chunk_max_offset);
    b.chunk_sum = reinterpret_cast<float*>(base + plan.chunk_sum_offset);
    b.chunk_acc = reinterpret_cast<float*>(base + plan.chunk_acc_offset);
  }
  b.overflow = reinterpret_cast<int*>(base + plan.overflow_offset);
  b.cublas = base + plan.cublas_offset;
  return b;
}

GemmPathPiece Piece(const GemmPathPlan& plan, int slice, int chunk) {
  return GemmPathPiece{slice, slice * plan.slice_rows, plan.rows_in_slice(slice), chunk};
}

Status ValidateRun(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas) {
  const ModelShape& s = plan.shape;
  if (shape.num_q_heads != s.num_q_heads) return Mismatch("shape.num_q_heads", shape.num_q_heads, s.num_q_heads);
  if (shape.num_kv_heads != s.num_kv_heads) return Mismatch("shape.num_kv_heads", shape.num_kv_heads, s.num_kv_heads);
  if (shape.head_dim != s.head_dim) return Mismatch("shape.head_dim", shape.head_dim, s.head_dim);
  if (shape.block_size != s.block_size) return Mismatch("shape.block_size", shape.block_size, s.block_size);
  ATTNRT_RETURN_IF_ERROR(CheckDecodeInputs(s, plan.capacity, batch, pools, workspace,
                                           plan.workspace_bytes, /*reads_new_kv=*/false));
  if (cublas == nullptr) return InvalidArgumentError("cublas handle is null");
  return Status::Ok();
}

Status CheckOnePiece(const GemmPathPlan& plan) {
  if (plan.num_slices == 1 && plan.num_chunks == 1) return Status::Ok();
  return FailedPreconditionError(
      "plan has " + std::to_string(plan.num_slices) + " slices x " +
      std::to_string(plan.num_chunks) + " chunks; the GEMM baselines run one piece (plan with a "
      "max_workspace_bytes that holds the whole batch at Tpad)");
}

Status BindCublas(const GemmPathBuffers& buffers, cublasHandle_t cublas, cudaStream_t stream) {
  ATTNRT_CUBLAS_RETURN(cublasSetStream(cublas, stream));
  ATTNRT_CUBLAS_RETURN(cublasSetWorkspace(cublas, buffers.cublas, kGemmPathCublasWorkspaceBytes));
  ATTNRT_CUBLAS_RETURN(cublasSetPointerMode(cublas, CUBLAS_POINTER_MODE_HOST));
  return Status::Ok();
}

Status LaunchGather(const GemmPathPlan& plan, const GemmPathPiece& piece,
                    const DecodeBatchView& batch, const KvPoolView& pools,
                    const GemmPathBuffers& buffers, cudaStream_t stream) {
  GatherParams p;
  p.batch_rows = MakeBatchRowParams(plan, batch, pools);
  p.piece = MakePieceParams(plan, piece);
  p.k_pool = reinterpret_cast<const __half*>(pools.k);
  p.v_pool = reinterpret_cast<const __half*>(pools.v);
  p.layer_stride = pools.layer_stride();
  p.block_stride = pools.block_stride();
  p.block_tables = batch.block_tables;
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.num_kv_heads = pools.num_kv_heads;
  p.block_shift = 0;
  while ((1 << p.block_shift) < pools.block_size) ++p.block_shift;
  p.k_ws = buffers.k;
  p.v_ws = buffers.v;
  const int d = plan.shape.head_dim;
  const dim3 grid(plan.chunk_tokens / GatherTokensPerCta(d),
                  piece.num_batch_rows * pools.num_kv_heads);
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(d, [&](auto head_dim) {
    GemmGatherKernel<decltype(head_dim)::value><<<grid, kGatherThreads, 0, stream>>>(p);
  }));
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchSoftmax(const GemmPathPlan& plan, const GemmPathPiece& piece,
                     const DecodeBatchView& batch, const KvPoolView& pools,
                     const GemmPathBuffers& buffers, int row_begin, int num_rows,
                     cudaStream_t stream) {
  SoftmaxParams p;
  p.batch_rows = MakeBatchRowParams(plan, batch, pools);
  p.piece = MakePieceParams(plan, piece);
  p.num_q_heads = plan.shape.num_q_heads;
  p.row_begin = row_begin;
  p.scores = buffers.scores;
  p.probs = buffers.probs;
  p.row_max = piece.chunk == 0 ? buffers.row_max : buffers.chunk_max;
  p.row_sum = piece.chunk == 0 ? buffers.row_sum : buffers.chunk_sum;
  GemmSoftmaxKernel<<<num_rows, kSoftmaxThreads, 0, stream>>>(p);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchMerge(const GemmPathPlan& plan, const GemmPathPiece& piece,
                   const DecodeBatchView& batch, const KvPoolView& pools,
                   const GemmPathBuffers& buffers, bool final, cudaStream_t stream) {
  MergeParams p;
  p.batch_rows = MakeBatchRowParams(plan, batch, pools);
  p.piece = MakePieceParams(plan, piece);
  p.num_q_heads = plan.shape.num_q_heads;
  p.head_dim = plan.shape.head_dim;
  p.has_chunk = piece.chunk > 0;
  p.row_max = buffers.row_max;
  p.row_sum = buffers.row_sum;
  p.acc = buffers.acc;
  p.chunk_max = buffers.chunk_max;
  p.chunk_sum = buffers.chunk_sum;
  p.chunk_acc = buffers.chunk_acc;
  p.out = reinterpret_cast<__half*>(batch.out);
  p.lse = batch.lse;
  p.overflow = buffers.overflow;
  const int rows = piece.num_batch_rows * plan.shape.num_q_heads;
  if (final) {
    GemmMergeKernel<true><<<rows, kMergeThreads, 0, stream>>>(p);
  } else {
    GemmMergeKernel<false><<<rows, kMergeThreads, 0, stream>>>(p);
  }
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

}  // namespace gemm_detail

// ---- public API --------------------------------------------------------------------------
using gemm_detail::Buffers;
using gemm_detail::GemmPathBuffers;
using gemm_detail::GemmPathPiece;

std::vector<int> GemmPathTpadBuckets(const ModelShape& shape) {
  const int top = gemm_detail::RoundUpTo(std::max(shape.max_context, 1), kGemmPathTpadQuantum);
  std::vector<int> buckets;
  for (int t = kGemmPathTpadQuantum; t < top; t *= 2) buckets.push_back(t);
  buckets.push_back(top);
  return buckets;
}

StatusOr<int> ChooseGemmPathTpad(const ModelShape& shape, int max_kv_length) {
  if (max_kv_length < 1 || max_kv_length > shape.max_context) {
    return InvalidArgumentError("max_kv_length = " + std::to_string(max_kv_length) +
                                ", expected 1.." + std::to_string(shape.max_context) +
                                " (ModelShape.max_context)");
  }
  for (int t : GemmPathTpadBuckets(shape)) {
    if (t >= max_kv_length) return t;
  }
  return InternalError("no Tpad bucket holds max_kv_length = " + std::to_string(max_kv_length));
}

StatusOr<GemmPathPlan> PlanGemmPath(const ModelShape& shape, int capacity, int t_pad,
                                    std::size_t max_workspace_bytes) {
  ATTNRT_RETURN_IF_ERROR(shape.Validate());
  if (capacity < 1) {
    return InvalidArgumentError("capacity = " + std::to_string(capacity) + ", expected >= 1");
  }
  const int top = gemm_detail::RoundUpTo(shape.max_context, kGemmPathTpadQuantum);
  if (t_pad < kGemmPathTpadQuantum || t_pad % kGemmPathTpadQuantum != 0 || t_pad > top) {
    return InvalidArgumentError("t_pad = " + std::to_string(t_pad) + ", expected a multiple of " +
                                std::to_string(kGemmPathTpadQuantum) + " in " +
                                std::to_string(kGemmPathTpadQuantum) + ".." + std::to_string(top));
  }
  using gemm_detail::CeilDiv;
  using gemm_detail::Lay;
  using gemm_detail::LargestThatFits;
  using gemm_detail::RoundUpTo;
  constexpr int kQuantum = kGemmPathTpadQuantum;
  auto fits = [&](int rows, int tokens) {
    return Lay(shape, capacity, t_pad, rows, tokens).workspace_bytes <= max_workspace_bytes;
  };
  // Batch rows per slice: as many as fit with chunks of one quantum (and the gather grid allows).
  const int max_rows = std::min(capacity, gemm_detail::kMaxGridY / shape.num_kv_heads);
  if (!fits(1, kQuantum)) {
    return ResourceExhaustedError(
        "max_workspace_bytes = " + std::to_string(max_workspace_bytes) +
        " holds no GEMM-path piece: one batch row by " + std::to_string(kQuantum) +
        " tokens needs " + std::to_string(Lay(shape, capacity, t_pad, 1, kQuantum).workspace_bytes) + " bytes");
  }
  int rows_per_slice = LargestThatFits(1, max_rows, [&](int s) { return fits(s, kQuantum); });
  // Equal slices (the fewest): a last slice of a few rows would cost a full round of launches.
  rows_per_slice = CeilDiv(capacity, CeilDiv(capacity, rows_per_slice));
  // Tokens per chunk: as many quanta as fit, then the fewest chunks of equal length (a chunk
  // shorter than the others would cost a full round of launches for little work).
  const int quanta = LargestThatFits(1, t_pad / kQuantum,
                                     [&](int q) { return fits(rows_per_slice, q * kQuantum); });
  const int num_chunks = CeilDiv(t_pad, quanta * kQuantum);
  const int chunk_tokens = RoundUpTo(CeilDiv(t_pad, num_chunks), kQuantum);
  GemmPathPlan plan = Lay(shape, capacity, t_pad, rows_per_slice, chunk_tokens);
  ATTNRT_DCHECK(plan.workspace_bytes <= max_workspace_bytes);
  ATTNRT_DCHECK(plan.num_chunks == num_chunks);
  return plan;
}

Status CheckGemmPathLengths(const GemmPathPlan& plan, std::span<const std::int32_t> kv_lengths) {
  if (static_cast<int>(kv_lengths.size()) != plan.capacity) {
    return InvalidArgumentError("kv_lengths has " + std::to_string(kv_lengths.size()) +
                                " entries, expected capacity = " + std::to_string(plan.capacity));
  }
  for (std::size_t i = 0; i < kv_lengths.size(); ++i) {
    if (kv_lengths[i] < 0 || kv_lengths[i] > plan.t_pad) {
      return InvalidArgumentError("kv_lengths[" + std::to_string(i) + "] = " +
                                  std::to_string(kv_lengths[i]) + ", expected 0.." +
                                  std::to_string(plan.t_pad) + " (the plan's Tpad)");
    }
  }
  return Status::Ok();
}

Status PrepareGemmPathWorkspace(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                cudaStream_t stream) {
  if (workspace.data == nullptr || workspace.bytes < plan.workspace_bytes) {
    return InvalidArgumentError("workspace.bytes = " + std::to_string(workspace.bytes) +
                                ", expected >= " + std::to_string(plan.workspace_bytes));
  }
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(workspace.data, 0, plan.workspace_bytes, stream));
  return Status::Ok();
}

const char* GemmPathStageName(GemmPathStage stage) {
  switch (stage) {
    case GemmPathStage::kGather: return "gather";
    case GemmPathStage::kScores: return "qk";
    case GemmPathStage::kSoftmax: return "softmax";
    case GemmPathStage::kPv: return "pv";
    case GemmPathStage::kMerge: return "merge";
    case GemmPathStage::kFinalize: return "finalize";
  }
  return "?";
}

namespace {

// Whether the run has `stage` for `piece`: merge for chunks 1 .. n-2, finalize for the last.
bool HasStage(GemmPathStage stage, const GemmPathPlan& plan, const GemmPathPiece& piece) {
  const bool last = piece.chunk == plan.num_chunks - 1;
  if (stage == GemmPathStage::kMerge) return piece.chunk > 0 && !last;
  if (stage == GemmPathStage::kFinalize) return last;
  return true;
}

Status RunStage(GemmPathStage stage, const GemmPathPlan& plan, const GemmPathPiece& piece,
                const DecodeBatchView& batch, const KvPoolView& pools, const GemmPathBuffers& buf,
                cublasHandle_t cublas, cudaStream_t stream) {
  const int h = plan.shape.num_q_heads;
  const int g = plan.shape.group_size();
  const int d = plan.shape.head_dim;
  const int c_tokens = plan.chunk_tokens;
  const long long c_ll = c_tokens;
  const int batch_count = piece.num_batch_rows * plan.shape.num_kv_heads;
  const float zero = 0.0f;
  const float one = 1.0f;
  switch (stage) {
    case GemmPathStage::kGather:
      return gemm_detail::LaunchGather(plan, piece, batch, pools, buf, stream);
    case GemmPathStage::kScores: {
      // Column-major view: S^T[C x G] = K[C x D] * Q^T[D x G] per (batch row, kv head) of the
      // slice.
      const float alpha = batch.scale;
      const __half* q = reinterpret_cast<const __half*>(batch.q) +
                        static_cast<std::int64_t>(piece.first_batch_row) * h * d;
      ATTNRT_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          cublas, CUBLAS_OP_T, CUBLAS_OP_N, c_tokens, g, d, &alpha,
          buf.k, CUDA_R_16F, d, c_ll * d,
          q, CUDA_R_16F, d, static_cast<long long>(g) * d, &zero,
          buf.scores, CUDA_R_32F, c_tokens, g * c_ll,
          batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return Status::Ok();
    }
    case GemmPathStage::kSoftmax:
      return gemm_detail::LaunchSoftmax(plan, piece, batch, pools, buf, 0, piece.num_batch_rows * h,
                                        stream);
    case GemmPathStage::kPv:
      // O^T[D x G] = V^T[D x C] * P^T[C x G]; chunk 0 into the running state.
      ATTNRT_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, g, c_tokens, &one,
          buf.v, CUDA_R_16F, d, c_ll * d,
          buf.probs, CUDA_R_16F, c_tokens, g * c_ll, &zero,
          piece.chunk == 0 ? buf.acc : buf.chunk_acc, CUDA_R_32F, d, static_cast<long long>(g) * d,
          batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return Status::Ok();
    case GemmPathStage::kMerge:
    case GemmPathStage::kFinalize:
      return gemm_detail::LaunchMerge(plan, piece, batch, pools, buf,
                                      stage == GemmPathStage::kFinalize, stream);
  }
  return InvalidArgumentError("unknown GemmPathStage");
}

}  // namespace

Status RunGemmPathStage(GemmPathStage stage, const GemmPathPlan& plan, const ModelShape& shape,
                        const DecodeBatchView& batch, const KvPoolView& pools,
                        DecodeWorkspace workspace, cublasHandle_t cublas, cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(gemm_detail::ValidateRun(plan, shape, batch, pools, workspace, cublas));
  const GemmPathBuffers buf = Buffers(plan, workspace);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  for (int slice = 0; slice < plan.num_slices; ++slice) {
    for (int chunk = 0; chunk < plan.num_chunks; ++chunk) {
      const GemmPathPiece piece = gemm_detail::Piece(plan, slice, chunk);
      if (!HasStage(stage, plan, piece)) continue;
      ATTNRT_RETURN_IF_ERROR(RunStage(stage, plan, piece, batch, pools, buf, cublas, stream));
    }
  }
  return Status::Ok();
}

namespace {

// The run of inputs that passed ValidateRun (or the table's StartRun): every piece's stages in
// order, the same launches whatever the lengths.
Status EnqueueGemmPath(const GemmPathPlan& plan, const DecodeBatchView& batch,
                       const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas,
                       cudaStream_t stream) {
  const GemmPathBuffers buf = Buffers(plan, workspace);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(buf.overflow, 0, sizeof(int), stream));
  for (int slice = 0; slice < plan.num_slices; ++slice) {
    for (int chunk = 0; chunk < plan.num_chunks; ++chunk) {
      const GemmPathPiece piece = gemm_detail::Piece(plan, slice, chunk);
      for (GemmPathStage stage : kGemmPathStages) {
        if (!HasStage(stage, plan, piece)) continue;
        ATTNRT_RETURN_IF_ERROR(RunStage(stage, plan, piece, batch, pools, buf, cublas, stream));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status RunGemmPath(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas,
                   cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(gemm_detail::ValidateRun(plan, shape, batch, pools, workspace, cublas));
  return EnqueueGemmPath(plan, batch, pools, workspace, cublas, stream);
}

// ---- the decode-variant table's "gemm" entry -------------------------------------------------

Status GemmSupports(const ModelShape& shape) {
  if (shape.kv_cache_type != KvCacheType::kFp16) {
    return UnimplementedError("decode variant 'gemm' does not read kv_cache_type = " +
                              std::string(KvCacheTypeName(shape.kv_cache_type)) +
                              " (split_kv, split_kv_simt and simple do)");
  }
  return shape.Validate();
}

std::vector<int> GemmKvLengthBuckets(const ModelShape& shape) {
  std::vector<int> buckets = GemmPathTpadBuckets(shape);
  for (int& b : buckets) b = std::min(b, shape.max_context);  // the top Tpad rounds it up
  return buckets;
}

StatusOr<DecodePlan> PlanGemm(const DecodePlanRequest& request) {
  ATTNRT_ASSIGN_OR_RETURN(DecodePlan plan, StartPlan(request, kGemmVariantName, GemmSupports));
  const int longest = request.max_kv_length > 0 ? request.max_kv_length : plan.shape.max_context;
  ATTNRT_ASSIGN_OR_RETURN(const int t_pad, ChooseGemmPathTpad(plan.shape, longest));
  const std::size_t budget = request.max_workspace_bytes > 0 ? request.max_workspace_bytes
                                                             : kGemmPathDefaultMaxWorkspaceBytes;
  StatusOr<GemmPathPlan> gemm = PlanGemmPath(plan.shape, plan.capacity, t_pad, budget);
  if (!gemm.ok()) {
    return Status(gemm.status().code(),
                  "request.max_workspace_bytes: " + std::string(gemm.status().message()));
  }
  plan.gemm = std::move(gemm).value();
  plan.max_kv_length = t_pad;
  plan.uses_cublas = true;
  plan.workspace_bytes = plan.gemm.workspace_bytes;
  return plan;
}

Status RunGemm(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
               DecodeWorkspace workspace, const DecodeRunContext& context) {
  ATTNRT_RETURN_IF_ERROR(StartRun(plan, kGemmVariantName, batch, pools, workspace, context));
  return EnqueueGemmPath(plan.gemm, batch, pools, workspace, context.cublas, context.stream);
}

StatusOr<int> ReadGemmPathOverflowCount(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                        cudaStream_t stream) {
  if (workspace.data == nullptr || workspace.bytes < plan.workspace_bytes) {
    return InvalidArgumentError("workspace.bytes = " + std::to_string(workspace.bytes) +
                                ", expected >= " + std::to_string(plan.workspace_bytes));
  }
  int count = 0;
  ATTNRT_CUDA_RETURN(cudaMemcpyAsync(&count, Buffers(plan, workspace).overflow, sizeof(int),
                                     cudaMemcpyDeviceToHost, stream));
  ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream));
  return count;
}

}  // namespace attnrt::kernels
