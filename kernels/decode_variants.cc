// The variant table (simplest first, production default last) and the launch-time checks every
// CUDA variant shares.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/decode.h"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

constexpr std::array<DecodeVariant, 3> kVariants = {{
    {"simple", SimpleSupports, SimpleWorkspaceBytes, SimpleLaunch},
    {SplitKvVariantName(SplitKvFamily::kSimt), SplitKvSupports<SplitKvFamily::kSimt>,
     SplitKvVariantWorkspaceBytes<SplitKvFamily::kSimt>,
     SplitKvVariantLaunch<SplitKvFamily::kSimt>},
    {SplitKvVariantName(SplitKvFamily::kTensorCore), SplitKvSupports<SplitKvFamily::kTensorCore>,
     SplitKvVariantWorkspaceBytes<SplitKvFamily::kTensorCore>,
     SplitKvVariantLaunch<SplitKvFamily::kTensorCore>},
}};

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

Status LaunchAppendAndDecode(const DecodeVariant& variant, const ModelShape& shape,
                             const DecodeBatchView& batch, const KvPoolView& pools,
                             DecodeWorkspace workspace, cudaStream_t stream) {
  if (variant.launch == SplitKvVariantLaunch<SplitKvFamily::kTensorCore>) {
    return LaunchSplitKv(SplitKvFamily::kTensorCore, variant.name,
                         TunedLaunchConfig(SplitKvFamily::kTensorCore, shape, batch.capacity),
                         shape, batch, pools, workspace, stream, /*fuse_append=*/true);
  }
  ATTNRT_RETURN_IF_ERROR(variant.supports(shape));  // reject before the append writes anything
  ATTNRT_RETURN_IF_ERROR(CheckDecodeInputs(shape, batch.capacity, batch, pools, workspace,
                                           variant.workspace_bytes(shape, batch.capacity),
                                           /*reads_new_kv=*/true));
  ATTNRT_RETURN_IF_ERROR(LaunchAppendKv(batch, pools, stream));
  return variant.launch(shape, batch, pools, workspace, stream);
}

Status CheckKernelShape(const ModelShape& shape, std::string_view variant) {
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
    return mismatch("batch.capacity", batch.capacity, "capacity", capacity);
  }
  if (capacity < 0 || capacity > kMaxDecodeCapacity) {
    return InvalidArgumentError("batch.capacity = " + std::to_string(capacity) + ", expected 0.." +
                                std::to_string(kMaxDecodeCapacity));
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
      {"batch.block_tables", batch.block_tables, 4}, {"batch.q", batch.q, 16},
      {"batch.out", batch.out, 16}};
  for (const Pointer& ptr : pointers) {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer(ptr.name, ptr.p, ptr.alignment));
  }
  if (batch.lse != nullptr) ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.lse", batch.lse, 4));
  if (reads_new_kv) {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.k_new", batch.k_new, 16));
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer("batch.v_new", batch.v_new, 16));
  }
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
