// Device-resident paged decode batches with random data (shuffled blocks, in order, or as the KV
// cache's allocator lays them out; FP16 pools, or FP8 E4M3 codes at scale 1.0) and the median
// time of a decode plan's runs cycling over several of them (CUDA-graph replay): what the GPU benchmarks (bench/gpu_bench_util.h) and attnrt-check's
// speed column (tools/decode_speed.cu) share. Header-only, CUDA translation units only. Errors
// come back as Status; the benchmarks' wrappers exit on them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "api/internal/cuda_check.h"
#include "api/internal/fp8_e4m3.h"
#include "kernels/decode.h"
#include "kernels/read_ceiling.h"
#include "kernels/views.h"
#include "tools/kv_churn.h"
#include "tools/percentile.h"

namespace attnrt::tools {

// ---- device random fills -----------------------------------------------------------------
__device__ inline std::uint64_t SplitMix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// N(0,1) * scale by Box-Muller from a counter-based hash: independent of launch shape.
template <typename T>
__global__ void FillNormalKernel(T* out, std::int64_t n, std::uint64_t seed, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t r = SplitMix(seed * 0x100000001B3ull + static_cast<std::uint64_t>(i));
    const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * scale;
    if constexpr (sizeof(T) == 1) {
      out[i] = QuantizeE4M3(z, 1.0f);  // an E4M3 code (scale 1.0)
    } else if constexpr (sizeof(T) == 2) {
      out[i] = __float2half_rn(z);
    } else {
      out[i] = z;
    }
  }
}

// Enqueues out[0, n) = N(0,1) * scale on `stream`. T: float, __half, or std::uint8_t (E4M3
// codes of the values at scale 1.0).
template <typename T>
Status FillNormalAsync(T* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream,
                       float scale = 1.0f) {
  if (n <= 0) return Status::Ok();
  FillNormalKernel<<<1024, 256, 0, stream>>>(out, n, seed, scale);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

// ---- RAII for the CUDA objects below -------------------------------------------------------
namespace device_decode_internal {
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct EventDestroy {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
struct GraphDestroy {
  void operator()(CUgraph_st* g) const { cudaGraphDestroy(g); }
};
struct GraphExecDestroy {
  void operator()(CUgraphExec_st* g) const { cudaGraphExecDestroy(g); }
};
}  // namespace device_decode_internal
using DeviceMemory = std::unique_ptr<void, device_decode_internal::DeviceFree>;
using EventHandle = std::unique_ptr<CUevent_st, device_decode_internal::EventDestroy>;
using GraphHandle = std::unique_ptr<CUgraph_st, device_decode_internal::GraphDestroy>;
using GraphExecHandle = std::unique_ptr<CUgraphExec_st, device_decode_internal::GraphExecDestroy>;

inline Status AllocateDevice(std::size_t bytes, DeviceMemory* out) {
  out->reset();
  if (bytes == 0) return Status::Ok();
  void* p = nullptr;
  ATTNRT_CUDA_RETURN(cudaMalloc(&p, bytes));
  out->reset(p);
  return Status::Ok();
}
inline Status CreateEvent(EventHandle* out) {
  cudaEvent_t e = nullptr;
  ATTNRT_CUDA_RETURN(cudaEventCreate(&e));
  out->reset(e);
  return Status::Ok();
}

// ---- device-resident paged decode batch (random data) --------------------------------------
// How a batch's block ids are laid out over the pool: scattered (a fixed LCG shuffle: pages of
// one sequence are not contiguous; the default), in order (row 0's blocks first, each row's
// consecutive: what the paging itself costs, measured against the shuffle), or as the KV cache's
// block allocator places them in serving (tools::AllocatorBlockTables: kvcache::SequenceTable
// over kvcache::BlockAllocator after a churn warm-up; the pool then has twice the rows' blocks
// and more, as a serving pool is not one batch's).
enum class BlockOrder { kShuffled, kInOrder, kAllocator };

// Block tables for rows of lengths[i] tokens ([rows][max_blocks], `unused` past a row's
// blocks) laid out per `order`, and the pool's block count (at least 1): what DeviceDecodeBatch
// and the decode benchmark's input sets share.
struct PlacedTables {
  std::int32_t num_blocks = 0;
  std::vector<std::int32_t> tables;
};
inline StatusOr<PlacedTables> PlaceBlockTables(int block_size, int max_context,
                                               const std::vector<int>& lengths, BlockOrder order,
                                               std::uint64_t seed, std::int32_t unused = 0) {
  const int max_blocks = (max_context + block_size - 1) / block_size;
  const std::size_t rows = lengths.size();
  PlacedTables placed;
  placed.tables.assign(rows * max_blocks, unused);
  if (order == BlockOrder::kAllocator) {
    ATTNRT_ASSIGN_OR_RETURN(AllocatorTables allocated,
                            AllocatorBlockTables(block_size, max_context, lengths, seed));
    placed.num_blocks = std::max(allocated.pool_blocks, 1);
    for (std::size_t i = 0; i < rows; ++i) {
      std::copy(allocated.tables[i].begin(), allocated.tables[i].end(),
                placed.tables.begin() + static_cast<std::ptrdiff_t>(i * max_blocks));
    }
    return placed;
  }
  for (int len : lengths) placed.num_blocks += (len + block_size - 1) / block_size;
  placed.num_blocks = std::max(placed.num_blocks, 1);
  // Block ids shuffled (the order only has to be non-contiguous), or in order.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(placed.num_blocks));
  if (order == BlockOrder::kShuffled) {
    ids = kernels::ShuffledIds(placed.num_blocks, seed);
  } else {
    std::iota(ids.begin(), ids.end(), 0);
  }
  int next = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    for (int j = 0; j < (lengths[i] + block_size - 1) / block_size; ++j) {
      placed.tables[i * max_blocks + j] = ids[next++];
    }
  }
  return placed;
}

// One layer; row i attends lengths[i] tokens whose blocks are placed per BlockOrder. K/V are N(0,1) (FP16,
// or their E4M3 codes with every scale 1.0), q and the new token's k_new/v_new are N(0,1); out
// and lse are left unwritten. A kAppendAndDecode plan writes k_new/v_new at position length - 1
// of each row (the same values every run); a kDecode plan ignores them. The views point at its
// device memory.
struct DeviceDecodeBatch {
  ModelShape shape;
  int capacity = 0;
  int num_blocks = 0;
  std::vector<std::int32_t> kv_lengths;  // host copy
  void* k_pool = nullptr;  // FP16 elements, or one-byte E4M3 codes
  void* v_pool = nullptr;
  std::int32_t* d_lengths = nullptr;
  std::int32_t* d_layers = nullptr;
  std::int32_t* d_tables = nullptr;
  Half* q = nullptr;
  Half* k_new = nullptr;  // [capacity][Hkv][D]
  Half* v_new = nullptr;
  Half* out = nullptr;
  float* lse = nullptr;
  float* d_scales = nullptr;  // FP8 cache: K's then V's scale per kv head (1.0); null for FP16
  kernels::KvPoolView pools{};
  kernels::DecodeBatchView batch{};

  // InvalidArgument when the shape is invalid, has more than one layer, `lengths` is empty or a
  // length is outside [0, shape.max_context]; Internal naming the CUDA call that failed. Fills
  // on `stream` and synchronises it.
  static StatusOr<std::unique_ptr<DeviceDecodeBatch>> Create(const ModelShape& s,
                                                             const std::vector<int>& lengths,
                                                             cudaStream_t stream,
                                                             std::uint64_t seed = 1,
                                                             BlockOrder order = BlockOrder::kShuffled) {
    std::unique_ptr<DeviceDecodeBatch> b(new DeviceDecodeBatch());
    ATTNRT_RETURN_IF_ERROR(b->Init(s, lengths, stream, seed, order));
    return std::move(b);  // a converting move into StatusOr
  }
  ~DeviceDecodeBatch() {
    for (void* p : {k_pool, v_pool, static_cast<void*>(d_lengths), static_cast<void*>(d_layers),
                    static_cast<void*>(d_tables), static_cast<void*>(q),
                    static_cast<void*>(k_new), static_cast<void*>(v_new), static_cast<void*>(out),
                    static_cast<void*>(lse), static_cast<void*>(d_scales)}) {
      cudaFree(p);  // null for what was never allocated
    }
  }
  DeviceDecodeBatch(const DeviceDecodeBatch&) = delete;
  DeviceDecodeBatch& operator=(const DeviceDecodeBatch&) = delete;

  bool fp8() const { return shape.kv_cache_type == KvCacheType::kFp8E4M3; }
  // Bytes of K and V the live rows attend (each read once: the fused kernel's floor).
  double kv_bytes() const {
    double tokens = 0;
    for (int len : kv_lengths) tokens += len;
    return tokens * shape.num_kv_heads * shape.head_dim * 2.0 * (fp8() ? 1.0 : 2.0);
  }
  // kv_bytes() plus q read and out written (FP16): what one decode step must move at least.
  double step_bytes() const {
    return kv_bytes() + 2.0 * capacity * shape.num_q_heads * shape.head_dim * sizeof(Half);
  }

 private:
  DeviceDecodeBatch() = default;

  Status Init(const ModelShape& s, const std::vector<int>& lengths, cudaStream_t stream,
              std::uint64_t seed, BlockOrder order) {
    ATTNRT_RETURN_IF_ERROR(s.Validate());
    if (s.num_layers != 1) {
      return InvalidArgumentError("DeviceDecodeBatch: shape.num_layers = " +
                                  std::to_string(s.num_layers) + ", expected 1");
    }
    if (lengths.empty()) return InvalidArgumentError("DeviceDecodeBatch: lengths is empty");
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      if (lengths[i] < 0 || lengths[i] > s.max_context) {
        return InvalidArgumentError("DeviceDecodeBatch: lengths[" + std::to_string(i) + "] = " +
                                    std::to_string(lengths[i]) + ", expected in [0, " +
                                    std::to_string(s.max_context) + "] (shape.max_context)");
      }
    }
    shape = s;
    capacity = static_cast<int>(lengths.size());
    const int bs = s.block_size;
    const int max_blocks = s.max_blocks_per_sequence();
    ATTNRT_ASSIGN_OR_RETURN(PlacedTables placed,
                            PlaceBlockTables(bs, s.max_context, lengths, order, seed));
    num_blocks = placed.num_blocks;
    const std::vector<std::int32_t>& tables = placed.tables;
    kv_lengths.assign(lengths.begin(), lengths.end());
    const std::vector<std::int32_t> layers(capacity, 0);

    const std::int64_t pool_elems =
        static_cast<std::int64_t>(num_blocks) * s.num_kv_heads * bs * s.head_dim;
    const std::int64_t q_elems = static_cast<std::int64_t>(capacity) * s.num_q_heads * s.head_dim;
    const std::size_t pool_bytes = static_cast<std::size_t>(pool_elems) * (fp8() ? 1 : 2);
    ATTNRT_CUDA_RETURN(cudaMalloc(&k_pool, pool_bytes));
    ATTNRT_CUDA_RETURN(cudaMalloc(&v_pool, pool_bytes));
    const std::int64_t new_elems = static_cast<std::int64_t>(capacity) * s.kv_token_elems();
    ATTNRT_CUDA_RETURN(cudaMalloc(&q, q_elems * sizeof(Half)));
    ATTNRT_CUDA_RETURN(cudaMalloc(&k_new, new_elems * sizeof(Half)));
    ATTNRT_CUDA_RETURN(cudaMalloc(&v_new, new_elems * sizeof(Half)));
    ATTNRT_CUDA_RETURN(cudaMalloc(&out, q_elems * sizeof(Half)));
    ATTNRT_CUDA_RETURN(cudaMalloc(&lse, static_cast<std::size_t>(capacity) * s.num_q_heads * 4));
    ATTNRT_CUDA_RETURN(cudaMalloc(&d_lengths, capacity * 4));
    ATTNRT_CUDA_RETURN(cudaMalloc(&d_layers, capacity * 4));
    ATTNRT_CUDA_RETURN(cudaMalloc(&d_tables, tables.size() * 4));
    ATTNRT_CUDA_RETURN(
        cudaMemcpy(d_lengths, kv_lengths.data(), capacity * 4, cudaMemcpyHostToDevice));
    ATTNRT_CUDA_RETURN(cudaMemcpy(d_layers, layers.data(), capacity * 4, cudaMemcpyHostToDevice));
    ATTNRT_CUDA_RETURN(
        cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
    if (fp8()) {  // one E4M3 code per element, scales 1.0
      ATTNRT_RETURN_IF_ERROR(
          FillNormalAsync(static_cast<std::uint8_t*>(k_pool), pool_elems, seed * 3 + 0, stream));
      ATTNRT_RETURN_IF_ERROR(
          FillNormalAsync(static_cast<std::uint8_t*>(v_pool), pool_elems, seed * 3 + 1, stream));
      const std::vector<float> ones(2 * s.num_kv_heads, 1.0f);
      ATTNRT_CUDA_RETURN(cudaMalloc(&d_scales, ones.size() * sizeof(float)));
      ATTNRT_CUDA_RETURN(cudaMemcpy(d_scales, ones.data(), ones.size() * sizeof(float),
                                    cudaMemcpyHostToDevice));
    } else {
      ATTNRT_RETURN_IF_ERROR(
          FillNormalAsync(static_cast<__half*>(k_pool), pool_elems, seed * 3 + 0, stream));
      ATTNRT_RETURN_IF_ERROR(
          FillNormalAsync(static_cast<__half*>(v_pool), pool_elems, seed * 3 + 1, stream));
    }
    ATTNRT_RETURN_IF_ERROR(
        FillNormalAsync(reinterpret_cast<__half*>(q), q_elems, seed * 3 + 2, stream));
    ATTNRT_RETURN_IF_ERROR(
        FillNormalAsync(reinterpret_cast<__half*>(k_new), new_elems, seed * 5 + 3, stream));
    ATTNRT_RETURN_IF_ERROR(
        FillNormalAsync(reinterpret_cast<__half*>(v_new), new_elems, seed * 5 + 4, stream));
    ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream));

    pools.k = static_cast<Half*>(k_pool);
    pools.v = static_cast<Half*>(v_pool);
    pools.num_layers = 1;
    pools.num_blocks = num_blocks;
    pools.num_kv_heads = s.num_kv_heads;
    pools.block_size = bs;
    pools.head_dim = s.head_dim;
    pools.scales = d_scales;
    batch.capacity = capacity;
    batch.num_q_heads = s.num_q_heads;
    batch.max_blocks_per_seq = max_blocks;
    batch.kv_lengths = d_lengths;
    batch.layers = d_layers;
    batch.block_tables = d_tables;
    batch.q = q;
    batch.k_new = k_new;
    batch.v_new = v_new;
    batch.out = out;
    batch.lse = lse;
    batch.scale = s.scale();
    return Status::Ok();
  }
};

// ---- timing a plan's runs ----------------------------------------------------------------
struct RunTiming {
  int min_steps = 20;  // runs per graph replay, rounded up to a multiple of the number of sets
  int warmups = 2;     // untimed replays first
  int replays = 7;     // timed replays: the median is reported
};

// Runs in one graph replay of MedianRunUs over `sets` input sets: timing.min_steps rounded up
// to a multiple of `sets`.
inline int StepsPerReplay(const RunTiming& timing, int sets) {
  return std::max(1, (timing.min_steps + sets - 1) / sets) * sets;
}

// Median µs per run of `plan` (by its variant's run, DecodeVariant named plan.variant) over
// `sets`: one CUDA graph of StepsPerReplay(timing, sets.size()) runs cycling through the sets,
// replayed timing.warmups times, then timed timing.replays times between two events on
// context.stream; each replay's time / its runs, the median of those. context.stream must be a
// created stream (capture refuses the legacy one); context.cublas set where plan.uses_cublas;
// `workspace` at least plan.workspace_bytes, prepared (kernels::PrepareDecodeWorkspace). Run the plan once eagerly before (module loading,
// cuBLAS's kernel choice) to keep that out of the capture. Sets together larger than L2 keep
// each run from reading K/V the previous one left there. Errors: a run's own (the capture is
// ended, nothing left half-captured), InvalidArgument for no sets or replays < 1, Internal
// naming the CUDA call. `per_run`, where set, adjusts run i's copy of `context` before it is
// captured (bench/kernels_cta_trace_bench: where run i stamps its phases; every replay writes
// them again, so after the call they hold the last replay's).
inline StatusOr<double> MedianRunUs(
    const kernels::DecodePlan& plan, const std::vector<std::unique_ptr<DeviceDecodeBatch>>& sets,
    kernels::DecodeWorkspace workspace, const kernels::DecodeRunContext& context,
    const RunTiming& timing = {},
    const std::function<void(int run, kernels::DecodeRunContext& context)>& per_run = {}) {
  if (sets.empty()) return InvalidArgumentError("MedianRunUs: no input sets");
  if (timing.replays < 1) {
    return InvalidArgumentError("MedianRunUs: timing.replays = " +
                                std::to_string(timing.replays) + ", expected >= 1");
  }
  ATTNRT_ASSIGN_OR_RETURN(const kernels::DecodeVariant* variant,
                          kernels::FindDecodeVariant(plan.variant));
  const int n = static_cast<int>(sets.size());
  const int steps = StepsPerReplay(timing, n);
  cudaStream_t stream = context.stream;
  ATTNRT_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < steps; ++i) {
    const DeviceDecodeBatch& b = *sets[i % n];
    kernels::DecodeRunContext run_context = context;
    if (per_run) per_run(i, run_context);
    if (Status st = variant->run(plan, b.batch, b.pools, workspace, run_context); !st.ok()) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);  // leaves the stream usable; the error is `st`
      if (partial != nullptr) cudaGraphDestroy(partial);
      return st;
    }
  }
  cudaGraph_t raw_graph = nullptr;
  ATTNRT_CUDA_RETURN(cudaStreamEndCapture(stream, &raw_graph));
  const GraphHandle graph(raw_graph);
  cudaGraphExec_t raw_exec = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphInstantiate(&raw_exec, graph.get(), 0));
  const GraphExecHandle exec(raw_exec);
  EventHandle start, stop;
  ATTNRT_RETURN_IF_ERROR(CreateEvent(&start));
  ATTNRT_RETURN_IF_ERROR(CreateEvent(&stop));
  for (int w = 0; w < timing.warmups; ++w) ATTNRT_CUDA_RETURN(cudaGraphLaunch(exec.get(), stream));
  std::vector<double> us;
  for (int r = 0; r < timing.replays; ++r) {
    ATTNRT_CUDA_RETURN(cudaEventRecord(start.get(), stream));
    ATTNRT_CUDA_RETURN(cudaGraphLaunch(exec.get(), stream));
    ATTNRT_CUDA_RETURN(cudaEventRecord(stop.get(), stream));
    ATTNRT_CUDA_RETURN(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    ATTNRT_CUDA_RETURN(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    us.push_back(static_cast<double>(ms) * 1e3 / steps);
  }
  return Median(us);
}

}  // namespace attnrt::tools
