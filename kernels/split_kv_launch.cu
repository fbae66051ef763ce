// What both split-KV families share: the plan (kernel, grid and splits for a (shape, capacity,
// device, launch configuration)), the workspace layout (arrival counters, partials) and the run
// (one decode kernel, launched with programmatic dependent launch; the split of a row that
// arrives last merges the row, attention_merge.cuh's MergeSplitsIfLast).
#include <algorithm>
#include <cstdint>
#include <string>

#include "api/internal/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

constexpr int kMaxSplits = 64;
// Dynamic shared memory a kernel gets without opting in (cudaFuncSetAttribute).
constexpr int kDefaultDynamicSmemBytes = 48 * 1024;

StatusOr<SplitKvKernel> KernelFor(SplitKvFamily family, const SplitKvLaunchConfig& config,
                                  const ModelShape& shape) {
  const bool fp8 = shape.kv_cache_type == KvCacheType::kFp8E4M3;
  return family == SplitKvFamily::kSimt ? SimtKernelFor(shape.head_dim, shape.group_size(), fp8)
                                        : TcKernelFor(shape.head_dim, config.warps, fp8);
}

// Readies kernel `k` on the plan's device and returns the CTAs of it an SM holds at once, which
// the occupancy rule (config.ctas_per_sm = 0) needs; 0 when the configuration does not use it.
// On a live device it raises the kernel's dynamic shared-memory limit, before its first launch.
StatusOr<int> PrepareKernel(const SplitKvKernel& k, const DecodeDevice& device,
                            const SplitKvLaunchConfig& config) {
  const bool occupancy_rule = config.ctas_per_sm == 0;
  if (device.ordinal < 0) {
    if (!occupancy_rule) return 0;
    return FailedPreconditionError(
        "config.ctas_per_sm = 0 (the occupancy rule) needs the kernel's occupancy on a live "
        "device; request.device.ordinal = " + std::to_string(device.ordinal));
  }
  int current = -1;
  ATTNRT_CUDA_RETURN(cudaGetDevice(&current));
  if (current != device.ordinal) {
    return FailedPreconditionError("request.device.ordinal = " + std::to_string(device.ordinal) +
                                   ", but the current CUDA device is " + std::to_string(current));
  }
  if (k.smem_bytes > kDefaultDynamicSmemBytes) {
    ATTNRT_CUDA_RETURN(
        cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes));
  }
  if (!occupancy_rule) return 0;
  int per_sm = 0;
  ATTNRT_CUDA_RETURN(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, k.smem_bytes));
  if (per_sm < 1) {
    return InternalError("the split-KV kernel fits no CTA on an SM (" +
                         std::to_string(k.threads) + " threads, " +
                         std::to_string(k.smem_bytes) + " B of dynamic shared memory)");
  }
  return per_sm;
}

// The splits of kernel `k` for (shape, capacity) on `sm_count` SMs holding `ctas_per_sm_resident`
// of its CTAs each (used by the occupancy rule only).
SplitKvPlan SplitsFor(const SplitKvKernel& k, int sm_count, int ctas_per_sm_resident,
                      const SplitKvLaunchConfig& config, const ModelShape& shape, int capacity,
                      int max_kv_length) {
  SplitKvPlan plan;
  plan.tile_tokens = k.tile_tokens;
  plan.min_tiles = std::max(1, config.min_split_tokens / plan.tile_tokens);
  const int work = std::max(1, capacity * shape.num_kv_heads);
  int splits = 1;
  if (config.ctas_per_sm > 0) {
    splits = std::max(1, sm_count * config.ctas_per_sm / work);
  } else if (work < sm_count) {
    // The occupancy rule: with a CTA per SM or more, each streaming 32+ KB in flight, the grid
    // already saturates HBM; below that, split until one wave of resident CTAs is full when every
    // row is live. A row's own length then decides how many of its splits do work.
    splits = std::max(1, sm_count * ctas_per_sm_resident / work);
  }
  const int max_tiles = (max_kv_length + plan.tile_tokens - 1) / plan.tile_tokens;
  plan.max_splits = std::min({splits, std::max(1, max_tiles / plan.min_tiles), kMaxSplits});
  return plan;
}

std::size_t AlignUp(std::size_t x) { return (x + 255) / 256 * 256; }

// The longest length a split-KV plan for `requested` (0: max_context) runs: its context class's
// bound.
int SplitKvPlanLength(const ModelShape& shape, int requested) {
  const int length = requested > 0 ? requested : shape.max_context;
  return SplitKvRowClass(length) != 0 ? std::min(kSplitKvShortContext, shape.max_context)
                                      : shape.max_context;
}

// Arrival counters a device's split-KV plans provide for: a plan splits only while its work
// items (capacity * num_kv_heads) stay below sm_count * ctas_per_sm / 2 (ctas_per_sm <= 64) or
// below sm_count (the occupancy rule), so sm_count * 32 counters serve every plan; the region's
// size depends on the device alone, and one workspace serves every plan of it.
constexpr int kSplitCountersPerSm = 32;

struct WorkspaceLayout {
  std::size_t counter_bytes = 0;  // [capacity][Hkv] arrival counters at the start (zero between runs)
  std::size_t out_bytes = 0;
  std::size_t lse_bytes = 0;
  std::size_t total() const { return counter_bytes + out_bytes + lse_bytes; }
};

WorkspaceLayout Layout(const ModelShape& shape, int capacity, const SplitKvPlan& plan,
                       int sm_count) {
  WorkspaceLayout w;
  if (plan.max_splits <= 1 || capacity <= 0) return w;
  w.counter_bytes = AlignUp(sizeof(unsigned) * static_cast<std::size_t>(sm_count) *
                            kSplitCountersPerSm);
  const std::size_t rows = static_cast<std::size_t>(capacity) * shape.num_q_heads * plan.max_splits;
  w.out_bytes = AlignUp(rows * shape.head_dim * sizeof(float));
  w.lse_bytes = AlignUp(rows * sizeof(float));
  return w;
}

Status LaunchWithPdl(const KernelLaunch& launch, cudaStream_t stream, SplitKvParams* params) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = launch.grid;
  cfg.blockDim = dim3(launch.threads);
  cfg.dynamicSmemBytes = launch.smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {params};
  ATTNRT_CUDA_RETURN(cudaLaunchKernelExC(&cfg, launch.fn, args));
  return Status::Ok();
}

}  // namespace

PagedDecodeParams MakePagedDecodeParams(const ModelShape& shape, const DecodeBatchView& batch,
                                        const KvPoolView& pools) {
  PagedDecodeParams p{};
  p.k = pools.k;
  p.v = pools.v;
  p.layer_stride = pools.layer_stride();
  p.block_stride = pools.block_stride();
  p.log2_block_size = __builtin_ctz(static_cast<unsigned>(shape.block_size));
  p.num_q_heads = batch.num_q_heads;
  p.group = shape.group_size();
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.kv_lengths = batch.kv_lengths;
  p.layers = batch.layers;
  p.block_tables = batch.block_tables;
  p.q = batch.q;
  p.out = batch.out;
  p.lse = batch.lse;
  p.q_rows = batch.q_rows;
  p.out_rows = batch.out_rows;
  p.lse_rows = batch.lse_rows;
  p.scale_log2 = batch.scale * kLog2e;
  p.kv_scales = shape.kv_cache_type == KvCacheType::kFp16 ? nullptr : pools.scales;
  p.num_layers = shape.num_layers;
  return p;
}

StatusOr<DecodePlan> PlanSplitKv(SplitKvFamily family, const SplitKvLaunchConfig& config,
                                 const DecodePlanRequest& request) {
  ATTNRT_ASSIGN_OR_RETURN(
      DecodePlan plan,
      StartPlan(request, SplitKvVariantName(family),
                family == SplitKvFamily::kSimt ? SplitKvSupports<SplitKvFamily::kSimt>
                                               : SplitKvSupports<SplitKvFamily::kTensorCore>));
  const ModelShape& shape = plan.shape;
  ATTNRT_RETURN_IF_ERROR(CheckLaunchConfig(family, config, shape.head_dim));
  ATTNRT_ASSIGN_OR_RETURN(const SplitKvKernel k, KernelFor(family, config, shape));
  ATTNRT_ASSIGN_OR_RETURN(const int resident, PrepareKernel(k, request.device, config));
  plan.split_kv_family = family;
  plan.split_kv_config = config;
  // The plan's context class: a plan for short contexts caps its splits by its own bound.
  plan.max_kv_length = SplitKvPlanLength(shape, request.max_kv_length);
  plan.split_kv = SplitsFor(k, request.device.sm_count, resident, config, shape, plan.capacity,
                            plan.max_kv_length);
  plan.fuses_append =
      family == SplitKvFamily::kTensorCore && plan.step == DecodeStep::kAppendAndDecode;
  if (plan.split_kv.max_splits > 1 &&
      static_cast<long long>(plan.capacity) * shape.num_kv_heads >
          static_cast<long long>(request.device.sm_count) * kSplitCountersPerSm) {
    return InternalError("split-KV plan splits " + std::to_string(plan.capacity) + " x " +
                         std::to_string(shape.num_kv_heads) +
                         " work items, more than its arrival counters hold");
  }
  const WorkspaceLayout layout =
      Layout(shape, plan.capacity, plan.split_kv, request.device.sm_count);
  plan.workspace_bytes = layout.total();
  plan.workspace_zero_bytes = layout.counter_bytes;
  plan.decode = {k.fn, dim3(plan.split_kv.max_splits, shape.num_kv_heads, plan.capacity),
                 k.threads, k.smem_bytes};
  return plan;
}

template <SplitKvFamily kFamily>
Status SplitKvSupports(const ModelShape& shape) {
  return CheckKernelShape(shape, SplitKvVariantName(kFamily), /*reads_fp8=*/true);
}

std::vector<int> SplitKvKvLengthBuckets(const ModelShape& shape) {
  if (SplitKvRowClass(shape.max_context) != 0) return {shape.max_context};
  return {kSplitKvShortContext, shape.max_context};
}

StatusOr<DecodePlan> PlanSplitKvTuned(const DecodePlanRequest& request) {
  // (An out-of-range capacity picks some row; StartPlan then rejects the request naming it.)
  const int capacity = std::clamp(request.capacity, 1, kMaxDecodeCapacity);
  const TunedSplitKv tuned = TunedSplitKvLaunch(request.shape, capacity, request.max_kv_length,
                                                request.device.tuned_gpu);
  ATTNRT_ASSIGN_OR_RETURN(DecodePlan plan, PlanSplitKv(tuned.family, tuned.config, request));
  plan.variant = SplitKvVariantName(SplitKvFamily::kTensorCore);  // "split_kv", either family
  return plan;
}

StatusOr<DecodePlan> PlanSplitKvSimt(const DecodePlanRequest& request) {
  const int capacity = std::clamp(request.capacity, 1, kMaxDecodeCapacity);
  return PlanSplitKv(SplitKvFamily::kSimt,
                     TunedLaunchConfig(SplitKvFamily::kSimt, request.shape, capacity,
                                       request.max_kv_length, request.device.tuned_gpu),
                     request);
}

template <SplitKvFamily kFamily>
Status RunSplitKv(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                  DecodeWorkspace workspace, const DecodeRunContext& context) {
  ATTNRT_RETURN_IF_ERROR(
      StartRun(plan, SplitKvVariantName(kFamily), batch, pools, workspace, context));
  SplitKvParams p{};
  static_cast<PagedDecodeParams&>(p) = MakePagedDecodeParams(plan.shape, batch, pools);
  p.plan = plan.split_kv;
  p.k_new = batch.k_new;
  p.v_new = batch.v_new;
  p.k_rows = batch.k_rows;
  p.v_rows = batch.v_rows;
  p.fuse_append = plan.fuses_append ? 1 : 0;
  p.cta_trace = context.cta_trace;
  const WorkspaceLayout layout =
      Layout(plan.shape, plan.capacity, plan.split_kv, plan.device.sm_count);
  if (layout.total() > 0) {
    char* ws = static_cast<char*>(workspace.data);
    p.split_counters = reinterpret_cast<unsigned*>(ws);
    p.partial_out = reinterpret_cast<float*>(ws + layout.counter_bytes);
    p.partial_lse = reinterpret_cast<float*>(ws + layout.counter_bytes + layout.out_bytes);
  }
  return LaunchWithPdl(plan.decode, context.stream, &p);
}

#define ATTNRT_SPLIT_KV_VARIANT(family)                                                     \
  template Status SplitKvSupports<family>(const ModelShape&);                               \
  template Status RunSplitKv<family>(const DecodePlan&, const DecodeBatchView&,             \
                                     const KvPoolView&, DecodeWorkspace,                    \
                                     const DecodeRunContext&);
ATTNRT_SPLIT_KV_VARIANT(SplitKvFamily::kSimt)
ATTNRT_SPLIT_KV_VARIANT(SplitKvFamily::kTensorCore)
#undef ATTNRT_SPLIT_KV_VARIANT

}  // namespace attnrt::kernels
