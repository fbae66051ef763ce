// Internal to kernels/: what every path's plan and run share (the first steps of each, the one
// input check, the head-dim dispatch), each path's table hooks, and the split-KV plan that the
// host (grid, workspace) and the device (which CTAs work, on which tokens) compute identically.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kernels/decode.h"
#include "kernels/views.h"

namespace attnrt::kernels {

// Unimplemented naming the combination if (D, block size, group) is outside what the CUDA
// variants instantiate, or the shape's KV cache is FP8 and the variant does not read FP8
// (`reads_fp8`); InvalidArgument if the shape itself is invalid.
Status CheckKernelShape(const ModelShape& shape, std::string_view variant, bool reads_fp8 = false);

// Batch rows a decode grid may have (a grid's y and z extents are at most 65535).
inline constexpr int kMaxDecodeCapacity = 65535;

// The first step of every path's plan: checks what every plan needs (the shape through
// `supports`, request.capacity in 1..65535, request.max_kv_length in 0..shape.max_context,
// request.device.sm_count > 0) and fills the common fields (variant, shape, capacity, step,
// device, max_kv_length = shape.max_context). The path then sets its own.
StatusOr<DecodePlan> StartPlan(const DecodePlanRequest& request, std::string_view variant,
                               Status (*supports)(const ModelShape&));
// The first step of every path's run: the plan is `variant`'s and was made for the current
// device; the one input check against the plan; a cuBLAS handle where the plan uses one; then,
// for a kAppendAndDecode plan that does not fuse the append, the append kernel.
Status StartRun(const DecodePlan& plan, std::string_view variant, const DecodeBatchView& batch,
                const KvPoolView& pools, DecodeWorkspace workspace,
                const DecodeRunContext& context);
// kv_length_buckets of a path whose plan runs any length: {shape.max_context}.
std::vector<int> MaxContextBucket(const ModelShape& shape);

// The one check of a run's inputs, whatever the path: InvalidArgument naming the field and value
// when the views disagree with `shape` or `capacity`, a pointer a kernel dereferences is null or
// misaligned for its widest access (the new K/V's, CheckNewKvSources, only when `reads_new_kv`),
// or the workspace is smaller than `workspace_bytes` or not 256-byte aligned (cudaMalloc's
// alignment, which cublasSetWorkspace needs).
Status CheckDecodeInputs(const ModelShape& shape, int capacity, const DecodeBatchView& batch,
                         const KvPoolView& pools, DecodeWorkspace workspace,
                         std::size_t workspace_bytes, bool reads_new_kv);
// InvalidArgument "<name> is null" or "<name> is not <alignment>-byte aligned".
Status CheckDevicePointer(const char* name, const void* p, std::size_t alignment);
// Where a view's new K/V come from: k_rows/v_rows (both or neither) or else k_new/v_new.
Status CheckNewKvSources(const DecodeBatchView& batch);

// The append kernel for inputs that passed CheckDecodeInputs (LaunchAppendKv checks first).
Status EnqueueAppendKv(const DecodeBatchView& batch, const KvPoolView& pools, cudaStream_t stream);

// The one place a runtime head dim becomes a template argument: calls
// fn(std::integral_constant<int, D>{}) for D = head_dim in 64, 128, 256 (what ModelShape admits
// and every kernel instantiates) and returns OK; Unimplemented naming head_dim otherwise.
template <typename Fn>
Status DispatchHeadDim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 64: fn(std::integral_constant<int, 64>{}); return Status::Ok();
    case 128: fn(std::integral_constant<int, 128>{}); return Status::Ok();
    case 256: fn(std::integral_constant<int, 256>{}); return Status::Ok();
    default:
      return UnimplementedError("head_dim = " + std::to_string(head_dim) +
                                " has no kernel instance (64, 128 or 256)");
  }
}

// ---- variant "simple": one CTA per (batch row, q head), online softmax, no workspace -------
inline constexpr std::string_view kSimpleVariantName = "simple";
Status SimpleSupports(const ModelShape& shape);
StatusOr<DecodePlan> PlanSimple(const DecodePlanRequest& request);
Status RunSimple(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                 DecodeWorkspace workspace, const DecodeRunContext& context);

// ---- variant "gemm": the cuBLAS GEMM path (gemm_path.h), one plan per Tpad bucket ------------
Status GemmSupports(const ModelShape& shape);
std::vector<int> GemmKvLengthBuckets(const ModelShape& shape);
StatusOr<DecodePlan> PlanGemm(const DecodePlanRequest& request);
Status RunGemm(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
               DecodeWorkspace workspace, const DecodeRunContext& context);

// ---- split-KV flash-decoding: one CTA per (batch row, kv head, split), all G q heads per CTA
// Two kernel families (SplitKvFamily) share the plan, the workspace, the cross-split merge and
// the run. Variant "split_kv" (production) launches the family and configuration that the tuned
// table names for the shape and batch (TunedSplitKvLaunch); "split_kv_simt" always the SIMT one.
// The variant whose run takes a plan of `family` made by PlanSplitKv.
constexpr std::string_view SplitKvVariantName(SplitKvFamily family) {
  return family == SplitKvFamily::kSimt ? "split_kv_simt" : "split_kv";
}
// The variants' table hooks (instantiated for both families in split_kv_launch.cu).
template <SplitKvFamily kFamily>
Status SplitKvSupports(const ModelShape& shape);
// Split-KV plans come in two context classes, each with its own rows in the tuned table (the
// best CTA shape and splitting at 256-4096 tokens is not the best at 16K-64K): plans of
// max_kv_length <= kSplitKvShortContext, and plans of any length up to max_context.
inline constexpr int kSplitKvShortContext = 8192;
// The tuned table's row class of a plan for rows of up to `length` tokens (> 0):
// kSplitKvShortContext up to that bound, else 0 (the rows for any length).
constexpr int SplitKvRowClass(int length) {
  return length <= kSplitKvShortContext ? kSplitKvShortContext : 0;
}
// {kSplitKvShortContext, max_context} when max_context is longer, else {max_context}.
std::vector<int> SplitKvKvLengthBuckets(const ModelShape& shape);
// Variant "split_kv": the family and configuration of TunedSplitKvLaunch.
StatusOr<DecodePlan> PlanSplitKvTuned(const DecodePlanRequest& request);
// Variant "split_kv_simt": the SIMT family under TunedLaunchConfig(kSimt, ...).
StatusOr<DecodePlan> PlanSplitKvSimt(const DecodePlanRequest& request);
template <SplitKvFamily kFamily>
Status RunSplitKv(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                  DecodeWorkspace workspace, const DecodeRunContext& context);

// The plan of `family` under `config` (study 4's sweep, the configuration tests); its run is the
// family's entry in the table. With request.step kAppendAndDecode the tensor-core kernel fuses
// the append. Needs a live device for the occupancy rule (config.ctas_per_sm = 0):
// FailedPrecondition naming it on a described device. On a live device, raises the kernel's
// dynamic shared-memory limit (before any launch, so a later capture launches nothing new).
StatusOr<DecodePlan> PlanSplitKv(SplitKvFamily family, const SplitKvLaunchConfig& config,
                                 const DecodePlanRequest& request);

// The splits a row of `kv_length` tokens uses under a plan: the host and every split-KV kernel
// compute it from the same SplitKvPlan.
struct RowSplit {
  int num_splits;
  int tiles_per_split;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline RowSplit SplitRow(int kv_length, const SplitKvPlan& plan) {
  const int tiles = (kv_length + plan.tile_tokens - 1) / plan.tile_tokens;
  int splits = tiles / plan.min_tiles;
  splits = splits < 1 ? 1 : (splits > plan.max_splits ? plan.max_splits : splits);
  const int tiles_per_split = (tiles + splits - 1) / splits;
  return {(tiles + tiles_per_split - 1) / tiles_per_split, tiles_per_split};
}

// "warps=4 ctas_per_sm=0 min_split_tokens=256" (logs, reports, test names).
std::string ToString(const SplitKvLaunchConfig& config);
// InvalidArgument naming the field when a configuration is outside what the kernels support
// for that head dim and KV cache type.
Status CheckLaunchConfig(SplitKvFamily family, const SplitKvLaunchConfig& config, int head_dim,
                         KvCacheType kv_cache_type = KvCacheType::kFp16);

// One row of the tuned table: the kernel family and configuration for a (head_dim, group) at
// work items (capacity * num_kv_heads) >= min_work, up to the next row's min_work, for plans of
// the context class `max_kv_length` (kSplitKvShortContext: plans of max_kv_length <= it; 0: any
// plan, the rows a short plan falls back to where its class has none). Rows written before the
// table chose the family or the class leave them out (tensor cores, any length).
struct TunedLaunchRow {
  int head_dim;
  int group;
  int min_work;
  SplitKvLaunchConfig config;
  SplitKvFamily family = SplitKvFamily::kTensorCore;
  int max_kv_length = 0;
};
// The rows compiled in for a GPU model and KV cache type, each sorted by (head_dim, group,
// max_kv_length, min_work): FP16 from kernels/launch_tables/<model>_fp16.inc, FP8 E4M3 from
// kernels/launch_tables/h100_fp8.inc for every model (each written by
// bench/kernels_launch_sweep_bench --kv-cache-type ... --table-out on that GPU).
std::span<const TunedLaunchRow> TunedLaunchTable(TunedGpu gpu,
                                                 KvCacheType kv_cache_type = KvCacheType::kFp16);
struct TunedSplitKv {
  SplitKvFamily family = SplitKvFamily::kTensorCore;
  SplitKvLaunchConfig config;
};
// What variant "split_kv" launches for (shape, capacity) in a plan of `max_kv_length` (0:
// shape.max_context) on a `gpu`: the row of its table for the shape's cache type and the plan's
// context class, or the tensor-core family under the default configuration where the table has
// none. An FP8 shape whose (head_dim, group) has no FP8 row takes the FP16 row's splitting on
// the tensor-core family with the CTA size built for FP8 (kTcFp8Warps).
TunedSplitKv TunedSplitKvLaunch(const ModelShape& shape, int capacity, int max_kv_length,
                                TunedGpu gpu);
// The configuration of `family` for (shape, capacity, max_kv_length): TunedSplitKvLaunch's where
// it names this family, else the default configuration.
SplitKvLaunchConfig TunedLaunchConfig(SplitKvFamily family, const ModelShape& shape, int capacity,
                                      int max_kv_length, TunedGpu gpu);

// Kernel arguments every paged-decode kernel takes: the pools, the batch's metadata, q, out, lse.
struct PagedDecodeParams {
  const Half* k;
  const Half* v;
  std::int64_t layer_stride;
  std::int64_t block_stride;
  int log2_block_size;  // block sizes are powers of two (CheckKernelShape)
  int num_q_heads;
  int group;
  int max_blocks_per_seq;
  const std::int32_t* kv_lengths;
  const std::int32_t* layers;
  const std::int32_t* block_tables;
  const Half* q;
  Half* out;
  float* lse;
  // DecodeBatchView::q_rows / out_rows / lse_rows (null: q, out and lse above).
  const std::uint64_t* q_rows;
  const std::uint64_t* out_rows;
  const std::uint64_t* lse_rows;
  float scale_log2;  // softmax scale * log2(e): scores in log2 units
  // FP8 E4M3 pools only (k and v then hold codes): [2][num_layers][num_kv_heads] scales, K's
  // then V's (ModelShape::kv_scale_index); null for FP16.
  const float* kv_scales;
  int num_layers;
};
// From views that passed CheckDecodeInputs.
PagedDecodeParams MakePagedDecodeParams(const ModelShape& shape, const DecodeBatchView& batch,
                                        const KvPoolView& pools);

// Kernel arguments shared by both split-KV families.
struct SplitKvParams : PagedDecodeParams {
  SplitKvPlan plan;
  unsigned* split_counters;  // [capacity][Hkv] splits arrived; zero between runs
  float* partial_out;  // [capacity][H][max_splits][D]
  float* partial_lse;  // [capacity][H][max_splits], log2 units
  const Half* k_new;   // [capacity][Hkv][D], read when fuse_append and k_rows is null
  const Half* v_new;
  const std::uint64_t* k_rows;  // DecodeBatchView::k_rows / v_rows (null: k_new, v_new)
  const std::uint64_t* v_rows;
  int fuse_append;     // 1: the kernel also appends k_new/v_new (tensor-core family only)
  unsigned long long* cta_trace;  // DecodeRunContext::cta_trace (profiling; null in production)
};

// One decode kernel of a family: its entry point and launch geometry (fn null if not built).
struct SplitKvKernel {
  const void* fn = nullptr;  // __global__ void (SplitKvParams)
  int threads = 128;
  int smem_bytes = 0;        // dynamic shared memory
  int tile_tokens = 32;
};
// Defined by each family's file: Unimplemented for a head dim or group without an instance,
// InvalidArgument naming config.warps for a CTA size not built at this head dim. Both read an
// FP8 E4M3 cache (`fp8`); the tensor-core family with 4 warps only.
StatusOr<SplitKvKernel> SimtKernelFor(int head_dim, int group, bool fp8 = false);
StatusOr<SplitKvKernel> TcKernelFor(int head_dim, int warps, bool fp8 = false);
// The only CTA size the tensor-core family builds for an FP8 cache.
inline constexpr int kTcFp8Warps = 4;

}  // namespace attnrt::kernels
