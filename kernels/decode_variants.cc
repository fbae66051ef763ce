// The variant table (simplest first, production default last), the first steps every path's
// plan and run share, and the one input check.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"
#include "kernels/variant_names.h"

namespace attnrt::kernels {
namespace {

constexpr SplitKvFamily kSimt = SplitKvFamily::kSimt;
constexpr SplitKvFamily kTensorCore = SplitKvFamily::kTensorCore;

constexpr std::array<DecodeVariant, 4> kVariants = {{
    {kSimpleVariantName, SimpleSupports, MaxContextBucket, PlanSimple, RunSimple, false},
    {kGemmVariantName, GemmSupports, GemmKvLengthBuckets, PlanGemm, RunGemm, false},
    {SplitKvVariantName(kSimt), SplitKvSupports<kSimt>, SplitKvKvLengthBuckets, PlanSplitKvSimt,
     RunSplitKv<kSimt>, true},
    // Either family, as the tuned table says (RunSplitKv launches whichever the plan holds).
    {SplitKvVariantName(kTensorCore), SplitKvSupports<kTensorCore>, SplitKvKvLengthBuckets,
     PlanSplitKvTuned, RunSplitKv<kTensorCore>, true},
}};

// The CUDA-free list of names (variant_names.h) is this table's, in order.
constexpr bool NamesMatchTable() {
  if (kVariants.size() != kDecodeVariantNames.size()) return false;
  for (std::size_t i = 0; i < kVariants.size(); ++i) {
    if (kVariants[i].name != kDecodeVariantNames[i]) return false;
  }
  return true;
}
static_assert(NamesMatchTable(), "kernels/variant_names.h must list the table's names in order");

}  // namespace

std::span<const DecodeVariant> DecodeVariants() { return kVariants; }

StatusOr<const DecodeVariant*> FindDecodeVariant(std::string_view name) {
  std::string names;
  for (const DecodeVariant& v : kVariants) {
    if (v.name == name) return &v;
    names += (names.empty() ? "" : ", ") + std::string(v.name);
  }
  return NotFoundError("decode variant '" + std::string(name) + "' not found; variants: " + names);
}

const DecodeVariant& DefaultDecodeVariant() { return kVariants.back(); }

std::string_view TunedGpuName(TunedGpu gpu) { return gpu == TunedGpu::kH200 ? "h200" : "h100"; }

TunedGpu TunedGpuFor(std::string_view device_name) {
  return device_name.find("H200") != std::string_view::npos ? TunedGpu::kH200 : TunedGpu::kH100;
}

StatusOr<DecodeDevice> CurrentDecodeDevice() {
  DecodeDevice device;
  cudaDeviceProp props{};
  cudaError_t err = cudaGetDevice(&device.ordinal);
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&props, device.ordinal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky "no device" error behind
    return UnavailableError(std::string("no CUDA device answers (") + cudaGetErrorName(err) +
                            "): a decode plan needs the device's SM count");
  }
  device.sm_count = props.multiProcessorCount;
  device.tuned_gpu = TunedGpuFor(props.name);
  return device;
}

std::vector<int> MaxContextBucket(const ModelShape& shape) { return {shape.max_context}; }

StatusOr<DecodePlan> StartPlan(const DecodePlanRequest& request, std::string_view variant,
                               Status (*supports)(const ModelShape&)) {
  const ModelShape& shape = request.shape;
  ATTNRT_RETURN_IF_ERROR(supports(shape));
  if (request.capacity < 1 || request.capacity > kMaxDecodeCapacity) {
    return InvalidArgumentError("request.capacity = " + std::to_string(request.capacity) +
                                ", expected 1.." + std::to_string(kMaxDecodeCapacity));
  }
  if (request.max_kv_length < 0 || request.max_kv_length > shape.max_context) {
    return InvalidArgumentError("request.max_kv_length = " +
                                std::to_string(request.max_kv_length) + ", expected 0.." +
                                std::to_string(shape.max_context) +
                                " (shape.max_context; 0 means max_context)");
  }
  if (request.device.sm_count < 1) {
    return InvalidArgumentError("request.device.sm_count = " +
                                std::to_string(request.device.sm_count) +
                                ", expected >= 1 (CurrentDecodeDevice)");
  }
  DecodePlan plan;
  plan.variant = variant;
  plan.shape = shape;
  plan.capacity = request.capacity;
  plan.max_kv_length = shape.max_context;
  plan.step = request.step;
  plan.device = request.device;
  return plan;
}

Status StartRun(const DecodePlan& plan, std::string_view variant, const DecodeBatchView& batch,
                const KvPoolView& pools, DecodeWorkspace workspace,
                const DecodeRunContext& context) {
  if (plan.variant != variant) {
    return InvalidArgumentError("plan.variant = '" + std::string(plan.variant) +
                                "': a plan runs only on the variant that made it ('" +
                                std::string(variant) + "' here)");
  }
  if (plan.device.ordinal < 0) {
    return FailedPreconditionError("plan.device.ordinal = " +
                                   std::to_string(plan.device.ordinal) +
                                   ": a plan for a described device only sizes; plan on a live "
                                   "device (CurrentDecodeDevice) to run");
  }
  int current = -1;
  ATTNRT_CUDA_RETURN(cudaGetDevice(&current));
  if (current != plan.device.ordinal) {
    return FailedPreconditionError("the current CUDA device is " + std::to_string(current) +
                                   ", the plan's (plan.device.ordinal) " +
                                   std::to_string(plan.device.ordinal));
  }
  const bool in_place = batch.q_rows != nullptr;
  if (in_place != (batch.out_rows != nullptr) || in_place != (batch.lse_rows != nullptr)) {
    return InvalidArgumentError("batch.q_rows, batch.out_rows and batch.lse_rows: set all three "
                                "or none");
  }
  if (in_place) {
    ATTNRT_ASSIGN_OR_RETURN(const DecodeVariant* v, FindDecodeVariant(variant));
    if (!v->reads_rows_in_place) {
      return InvalidArgumentError("batch.q_rows is set: the " + std::string(variant) +
                                  " variant reads q and writes out/lse only at the batch's "
                                  "tensors (DecodeVariant::reads_rows_in_place)");
    }
  }
  const bool appends = plan.step == DecodeStep::kAppendAndDecode;
  ATTNRT_RETURN_IF_ERROR(CheckDecodeInputs(plan.shape, plan.capacity, batch, pools, workspace,
                                           plan.workspace_bytes, /*reads_new_kv=*/appends));
  if (plan.uses_cublas && context.cublas == nullptr) {
    return InvalidArgumentError("context.cublas is null (the " + std::string(variant) +
                                " plan runs cuBLAS)");
  }
  if (appends && !plan.fuses_append) {
    ATTNRT_RETURN_IF_ERROR(EnqueueAppendKv(batch, pools, context.stream));
  }
  return Status::Ok();
}

Status CheckKernelShape(const ModelShape& shape, std::string_view variant, bool reads_fp8) {
  const int g = shape.num_kv_heads > 0 ? shape.num_q_heads / shape.num_kv_heads : 0;
  const bool d_ok = shape.head_dim == 64 || shape.head_dim == 128 || shape.head_dim == 256;
  const bool bs_ok = shape.block_size == 8 || shape.block_size == 16 || shape.block_size == 32 ||
                     shape.block_size == 64;
  const bool g_ok = shape.num_kv_heads > 0 && shape.num_q_heads % shape.num_kv_heads == 0 &&
                    (g == 1 || g == 2 || g == 4 || g == 8);
  if (!d_ok || !bs_ok || !g_ok) {
    return UnimplementedError("decode variant '" + std::string(variant) +
                              "' does not run head_dim = " + std::to_string(shape.head_dim) +
                              ", block_size = " + std::to_string(shape.block_size) +
                              ", group size (num_q_heads / num_kv_heads) = " +
                              std::to_string(shape.num_q_heads) + "/" +
                              std::to_string(shape.num_kv_heads) +
                              " (supported: head_dim 64, 128, 256; block_size 8, 16, 32, 64; "
                              "group size 1, 2, 4, 8)");
  }
  if (shape.kv_cache_type != KvCacheType::kFp16 && !reads_fp8) {
    return UnimplementedError("decode variant '" + std::string(variant) +
                              "' does not read kv_cache_type = " +
                              std::string(KvCacheTypeName(shape.kv_cache_type)) +
                              " (split_kv, split_kv_simt and simple do)");
  }
  return shape.Validate();
}

Status CheckDevicePointer(const char* name, const void* p, std::size_t alignment) {
  if (p == nullptr) return InvalidArgumentError(std::string(name) + " is null");
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    return InvalidArgumentError(std::string(name) + " is not " + std::to_string(alignment) +
                                "-byte aligned (vector access)");
  }
  return Status::Ok();
}

Status CheckNewKvSources(const DecodeBatchView& batch) {
  if ((batch.k_rows == nullptr) != (batch.v_rows == nullptr)) {
    return InvalidArgumentError("batch.k_rows and batch.v_rows: set both or neither");
  }
  if (batch.k_rows != nullptr) {
    // The addresses in them are the caller's to check (the CUDA executor's, per piece).
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.k_rows", batch.k_rows, 8));
    return CheckDevicePointer("batch.v_rows", batch.v_rows, 8);
  }
  ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.k_new", batch.k_new, 16));
  return CheckDevicePointer("batch.v_new", batch.v_new, 16);
}

Status PrepareDecodeWorkspace(const DecodePlan& plan, DecodeWorkspace workspace,
                              cudaStream_t stream) {
  if (plan.workspace_zero_bytes == 0) return Status::Ok();
  if (workspace.data == nullptr || workspace.bytes < plan.workspace_zero_bytes) {
    return InvalidArgumentError("workspace.bytes = " + std::to_string(workspace.bytes) +
                                ", expected >= " + std::to_string(plan.workspace_zero_bytes) +
                                " (the plan's workspace_zero_bytes)");
  }
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(workspace.data, 0, plan.workspace_zero_bytes, stream));
  return Status::Ok();
}

Status CheckDecodeInputs(const ModelShape& shape, int capacity, const DecodeBatchView& batch,
                         const KvPoolView& pools, DecodeWorkspace workspace,
                         std::size_t workspace_bytes, bool reads_new_kv) {
  auto mismatch = [](const char* field, long long got, const char* what, long long want) {
    return InvalidArgumentError(std::string(field) + " = " + std::to_string(got) +
                                ", expected " + what + " = " + std::to_string(want));
  };
  if (pools.head_dim != shape.head_dim) {
    return mismatch("pools.head_dim", pools.head_dim, "shape.head_dim", shape.head_dim);
  }
  if (pools.block_size != shape.block_size) {
    return mismatch("pools.block_size", pools.block_size, "shape.block_size", shape.block_size);
  }
  if (pools.num_kv_heads != shape.num_kv_heads) {
    return mismatch("pools.num_kv_heads", pools.num_kv_heads, "shape.num_kv_heads",
                    shape.num_kv_heads);
  }
  if (pools.num_layers != shape.num_layers) {
    return mismatch("pools.num_layers", pools.num_layers, "shape.num_layers", shape.num_layers);
  }
  if (batch.num_q_heads != shape.num_q_heads) {
    return mismatch("batch.num_q_heads", batch.num_q_heads, "shape.num_q_heads",
                    shape.num_q_heads);
  }
  if (batch.capacity != capacity) {
    return mismatch("batch.capacity", batch.capacity, "the plan's capacity", capacity);
  }
  if (batch.max_blocks_per_seq < shape.max_blocks_per_sequence()) {
    return mismatch("batch.max_blocks_per_seq", batch.max_blocks_per_seq,
                    "shape.max_blocks_per_sequence()", shape.max_blocks_per_sequence());
  }
  if (pools.num_blocks < 1) return mismatch("pools.num_blocks", pools.num_blocks, "at least", 1);
  if (!(batch.scale > 0.0f) || !std::isfinite(batch.scale)) {
    return InvalidArgumentError("batch.scale = " + std::to_string(batch.scale) +
                                ", expected a finite value > 0");
  }
  struct Pointer {
    const char* name;
    const void* p;
    std::size_t alignment;  // the kernels' widest access
  };
  const Pointer pointers[] = {
      {"pools.k", pools.k, 16},         {"pools.v", pools.v, 16},
      {"batch.kv_lengths", batch.kv_lengths, 4}, {"batch.layers", batch.layers, 4},
      {"batch.block_tables", batch.block_tables, 4}};
  for (const Pointer& ptr : pointers) {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer(ptr.name, ptr.p, ptr.alignment));
  }
  if (batch.q_rows != nullptr) {
    // Requests in place: the address arrays here; the addresses in them are the caller's to
    // check (the CUDA executor checks them at plan time and their alignment per piece).
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.q_rows", batch.q_rows, 8));
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.out_rows", batch.out_rows, 8));
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.lse_rows", batch.lse_rows, 8));
  } else {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.q", batch.q, 16));
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.out", batch.out, 16));
    if (batch.lse != nullptr) {
      ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.lse", batch.lse, 4));
    }
  }
  if (shape.kv_cache_type != KvCacheType::kFp16) {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("pools.scales", pools.scales, 4));
  } else if (pools.scales != nullptr) {
    return InvalidArgumentError("pools.scales is set for an fp16 KV cache (only FP8 pools have "
                                "scales)");
  }
  if (reads_new_kv) ATTNRT_RETURN_IF_ERROR(CheckNewKvSources(batch));
  if (workspace_bytes > 0) {
    if (workspace.bytes < workspace_bytes) {
      return InvalidArgumentError("workspace.bytes = " + std::to_string(workspace.bytes) +
                                  ", expected >= " + std::to_string(workspace_bytes) +
                                  " (the plan's workspace_bytes)");
    }
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("workspace.data", workspace.data, 256));
  }
  return Status::Ok();
}

}  // namespace attnrt::kernels
