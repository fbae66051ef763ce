// What both split-KV families share: the plan (grid and splits per (shape, capacity)), the
// workspace layout, the merge kernel, and the launcher (programmatic dependent launch for the
// decode and merge kernels).
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_merge.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

constexpr int kMaxSplits = 64;
// Without a device (host-only builds asking for workspace sizes) an H100 is assumed.
constexpr int kFallbackSms = 132;
constexpr int kFallbackCtasPerSm = 4;

// One CTA per (q head, slot) that was split: out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M).
template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim / 4) SplitKvMergeKernel(const SplitKvParams p) {
  WaitForPrerequisiteGrids();  // the partials come from the decode kernel just before
  const int h = blockIdx.x;
  const int slot = blockIdx.y;
  const int len = p.kv_lengths[slot];
  if (len <= 0) return;
  const SlotSplit ss = SplitSlot(len, p.plan);
  if (ss.num_splits == 1) return;  // the decode kernel wrote this slot's output itself
  const std::int64_t row = static_cast<std::int64_t>(slot) * p.num_q_heads + h;
  const float* lse = p.partial_lse + row * p.plan.max_splits;
  const int d = threadIdx.x * 4;
  // A split's partial is already normalised (its l is 1) and its LSE is in log2 units.
  const AttentionState<float4> s = MergeAttentionStates<float4>(
      ss.num_splits, [&](int split) { return lse[split]; }, [](int) { return 1.0f; },
      [&](int split) {
        return *reinterpret_cast<const float4*>(
            p.partial_out + (row * p.plan.max_splits + split) * kHeadDim + d);
      });
  StoreOutput<Normalize::kReciprocal, ScoreUnits::kLog2>(
      reinterpret_cast<__half*>(p.out) + row * kHeadDim, p.lse, row, d, s);
}

StatusOr<SplitKvKernel> KernelFor(SplitKvFamily family, const SplitKvLaunchConfig& config,
                                  const ModelShape& shape) {
  return family == SplitKvFamily::kSimt ? SimtKernelFor(shape.head_dim, shape.group_size())
                                        : TcKernelFor(shape.head_dim, config.warps);
}

struct DeviceFacts {
  int sms = kFallbackSms;
  int resident_ctas = kFallbackSms * kFallbackCtasPerSm;
  bool ok = false;
};

// SM count and resident CTAs of a kernel on the current device, cached per kernel (the plan must
// not change between a capture and its replays). Also raises the kernel's dynamic shared-memory
// limit once, before its first launch.
DeviceFacts Prepare(const SplitKvKernel& k) {
  static std::mutex mu;
  static std::vector<std::pair<const void*, DeviceFacts>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [fn, facts] : cache) {
    if (fn == k.fn) return facts;
  }
  DeviceFacts f;
  int device = 0, sms = 0, per_sm = 0;
  const bool ok =
      cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
      (k.smem_bytes <= 48 * 1024 ||
       cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes) ==
           cudaSuccess) &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, k.smem_bytes) ==
          cudaSuccess &&
      sms > 0 && per_sm > 0;
  if (!ok) {
    cudaGetLastError();  // clear a "no device" error from the queries; don't cache
    return f;
  }
  f.sms = sms;
  f.resident_ctas = sms * per_sm;
  f.ok = true;
  cache.emplace_back(k.fn, f);
  return f;
}

SplitKvPlan PlanFor(const SplitKvKernel& k, const DeviceFacts& facts,
                    const SplitKvLaunchConfig& config, const ModelShape& shape, int capacity) {
  SplitKvPlan plan;
  plan.tile_tokens = k.tile_tokens;
  plan.min_tiles = std::max(1, config.min_split_tokens / plan.tile_tokens);
  const int work = std::max(1, capacity * shape.num_kv_heads);
  int splits = 1;
  if (config.ctas_per_sm > 0) {
    splits = std::max(1, facts.sms * config.ctas_per_sm / work);
  } else if (work < facts.sms) {
    // The occupancy rule: with a CTA per SM or more, each streaming 32+ KB in flight, the grid
    // already saturates HBM; below that, split until one wave of resident CTAs is full when every
    // slot is live. A slot's own length then decides how many of its splits do work.
    splits = std::max(1, facts.resident_ctas / work);
  }
  const int max_tiles = (shape.max_context + plan.tile_tokens - 1) / plan.tile_tokens;
  plan.max_splits = std::min({splits, std::max(1, max_tiles / plan.min_tiles), kMaxSplits});
  return plan;
}

std::size_t AlignUp(std::size_t x) { return (x + 255) / 256 * 256; }

struct WorkspaceLayout {
  std::size_t out_bytes = 0;
  std::size_t lse_bytes = 0;
  std::size_t total() const { return out_bytes + lse_bytes; }
};

WorkspaceLayout Layout(const ModelShape& shape, int capacity, const SplitKvPlan& plan) {
  WorkspaceLayout w;
  if (plan.max_splits <= 1 || capacity <= 0) return w;
  const std::size_t rows = static_cast<std::size_t>(capacity) * shape.num_q_heads * plan.max_splits;
  w.out_bytes = AlignUp(rows * shape.head_dim * sizeof(float));
  w.lse_bytes = AlignUp(rows * sizeof(float));
  return w;
}

Status LaunchWithPdl(const void* fn, dim3 grid, int threads, int smem, cudaStream_t stream,
                     SplitKvParams* params) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {params};
  ATTNRT_CUDA_RETURN(cudaLaunchKernelExC(&cfg, fn, args));
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
  p.scale_log2 = batch.scale * kLog2e;
  return p;
}

SplitKvPlan MakeSplitKvPlan(const ModelShape& shape, int capacity, SplitKvFamily family,
                            const SplitKvLaunchConfig& config) {
  const StatusOr<SplitKvKernel> k = KernelFor(family, config, shape);
  if (!k.ok()) return SplitKvPlan{};
  return PlanFor(*k, Prepare(*k), config, shape, capacity);
}

SplitKvPlan MakeSplitKvPlan(const ModelShape& shape, int capacity, SplitKvFamily family) {
  return MakeSplitKvPlan(shape, capacity, family, TunedLaunchConfig(family, shape, capacity));
}

std::size_t SplitKvWorkspaceBytes(SplitKvFamily family, const SplitKvLaunchConfig& config,
                                  const ModelShape& shape, int capacity) {
  if (!CheckKernelShape(shape, "split_kv").ok() ||
      !CheckLaunchConfig(family, config, shape.head_dim).ok()) {
    return 0;
  }
  return Layout(shape, capacity, MakeSplitKvPlan(shape, capacity, family, config)).total();
}

Status LaunchSplitKv(SplitKvFamily family, std::string_view name,
                     const SplitKvLaunchConfig& config, const ModelShape& shape,
                     const DecodeBatchView& batch, const KvPoolView& pools,
                     DecodeWorkspace workspace, cudaStream_t stream, bool fuse_append) {
  ATTNRT_RETURN_IF_ERROR(CheckKernelShape(shape, name));
  ATTNRT_RETURN_IF_ERROR(CheckLaunchConfig(family, config, shape.head_dim));
  if (fuse_append && family != SplitKvFamily::kTensorCore) {
    return InternalError("fused append requested from a split-KV family without it");
  }
  ATTNRT_ASSIGN_OR_RETURN(const SplitKvKernel k, KernelFor(family, config, shape));
  const SplitKvPlan plan = PlanFor(k, Prepare(k), config, shape, batch.capacity);
  const WorkspaceLayout layout = Layout(shape, batch.capacity, plan);
  ATTNRT_RETURN_IF_ERROR(CheckDecodeInputs(shape, batch.capacity, batch, pools, workspace,
                                           layout.total(), fuse_append));
  if (batch.capacity == 0) return Status::Ok();
  SplitKvParams p{};
  static_cast<PagedDecodeParams&>(p) = MakePagedDecodeParams(shape, batch, pools);
  p.plan = plan;
  p.k_new = batch.k_new;
  p.v_new = batch.v_new;
  p.fuse_append = fuse_append ? 1 : 0;
  if (layout.total() > 0) {
    p.partial_out = static_cast<float*>(workspace.data);
    p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(workspace.data) + layout.out_bytes);
  }
  ATTNRT_RETURN_IF_ERROR(LaunchWithPdl(k.fn, dim3(plan.max_splits, shape.num_kv_heads,
                                                  batch.capacity),
                                       k.threads, k.smem_bytes, stream, &p));
  if (plan.max_splits > 1) {  // else no slot can split: no merge launch at all
    const void* merge = nullptr;
    ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(shape.head_dim, [&](auto d) {
      merge = reinterpret_cast<const void*>(SplitKvMergeKernel<decltype(d)::value>);
    }));
    ATTNRT_RETURN_IF_ERROR(LaunchWithPdl(merge, dim3(batch.num_q_heads, batch.capacity),
                                         shape.head_dim / 4, 0, stream, &p));
  }
  return Status::Ok();
}

template <SplitKvFamily kFamily>
Status SplitKvSupports(const ModelShape& shape) {
  return CheckKernelShape(shape, SplitKvVariantName(kFamily));
}
template <SplitKvFamily kFamily>
std::size_t SplitKvVariantWorkspaceBytes(const ModelShape& shape, int capacity) {
  return SplitKvWorkspaceBytes(kFamily, TunedLaunchConfig(kFamily, shape, capacity), shape,
                               capacity);
}
template <SplitKvFamily kFamily>
Status SplitKvVariantLaunch(const ModelShape& shape, const DecodeBatchView& batch,
                            const KvPoolView& pools, DecodeWorkspace workspace,
                            cudaStream_t stream) {
  return LaunchSplitKv(kFamily, SplitKvVariantName(kFamily),
                       TunedLaunchConfig(kFamily, shape, batch.capacity), shape, batch, pools,
                       workspace, stream);
}

#define ATTNRT_SPLIT_KV_VARIANT(family)                                                      \
  template Status SplitKvSupports<family>(const ModelShape&);                                \
  template std::size_t SplitKvVariantWorkspaceBytes<family>(const ModelShape&, int);         \
  template Status SplitKvVariantLaunch<family>(const ModelShape&, const DecodeBatchView&,    \
                                               const KvPoolView&, DecodeWorkspace,          \
                                               cudaStream_t);
ATTNRT_SPLIT_KV_VARIANT(SplitKvFamily::kSimt)
ATTNRT_SPLIT_KV_VARIANT(SplitKvFamily::kTensorCore)
#undef ATTNRT_SPLIT_KV_VARIANT

}  // namespace attnrt::kernels
