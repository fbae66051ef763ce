// Decode attention over the paged KV cache: the CPU reference, the append-KV step, and every
// decode path (the fused CUDA kernels and the cuBLAS GEMM path) in one variant table with a
// plan/run split (FlashInfer's): `plan` decides everything on the host once per (shape, capacity,
// device); `run` is capture-safe. Tests and benchmarks loop over the table; production picks by
// name. Internal header of kernels/ (may include CUDA headers; never included from api/).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kernels/gemm_path.h"
#include "kernels/reference.h"
#include "kernels/views.h"

namespace attnrt::kernels {

// The CPU reference (ReferenceAppendKv, ReferenceDecode): kernels/reference.h.

// ---- CUDA -----------------------------------------------------------------------------------
// Append-KV kernel: writes each live row's new K/V into the device pools. A plan whose step is
// kAppendAndDecode runs it (or fuses it) itself; this is for callers that append separately.
// FP8 pools (pools.scales set) store each element quantized under its (layer, kv head) scale.
Status LaunchAppendKv(const DecodeBatchView& batch, const KvPoolView& pools, cudaStream_t stream);

// The GPU models with a launch table swept on them (kernels/launch_tables/<model>_<cache>.inc):
// split-KV plans read the table of their device's model; any other GPU reads the H100's.
enum class TunedGpu { kH100, kH200 };
inline constexpr TunedGpu kTunedGpus[] = {TunedGpu::kH100, TunedGpu::kH200};
std::string_view TunedGpuName(TunedGpu gpu);  // "h100", "h200": the table files' prefix
// The model whose table serves a device of this name (cudaDeviceProp::name): kH200 for names
// containing "H200", else kH100.
TunedGpu TunedGpuFor(std::string_view device_name);

// The GPU a plan is made for: split-KV grids are sized to fill its SMs, so a plan runs only on
// the device it was made for.
struct DecodeDevice {
  int ordinal = -1;   // CUDA device; -1 describes a device without one (host-side sizing and
                      // tests): such plans are never run, and kernels' occupancy is unknown
  int sm_count = 0;   // streaming multiprocessors
  TunedGpu tuned_gpu = TunedGpu::kH100;  // whose launch table its split-KV plans read
};
// The current CUDA device, its SM count and the launch table of its model; Unavailable naming
// the call when no device answers.
StatusOr<DecodeDevice> CurrentDecodeDevice();

// What a run does.
enum class DecodeStep {
  kDecode,           // attention over the pools as they are (the new token already appended)
  kAppendAndDecode,  // append each live row's k_new/v_new first: what a serving graph runs
};

struct DecodePlanRequest {
  ModelShape shape;
  int capacity = 0;       // rows of the batch bucket (1..65535): grids are sized for it
  int max_kv_length = 0;  // the longest kv_length the plan must run; 0 = shape.max_context
  DecodeStep step = DecodeStep::kAppendAndDecode;
  DecodeDevice device;
  // The GEMM path only: the most workspace its plan may ask for (it cuts a run into batch
  // slices and context chunks to stay within it; kernels/gemm_path.h). 0 means
  // kGemmPathDefaultMaxWorkspaceBytes.
  std::size_t max_workspace_bytes = 0;
};

// The two kernel families of split-KV flash decoding: CUDA-core FP32 dot products
// ("split_kv_simt") and tensor-core mma ("split_kv" picks one per shape from the tuned table).
enum class SplitKvFamily { kSimt, kTensorCore };

// How the split-KV kernels are launched: what study 4 (bench/kernels_launch_sweep_bench) sweeps
// and kernels/launch_tables/ record per GPU model and (head dim, group, work).
struct SplitKvLaunchConfig {
  // Warps per CTA of the tensor-core family: 2, 4 or 8 (not 8 at D = 256); its KV tile is
  // 16 * warps tokens. The SIMT family has one fixed CTA shape and ignores this.
  int warps = 4;
  // Splitting: with W = capacity * num_kv_heads work items, each (batch row, kv head) gets up to
  // sms * ctas_per_sm / W splits (at least 1). 0 = the occupancy rule: fill one wave of resident
  // CTAs when W < sms, else do not split.
  int ctas_per_sm = 0;
  int min_split_tokens = 256;  // a context is split only into pieces at least this long

  bool operator==(const SplitKvLaunchConfig&) const = default;
};

// How a row's context is cut into splits (split-KV paths). The grid has `max_splits` CTAs per
// (batch row, kv head); a row uses as many as its own length allows (at least `min_tiles` tiles
// each), the rest exit. The host (grid, workspace) and the device (SplitRow) read the same one.
struct SplitKvPlan {
  int max_splits = 1;
  int tile_tokens = 32;  // tokens a CTA consumes per pipeline step
  int min_tiles = 8;     // fewest tiles a split is given (short contexts are not split)
};

// One kernel launch a plan fixed: entry point, grid, CTA size, dynamic shared memory.
struct KernelLaunch {
  const void* fn = nullptr;  // a __global__ function; null: nothing to launch
  dim3 grid;
  int threads = 0;
  int smem_bytes = 0;
};

// Everything a run needs, decided once on the host: a graph captured from a run stays valid for
// any kv_lengths up to max_kv_length.
struct DecodePlan {
  std::string_view variant;  // the table entry that made it; only that entry's run takes it
  ModelShape shape;
  int capacity = 0;
  int max_kv_length = 0;     // the longest kv_length the plan is made for: the GEMM path's Tpad
                             // (it runs nothing longer), split-KV's context class (longer rows
                             // run correctly, only slower), else shape.max_context
  DecodeStep step = DecodeStep::kAppendAndDecode;
  bool fuses_append = false;  // the decode kernel appends (the tensor-core family); else, for
                              // kAppendAndDecode, the run launches the append kernel first
  bool uses_cublas = false;   // the run needs DecodeRunContext::cublas (the GEMM path)
  DecodeDevice device;
  std::size_t workspace_bytes = 0;  // DecodeWorkspace the run needs (0: none)
  // The workspace's first bytes that must be zero when a run starts: split-KV's arrival
  // counters (the split of a row that arrives last merges the row and resets its counter).
  // Every completed run leaves them zero again; PrepareDecodeWorkspace zeroes them once.
  // Equal for every split-KV plan of a device, so one workspace serves all of them.
  std::size_t workspace_zero_bytes = 0;
  KernelLaunch decode;  // the decode kernel (fused paths; the GEMM path's stages are in `gemm`)
  SplitKvFamily split_kv_family = SplitKvFamily::kTensorCore;  // split-KV paths: what `decode` is
  SplitKvLaunchConfig split_kv_config;  // split-KV paths
  SplitKvPlan split_kv;                 // split-KV paths
  GemmPathPlan gemm;                    // the GEMM path
};

// What a run enqueues on besides the batch.
struct DecodeRunContext {
  cudaStream_t stream = nullptr;
  // Plans with uses_cublas only. The run binds the handle to `stream` and to the plan's slice
  // of the workspace on every call, so the handle must not be used concurrently elsewhere.
  cublasHandle_t cublas = nullptr;
  // Profiling only (bench/kernels_cta_trace_bench): where the tensor-core split-KV kernel's
  // CTAs stamp their phases, kCtaTracePoints slots a CTA in grid order (x fastest); null (every
  // production run): nothing is stamped. Other kernels ignore it.
  unsigned long long* cta_trace = nullptr;
};

// The slots of a CTA in DecodeRunContext::cta_trace: %globaltimer (ns) when thread 0 reached
// each phase (0 where it never did: a CTA without work, a padding row's or a split past its
// row's, stamps its entry, its release and its exit only), and the SM it ran on.
enum CtaTracePoint : int {
  kCtaEntry,              // the kernel began
  kCtaPrerequisitesDone,  // griddepcontrol.wait returned (the earlier grids are complete)
  kCtaLengthRead,         // the row's length arrived and its split was worked out
  kCtaFirstTile,          // warp 0's first K/V tile is in shared memory
  kCtaLoopsDone,          // every warp left its main loop (the CTA's barrier)
  kCtaStored,             // the output or the split's partial is stored
  kCtaExit,               // after the cross-split merge (the last split of a row does it)
  kCtaSm,                 // %smid
  kCtaTracePoints
};

// One decode path. Every path has the same plan and run signatures; a new one adds its plan,
// its run (the shared checks and append, then its kernels) and a row of the table.
struct DecodeVariant {
  std::string_view name;
  // OK if the path runs this shape; Unimplemented naming the combination, or InvalidArgument
  // naming the field. Host only, no device needed.
  Status (*supports)(const ModelShape& shape);
  // The max_kv_length values to plan one graph each for, ascending: {shape.max_context} for a
  // path whose plan runs any length alike; split-KV's context classes; the GEMM path's Tpad
  // buckets (clipped to max_context).
  std::vector<int> (*kv_length_buckets)(const ModelShape& shape);
  // Decides grid, launch configuration, splits and workspace for the request: InvalidArgument or
  // Unimplemented naming the request field (request.capacity, request.shape.head_dim, ...)
  // when it cannot; FailedPrecondition when it needs a live device and has a description.
  StatusOr<DecodePlan> (*plan)(const DecodePlanRequest& request);
  // Enqueues the plan's work on context.stream: capture-safe (no allocation, no host sync, the
  // plan's fixed grids), for any kv_lengths up to plan.max_kv_length. InvalidArgument naming the
  // field when the views or workspace disagree with the plan (nothing is enqueued then).
  // Padded rows (kv_length 0) are never read or written.
  Status (*run)(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                DecodeWorkspace workspace, const DecodeRunContext& context);
  // Whether `run` reads DecodeBatchView::q_rows / out_rows / lse_rows (requests in place).
  bool reads_rows_in_place = false;
};

// Readies `workspace` for `plan`'s runs: zeroes its first plan.workspace_zero_bytes (enqueued
// on `stream`). Once after allocating it, and again only after a run that did not complete.
// InvalidArgument naming the field when the workspace is smaller than the plan's.
Status PrepareDecodeWorkspace(const DecodePlan& plan, DecodeWorkspace workspace,
                              cudaStream_t stream);

// Every path, simplest first. The last is the production default.
std::span<const DecodeVariant> DecodeVariants();
// The path called `name`; NotFound lists the names.
StatusOr<const DecodeVariant*> FindDecodeVariant(std::string_view name);
// The production choice.
const DecodeVariant& DefaultDecodeVariant();

}  // namespace attnrt::kernels
