// The cuBLAS GEMM path (contract in gemm_path.h): plan, the gather / masked-softmax / finalize
// kernels, the strided-batched QK^T and PV calls, and its entry in the decode-variant table.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/attention_merge.cuh"
#include "api/internal/cuda_check.h"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"
#include "kernels/gemm_stages.h"

namespace attnrt::kernels {
namespace gemm_detail {
namespace {

constexpr std::size_t kAlign = 256;  // cudaMalloc alignment; cublasSetWorkspace needs 256

std::size_t AlignUp(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
int RoundUpTo(int n, int q) { return (n + q - 1) / q * q; }

// Per-slot facts every kernel agrees on: 0 = padding, -1 = cannot run (length past Tpad or the
// block-table row, or a layer outside the pools: out/lse become NaN), else the length.
struct SlotParams {
  const std::int32_t* kv_lengths;
  const std::int32_t* layers;
  int num_layers;
  int limit;  // min(Tpad, max_blocks_per_seq * block_size)
};

__device__ __forceinline__ int RunnableLength(const SlotParams& s, int slot) {
  const int len = s.kv_lengths[slot];
  if (len <= 0) return 0;
  const int layer = s.layers[slot];
  if (len > s.limit || layer < 0 || layer >= s.num_layers) return -1;
  return len;
}

SlotParams MakeSlotParams(const GemmPathPlan& plan, const DecodeBatchView& batch,
                          const KvPoolView& pools) {
  return SlotParams{batch.kv_lengths, batch.layers, pools.num_layers,
                    std::min(plan.t_pad, batch.max_blocks_per_seq * pools.block_size)};
}

// ---- stage 1: gather ---------------------------------------------------------------------
constexpr int kGatherThreads = 128;
constexpr int kGatherVecsPerThread = 4;  // 16-byte vectors of K and of V in flight per thread
// Tokens one gather CTA covers: a fixed 8 KB of K and 8 KB of V whatever the head dim.
constexpr int GatherTokensPerCta(int head_dim) {
  return kGatherThreads * kGatherVecsPerThread * 8 / head_dim;
}
static_assert(kGemmPathTpadQuantum % GatherTokensPerCta(64) == 0,
              "a Tpad quantum must hold whole gather tiles");

struct GatherParams {
  SlotParams slots;
  const __half* k_pool;
  const __half* v_pool;
  std::int64_t layer_stride;
  std::int64_t block_stride;
  const std::int32_t* block_tables;
  int max_blocks_per_seq;
  int num_kv_heads;
  int block_shift;  // log2(block_size)
  int t_pad;
  __half* k_ws;
  __half* v_ws;
};

template <int kHeadDim>
__global__ void __launch_bounds__(kGatherThreads) GemmGatherKernel(GatherParams p) {
  constexpr int kVecsPerRow = kHeadDim / 8;
  constexpr int kTokensPerCta = GatherTokensPerCta(kHeadDim);
  const int bh = blockIdx.y;  // slot * Hkv + kv head
  const int slot = bh / p.num_kv_heads;
  const int kv_head = bh - slot * p.num_kv_heads;
  const int len = RunnableLength(p.slots, slot);
  if (len <= 0) return;  // padding (untouched) or invalid (finalize writes NaN)
  const int t0 = blockIdx.x * kTokensPerCta;
  const int block_mask = (1 << p.block_shift) - 1;
  const std::int32_t* table = p.block_tables + static_cast<std::int64_t>(slot) * p.max_blocks_per_seq;
  const std::int64_t layer_base = p.slots.layers[slot] * p.layer_stride;
  const std::int64_t ws_base = (static_cast<std::int64_t>(bh) * p.t_pad + t0) * kHeadDim;

  // All loads first (several independent 16-byte loads in flight), then the stores.
  uint4 k_reg[kGatherVecsPerThread];
  uint4 v_reg[kGatherVecsPerThread];
#pragma unroll
  for (int i = 0; i < kGatherVecsPerThread; ++i) {
    const int idx = i * kGatherThreads + threadIdx.x;
    const int t = t0 + idx / kVecsPerRow;
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
    const int t = t0 + idx / kVecsPerRow;
    const std::int64_t dst = ws_base + static_cast<std::int64_t>(idx) * 8;
    if (t < len) *reinterpret_cast<uint4*>(p.k_ws + dst) = k_reg[i];  // K pad rows: masked
    *reinterpret_cast<uint4*>(p.v_ws + dst) = v_reg[i];
  }
}

// ---- stage 3: masked softmax -------------------------------------------------------------
constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxWarps = kSoftmaxThreads / 32;

struct SoftmaxParams {
  SlotParams slots;
  int num_q_heads;
  int t_pad;
  int row_begin;
  const float* scores;
  __half* probs;
  float* row_max;
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
  const int row = p.row_begin + blockIdx.x;
  const int len = RunnableLength(p.slots, row / p.num_q_heads);
  if (len <= 0) return;
  const float* s = p.scores + static_cast<std::int64_t>(row) * p.t_pad;
  __half* out = p.probs + static_cast<std::int64_t>(row) * p.t_pad;

  // Pass 1: max over t < len (16-byte loads; scores past len may be garbage and are not read).
  float m = -INFINITY;
  const int len4 = len / 4;
  for (int i = threadIdx.x; i < len4; i += kSoftmaxThreads) {
    const float4 x = reinterpret_cast<const float4*>(s)[i];
    m = fmaxf(m, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
  }
  for (int t = len4 * 4 + threadIdx.x; t < len; t += kSoftmaxThreads) m = fmaxf(m, s[t]);
  m = BlockReduce(m, [](float a, float b) { return fmaxf(a, b); }, smem);

  // Pass 2: FP16 weights over the whole padded row (zero past len) and the sum of the rounded
  // weights, so out = sum(p v) / sum(p) is an exact convex combination.
  const float m_log2 = m * kLog2e;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < p.t_pad / 8; c += kSoftmaxThreads) {
    const int t = c * 8;
    alignas(16) __half w[8];
    if (t < len) {
      const float4 a = reinterpret_cast<const float4*>(s + t)[0];
      const float4 b = reinterpret_cast<const float4*>(s + t)[1];
      const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        w[j] = t + j < len ? __float2half_rn(exp2f(fmaf(x[j], kLog2e, -m_log2))) : __half(0.0f);
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
    p.row_max[row] = m;
    p.row_sum[row] = sum;
  }
}

// ---- stage 5: finalize -------------------------------------------------------------------
constexpr int kFinalizeThreads = 64;

struct FinalizeParams {
  SlotParams slots;
  int num_q_heads;
  int head_dim;
  const float* acc;
  const float* row_max;
  const float* row_sum;
  __half* out;
  float* lse;
  int* overflow;
};

__global__ void __launch_bounds__(kFinalizeThreads) GemmFinalizeKernel(FinalizeParams p) {
  const int row = blockIdx.x;
  const int slot = row / p.num_q_heads;
  const int len = RunnableLength(p.slots, slot);
  if (len == 0) return;  // padding: no write
  __half2* out = reinterpret_cast<__half2*>(p.out + static_cast<std::int64_t>(row) * p.head_dim);
  if (len < 0) {  // a slot that cannot run: NaN out, NaN lse, counted once per slot
    const __half2 nan2 = __floats2half2_rn(NAN, NAN);
    for (int d = threadIdx.x; d < p.head_dim / 2; d += kFinalizeThreads) out[d] = nan2;
    if (threadIdx.x == 0) {
      if (p.lse != nullptr) p.lse[row] = NAN;
      if (row % p.num_q_heads == 0) atomicAdd(p.overflow, 1);
    }
    return;
  }
  // One part per row (the softmax saw every key): no merge, only the store. The softmax's scores
  // and max are natural-log (cuBLAS applied the scale).
  const float sum = p.row_sum[row];
  const Normalizer<Normalize::kDivide> normalize(sum);
  const float2* acc = reinterpret_cast<const float2*>(p.acc + static_cast<std::int64_t>(row) * p.head_dim);
  for (int d = threadIdx.x; d < p.head_dim / 2; d += kFinalizeThreads) {
    StoreHalves(reinterpret_cast<__half*>(out + d), acc[d], normalize);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[row] = NaturalLse<ScoreUnits::kNatural>(p.row_max[row], sum);
  }
}

Status Mismatch(const char* field, long long got, long long want) {
  return InvalidArgumentError(std::string(field) + " = " + std::to_string(got) +
                              ", expected " + std::to_string(want) + " (from the GemmPathPlan)");
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
  b.overflow = reinterpret_cast<int*>(base + plan.overflow_offset);
  b.cublas = base + plan.cublas_offset;
  return b;
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

Status BindCublas(const GemmPathBuffers& buffers, cublasHandle_t cublas, cudaStream_t stream) {
  ATTNRT_CUBLAS_RETURN(cublasSetStream(cublas, stream));
  ATTNRT_CUBLAS_RETURN(cublasSetWorkspace(cublas, buffers.cublas, kGemmPathCublasWorkspaceBytes));
  ATTNRT_CUBLAS_RETURN(cublasSetPointerMode(cublas, CUBLAS_POINTER_MODE_HOST));
  return Status::Ok();
}

Status LaunchGather(const GemmPathPlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                    const GemmPathBuffers& buffers, cudaStream_t stream) {
  GatherParams p;
  p.slots = MakeSlotParams(plan, batch, pools);
  p.k_pool = reinterpret_cast<const __half*>(pools.k);
  p.v_pool = reinterpret_cast<const __half*>(pools.v);
  p.layer_stride = pools.layer_stride();
  p.block_stride = pools.block_stride();
  p.block_tables = batch.block_tables;
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.num_kv_heads = pools.num_kv_heads;
  p.block_shift = 0;
  while ((1 << p.block_shift) < pools.block_size) ++p.block_shift;
  p.t_pad = plan.t_pad;
  p.k_ws = buffers.k;
  p.v_ws = buffers.v;
  const int d = plan.shape.head_dim;
  const dim3 grid(plan.t_pad / GatherTokensPerCta(d), plan.batch_count());
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(d, [&](auto head_dim) {
    GemmGatherKernel<decltype(head_dim)::value><<<grid, kGatherThreads, 0, stream>>>(p);
  }));
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchSoftmax(const GemmPathPlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                     const GemmPathBuffers& buffers, int row_begin, int num_rows,
                     cudaStream_t stream) {
  SoftmaxParams p;
  p.slots = MakeSlotParams(plan, batch, pools);
  p.num_q_heads = plan.shape.num_q_heads;
  p.t_pad = plan.t_pad;
  p.row_begin = row_begin;
  p.scores = buffers.scores;
  p.probs = buffers.probs;
  p.row_max = buffers.row_max;
  p.row_sum = buffers.row_sum;
  GemmSoftmaxKernel<<<num_rows, kSoftmaxThreads, 0, stream>>>(p);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchFinalize(const GemmPathPlan& plan, const DecodeBatchView& batch,
                      const KvPoolView& pools, const GemmPathBuffers& buffers, cudaStream_t stream) {
  FinalizeParams p;
  p.slots = MakeSlotParams(plan, batch, pools);
  p.num_q_heads = plan.shape.num_q_heads;
  p.head_dim = plan.shape.head_dim;
  p.acc = buffers.acc;
  p.row_max = buffers.row_max;
  p.row_sum = buffers.row_sum;
  p.out = reinterpret_cast<__half*>(batch.out);
  p.lse = batch.lse;
  p.overflow = buffers.overflow;
  GemmFinalizeKernel<<<plan.capacity * plan.shape.num_q_heads, kFinalizeThreads, 0, stream>>>(p);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

}  // namespace gemm_detail

// ---- public API --------------------------------------------------------------------------
using gemm_detail::Buffers;
using gemm_detail::GemmPathBuffers;

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

StatusOr<GemmPathPlan> PlanGemmPath(const ModelShape& shape, int capacity, int t_pad) {
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
  const long long batch_count = static_cast<long long>(capacity) * shape.num_kv_heads;
  if (batch_count > 65535) {  // the gather's grid.y
    return InvalidArgumentError("capacity * num_kv_heads = " + std::to_string(batch_count) +
                                ", expected <= 65535");
  }
  GemmPathPlan plan;
  plan.shape = shape;
  plan.capacity = capacity;
  plan.t_pad = t_pad;
  using gemm_detail::AlignUp;
  const std::size_t rows = static_cast<std::size_t>(capacity) * shape.num_q_heads;
  const std::size_t kv = static_cast<std::size_t>(batch_count) * t_pad * shape.head_dim * 2;
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at += AlignUp(bytes);
    return offset;
  };
  plan.cublas_offset = take(kGemmPathCublasWorkspaceBytes);
  plan.k_offset = take(kv);
  plan.v_offset = take(kv);
  plan.scores_offset = take(rows * t_pad * sizeof(float));
  plan.probs_offset = take(rows * t_pad * 2);
  plan.row_max_offset = take(rows * sizeof(float));
  plan.row_sum_offset = take(rows * sizeof(float));
  plan.acc_offset = take(rows * shape.head_dim * sizeof(float));
  plan.overflow_offset = take(sizeof(int));
  plan.workspace_bytes = at;
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
    case GemmPathStage::kFinalize: return "finalize";
  }
  return "?";
}

namespace {

Status RunStage(GemmPathStage stage, const GemmPathPlan& plan, const DecodeBatchView& batch,
                const KvPoolView& pools, const GemmPathBuffers& buf, cublasHandle_t cublas,
                cudaStream_t stream) {
  const int g = plan.shape.group_size();
  const int d = plan.shape.head_dim;
  const long long t_pad = plan.t_pad;
  const float zero = 0.0f;
  const float one = 1.0f;
  switch (stage) {
    case GemmPathStage::kGather:
      return gemm_detail::LaunchGather(plan, batch, pools, buf, stream);
    case GemmPathStage::kScores: {
      // Column-major view: S^T[Tpad x G] = K[Tpad x D] * Q^T[D x G] per (slot, kv head).
      const float alpha = batch.scale;
      ATTNRT_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          cublas, CUBLAS_OP_T, CUBLAS_OP_N, plan.t_pad, g, d, &alpha,
          buf.k, CUDA_R_16F, d, t_pad * d,
          batch.q, CUDA_R_16F, d, static_cast<long long>(g) * d, &zero,
          buf.scores, CUDA_R_32F, plan.t_pad, g * t_pad,
          plan.batch_count(), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return Status::Ok();
    }
    case GemmPathStage::kSoftmax:
      return gemm_detail::LaunchSoftmax(plan, batch, pools, buf, 0,
                                        plan.capacity * plan.shape.num_q_heads, stream);
    case GemmPathStage::kPv:
      // O^T[D x G] = V^T[D x Tpad] * P^T[Tpad x G].
      ATTNRT_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, g, plan.t_pad, &one,
          buf.v, CUDA_R_16F, d, t_pad * d,
          buf.probs, CUDA_R_16F, plan.t_pad, g * t_pad, &zero,
          buf.acc, CUDA_R_32F, d, static_cast<long long>(g) * d,
          plan.batch_count(), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return Status::Ok();
    case GemmPathStage::kFinalize:
      return gemm_detail::LaunchFinalize(plan, batch, pools, buf, stream);
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
  return RunStage(stage, plan, batch, pools, buf, cublas, stream);
}

namespace {

// The run of inputs that passed ValidateRun (or the table's StartRun).
Status EnqueueGemmPath(const GemmPathPlan& plan, const DecodeBatchView& batch,
                       const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas,
                       cudaStream_t stream) {
  const GemmPathBuffers buf = Buffers(plan, workspace);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(buf.overflow, 0, sizeof(int), stream));
  for (GemmPathStage stage : kGemmPathStages) {
    ATTNRT_RETURN_IF_ERROR(RunStage(stage, plan, batch, pools, buf, cublas, stream));
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

Status GemmSupports(const ModelShape& shape) { return shape.Validate(); }

std::vector<int> GemmKvLengthBuckets(const ModelShape& shape) {
  std::vector<int> buckets = GemmPathTpadBuckets(shape);
  for (int& b : buckets) b = std::min(b, shape.max_context);  // the top Tpad rounds it up
  return buckets;
}

StatusOr<DecodePlan> PlanGemm(const DecodePlanRequest& request) {
  ATTNRT_ASSIGN_OR_RETURN(DecodePlan plan, StartPlan(request, kGemmVariantName, GemmSupports));
  const int longest = request.max_kv_length > 0 ? request.max_kv_length : plan.shape.max_context;
  ATTNRT_ASSIGN_OR_RETURN(const int t_pad, ChooseGemmPathTpad(plan.shape, longest));
  ATTNRT_ASSIGN_OR_RETURN(plan.gemm, PlanGemmPath(plan.shape, plan.capacity, t_pad));
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
