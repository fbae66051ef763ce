// Backing memory of the K/V pools: host memory (aligned, zeroed) and device memory (cudaMalloc,
// zeroed), both behind PoolMemory and sized in bytes whatever the element type; and the capacity
// arithmetic (blocks per byte budget or per fraction of free device memory, at the shape's
// element size). Built without CUDA, device pools answer Unavailable.
#include <attnrt/version.h>  // ATTNRT_WITH_CUDA

#if ATTNRT_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <utility>
#include <cstring>
#include <limits>
#include <string>

#include "api/internal/cuda_device.h"
#include "kvcache/kvcache.h"
#if ATTNRT_WITH_CUDA
#include "api/internal/cuda_check.h"
#include "api/internal/log.h"
#endif

namespace attnrt::kvcache {
namespace {

// 256 B: a whole number of 128 B cache lines / DRAM sectors and what cudaMalloc guarantees.
constexpr std::size_t kPoolAlignment = 256;

std::size_t RoundUp(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// Checks that every block of every layer a copy touches lies inside a pool of `bytes_each`.
Status CheckCopies(std::span<const BlockCopy> copies, std::int64_t block_bytes,
                   std::int64_t layer_bytes, int num_layers, std::size_t bytes_each) {
  if (block_bytes < 1 || layer_bytes < block_bytes || num_layers < 1) {
    return InvalidArgumentError("CopyBlocks: block_bytes = " + std::to_string(block_bytes) +
                                ", layer_bytes = " + std::to_string(layer_bytes) +
                                ", num_layers = " + std::to_string(num_layers) +
                                ", expected 1 <= block_bytes <= layer_bytes and num_layers >= 1");
  }
  if (layer_bytes * num_layers > static_cast<std::int64_t>(bytes_each)) {
    return InvalidArgumentError("CopyBlocks: num_layers * layer_bytes = " +
                                std::to_string(layer_bytes * num_layers) +
                                " exceeds the pool's " + std::to_string(bytes_each) + " bytes");
  }
  const std::int64_t blocks_per_layer = layer_bytes / block_bytes;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].src == copies[i].dst) {
      return InvalidArgumentError("copies[" + std::to_string(i) + "] copies block " +
                                  std::to_string(copies[i].src) + " onto itself");
    }
    for (BlockId b : {copies[i].src, copies[i].dst}) {
      if (b < 0 || b >= blocks_per_layer) {
        return InvalidArgumentError("copies[" + std::to_string(i) + "] block " +
                                    std::to_string(b) + " is out of range [0, " +
                                    std::to_string(blocks_per_layer) + ")");
      }
    }
  }
  return Status::Ok();
}

// Checks that `rows` rows of `row_bytes`, `pitch` apart from `pool`, lie inside the K pool or
// inside the V pool (each `bytes_each` bytes).
Status CheckPoolRows(const void* k, const void* v, std::size_t bytes_each, const std::byte* pool,
                     std::size_t pitch, std::size_t row_bytes, std::size_t rows) {
  if (rows == 0) return Status::Ok();
  if (row_bytes > pitch && rows > 1) {
    return InvalidArgumentError("row_bytes = " + std::to_string(row_bytes) +
                                " exceeds pool_pitch = " + std::to_string(pitch));
  }
  const auto at = reinterpret_cast<std::uintptr_t>(pool);
  for (const void* base : {k, v}) {
    const auto begin = reinterpret_cast<std::uintptr_t>(base);
    if (at < begin || at >= begin + bytes_each) continue;
    const std::size_t offset = at - begin;
    if (offset + (rows - 1) * pitch + row_bytes > bytes_each) {
      return InvalidArgumentError("pool rows (" + std::to_string(rows) + " x " +
                                  std::to_string(row_bytes) + " B, pitch " +
                                  std::to_string(pitch) + " B, from byte " +
                                  std::to_string(offset) + ") leave the pool of " +
                                  std::to_string(bytes_each) + " B");
    }
    return Status::Ok();
  }
  return InvalidArgumentError("pool pointer points into neither the K nor the V pool");
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class HostPoolMemory final : public PoolMemory {
 public:
  HostPoolMemory(std::size_t bytes_each, std::unique_ptr<void, FreeDeleter> k,
                 std::unique_ptr<void, FreeDeleter> v)
      : bytes_each_(bytes_each), k_(std::move(k)), v_(std::move(v)) {}

  std::byte* k() override { return static_cast<std::byte*>(k_.get()); }
  std::byte* v() override { return static_cast<std::byte*>(v_.get()); }
  bool on_device() const override { return false; }
  std::size_t bytes() const override { return 2 * bytes_each_; }

  Status CopyBlocks(std::span<const BlockCopy> copies, std::int64_t block_bytes,
                    std::int64_t layer_bytes, int num_layers) override {
    ATTNRT_RETURN_IF_ERROR(CheckCopies(copies, block_bytes, layer_bytes, num_layers, bytes_each_));
    for (std::byte* pool : {k(), v()}) {
      for (const BlockCopy& c : copies) {
        for (int l = 0; l < num_layers; ++l) {
          std::byte* layer = pool + l * layer_bytes;
          std::memcpy(layer + c.dst * block_bytes, layer + c.src * block_bytes,
                      static_cast<std::size_t>(block_bytes));
        }
      }
    }
    return Status::Ok();
  }

  Status CopyRowsToPool(std::byte* pool, std::size_t pool_pitch, const void* host,
                        std::size_t host_pitch, std::size_t row_bytes, std::size_t rows) override {
    ATTNRT_RETURN_IF_ERROR(
        CheckPoolRows(k_.get(), v_.get(), bytes_each_, pool, pool_pitch, row_bytes, rows));
    std::byte* dst = pool;
    const auto* src = static_cast<const std::byte*>(host);
    if (pool_pitch == row_bytes && host_pitch == row_bytes) {  // one contiguous range
      if (rows > 0) std::memcpy(dst, src, rows * row_bytes);
      return Status::Ok();
    }
    for (std::size_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * pool_pitch, src + r * host_pitch, row_bytes);
    }
    return Status::Ok();
  }

  Status CopyRowsFromPool(void* host, std::size_t host_pitch, const std::byte* pool,
                          std::size_t pool_pitch, std::size_t row_bytes,
                          std::size_t rows) const override {
    ATTNRT_RETURN_IF_ERROR(
        CheckPoolRows(k_.get(), v_.get(), bytes_each_, pool, pool_pitch, row_bytes, rows));
    auto* dst = static_cast<std::byte*>(host);
    const std::byte* src = pool;
    for (std::size_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * host_pitch, src + r * pool_pitch, row_bytes);
    }
    return Status::Ok();
  }

 private:
  std::size_t bytes_each_;
  std::unique_ptr<void, FreeDeleter> k_;
  std::unique_ptr<void, FreeDeleter> v_;
};

#if ATTNRT_WITH_CUDA
// A cudaMalloc'd buffer, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(void* p) : p_(p) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }
  void* get() const { return p_; }

 private:
  // A destructor cannot report: a failed cudaFree (only on a dead context) leaves a warning.
  void Reset() {
    if (p_ != nullptr) {
      const cudaError_t err = cudaFree(p_);
      if (err != cudaSuccess) {
        Logger().warn("kv cache: cudaFree of a device pool failed: {}", cudaGetErrorString(err));
      }
    }
    p_ = nullptr;
  }
  void* p_ = nullptr;
};

StatusOr<DeviceBuffer> DeviceAlloc(std::size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    const bool have_info = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    return ResourceExhaustedError(std::string("cudaMalloc of the ") + what + " pool (" +
                                  std::to_string(bytes) + " B) failed: out of device memory" +
                                  (have_info ? " (" + std::to_string(free_bytes) + " B free of " +
                                                   std::to_string(total_bytes) + ")"
                                             : std::string()));
  }
  ATTNRT_CUDA_RETURN(err);
  DeviceBuffer buffer(p);
  ATTNRT_CUDA_RETURN(cudaMemset(p, 0, bytes));
  return buffer;
}

class DevicePoolMemory final : public PoolMemory {
 public:
  DevicePoolMemory(std::size_t bytes_each, DeviceBuffer k, DeviceBuffer v)
      : bytes_each_(bytes_each), k_(std::move(k)), v_(std::move(v)) {}

  std::byte* k() override { return static_cast<std::byte*>(k_.get()); }
  std::byte* v() override { return static_cast<std::byte*>(v_.get()); }
  bool on_device() const override { return true; }
  std::size_t bytes() const override { return 2 * bytes_each_; }

  // One cudaMemcpy2D per copy and pool: the block's slice of every layer is a row, rows one
  // layer apart.
  Status CopyBlocks(std::span<const BlockCopy> copies, std::int64_t block_bytes,
                    std::int64_t layer_bytes, int num_layers) override {
    ATTNRT_RETURN_IF_ERROR(CheckCopies(copies, block_bytes, layer_bytes, num_layers, bytes_each_));
    const std::size_t pitch = static_cast<std::size_t>(layer_bytes);
    const std::size_t width = static_cast<std::size_t>(block_bytes);
    for (std::byte* pool : {k(), v()}) {
      for (const BlockCopy& c : copies) {
        ATTNRT_CUDA_RETURN(cudaMemcpy2D(pool + c.dst * block_bytes, pitch,
                                        pool + c.src * block_bytes, pitch, width,
                                        static_cast<std::size_t>(num_layers),
                                        cudaMemcpyDeviceToDevice));
      }
    }
    ATTNRT_CUDA_RETURN(cudaDeviceSynchronize());
    return Status::Ok();
  }

  Status CopyRowsToPool(std::byte* pool, std::size_t pool_pitch, const void* host,
                        std::size_t host_pitch, std::size_t row_bytes, std::size_t rows) override {
    ATTNRT_RETURN_IF_ERROR(
        CheckPoolRows(k_.get(), v_.get(), bytes_each_, pool, pool_pitch, row_bytes, rows));
    if (rows == 0) return Status::Ok();
    ATTNRT_CUDA_RETURN(cudaMemcpy2D(pool, pool_pitch, host, host_pitch, row_bytes, rows,
                                    cudaMemcpyHostToDevice));
    return Status::Ok();
  }

  Status CopyRowsFromPool(void* host, std::size_t host_pitch, const std::byte* pool,
                          std::size_t pool_pitch, std::size_t row_bytes,
                          std::size_t rows) const override {
    ATTNRT_RETURN_IF_ERROR(
        CheckPoolRows(k_.get(), v_.get(), bytes_each_, pool, pool_pitch, row_bytes, rows));
    if (rows == 0) return Status::Ok();
    ATTNRT_CUDA_RETURN(cudaMemcpy2D(host, host_pitch, pool, pool_pitch, row_bytes, rows,
                                    cudaMemcpyDeviceToHost));
    return Status::Ok();
  }

 private:
  std::size_t bytes_each_;
  DeviceBuffer k_;
  DeviceBuffer v_;
};
#endif  // ATTNRT_WITH_CUDA

}  // namespace

StatusOr<std::unique_ptr<PoolMemory>> MakeHostPoolMemory(std::size_t bytes_each) {
  if (bytes_each == 0) return InvalidArgumentError("bytes_each = 0, expected > 0");
  const std::size_t alloc_bytes = RoundUp(bytes_each, kPoolAlignment);
  std::unique_ptr<void, FreeDeleter> k(std::aligned_alloc(kPoolAlignment, alloc_bytes));
  std::unique_ptr<void, FreeDeleter> v(std::aligned_alloc(kPoolAlignment, alloc_bytes));
  if (k == nullptr || v == nullptr) {
    return ResourceExhaustedError("host pool allocation of 2 x " + std::to_string(bytes_each) +
                                  " B failed");
  }
  // Zeroed so that a block's unwritten positions hold a defined value.
  std::memset(k.get(), 0, alloc_bytes);
  std::memset(v.get(), 0, alloc_bytes);
  return std::unique_ptr<PoolMemory>(
      std::make_unique<HostPoolMemory>(bytes_each, std::move(k), std::move(v)));
}

StatusOr<std::unique_ptr<PoolMemory>> MakeDevicePoolMemory(std::size_t bytes_each) {
  if (bytes_each == 0) return InvalidArgumentError("bytes_each = 0, expected > 0");
  if (std::string reason = NoCudaDeviceReason(); !reason.empty()) {
    return UnavailableError("device KV pools need a CUDA device: " + reason);
  }
#if ATTNRT_WITH_CUDA
  ATTNRT_ASSIGN_OR_RETURN(DeviceBuffer k, DeviceAlloc(bytes_each, "K"));
  ATTNRT_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceAlloc(bytes_each, "V"));
  ATTNRT_CUDA_RETURN(cudaDeviceSynchronize());  // the memsets are done before anyone reads
  return std::unique_ptr<PoolMemory>(
      std::make_unique<DevicePoolMemory>(bytes_each, std::move(k), std::move(v)));
#else
  return UnavailableError("unreachable: NoCudaDeviceReason() is never empty without CUDA");
#endif
}

std::size_t BlockBytes(const ModelShape& shape) {
  if (shape.num_layers < 1 || shape.num_kv_heads < 1 || shape.block_size < 1 ||
      shape.head_dim < 1) {
    return 0;
  }
  return 2 * static_cast<std::size_t>(shape.num_layers) * shape.num_kv_heads * shape.block_size *
         shape.head_dim * static_cast<std::size_t>(shape.kv_element_bytes());
}

std::int32_t BlocksForBudget(const ModelShape& shape, std::size_t kv_bytes) {
  const std::size_t block_bytes = BlockBytes(shape);
  if (block_bytes == 0) return 0;
  const std::size_t blocks = kv_bytes / block_bytes;
  return static_cast<std::int32_t>(
      std::min<std::size_t>(blocks, std::numeric_limits<std::int32_t>::max()));
}

StatusOr<std::int32_t> BlocksForFreeDeviceMemory(const ModelShape& shape, double fraction) {
  ATTNRT_RETURN_IF_ERROR(shape.Validate());
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return InvalidArgumentError("fraction = " + std::to_string(fraction) +
                                ", expected in (0, 1]");
  }
  if (std::string reason = NoCudaDeviceReason(); !reason.empty()) {
    return UnavailableError("sizing KV pools from free device memory needs a CUDA device: " +
                            reason);
  }
#if ATTNRT_WITH_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  ATTNRT_CUDA_RETURN(cudaMemGetInfo(&free_bytes, &total_bytes));
  return BlocksForBudget(shape,
                         static_cast<std::size_t>(static_cast<double>(free_bytes) * fraction));
#else
  return UnavailableError("unreachable: NoCudaDeviceReason() is never empty without CUDA");
#endif
}

}  // namespace attnrt::kvcache
