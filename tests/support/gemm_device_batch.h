// Device mirror of a host PagedBatch (tests/support/paged_batch.h) for the GEMM-path tests and
// benchmarks: uploads pools, lengths, layers, block tables and q; out and lse are poisoned on the
// device (NaN); views point at device memory. Header-only; needs the CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <attnrt/half.h>
#include "kernels/decode.h"
#include "kernels/views.h"
#include "tests/support/paged_batch.h"

namespace attnrt::testing {

inline void CudaOrThrow(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

// Move-only cudaMalloc'd bytes.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  explicit DeviceBytes(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) CudaOrThrow(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  DeviceBytes(DeviceBytes&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBytes& operator=(DeviceBytes&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  kernels::DecodeWorkspace workspace() const { return {data_, bytes_}; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

template <typename T>
DeviceBytes Upload(std::span<const T> host) {
  DeviceBytes d(host.size_bytes());
  if (!host.empty()) {
    CudaOrThrow(cudaMemcpy(d.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
                "upload");
  }
  return d;
}
template <typename T>
void CopyToDevice(const DeviceBytes& d, std::span<const T> host) {
  CudaOrThrow(cudaMemcpy(d.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
              "copy to device");
}
template <typename T>
std::vector<T> Download(const DeviceBytes& d, std::size_t count) {
  std::vector<T> host(count);
  CudaOrThrow(cudaMemcpy(host.data(), d.data(), count * sizeof(T), cudaMemcpyDeviceToHost),
              "download");
  return host;
}

// Device copy of a host batch whose pools already hold the appended token (ReferenceAppendKv).
struct DeviceBatch {
  DeviceBytes k_pool, v_pool, kv_lengths, layers, block_tables, q, k_new, v_new, out, lse;
  kernels::KvPoolView pools_view;
  kernels::DecodeBatchView batch_view;

  explicit DeviceBatch(PagedBatch& host) {
    k_pool = Upload<Half>(host.k_pool);
    v_pool = Upload<Half>(host.v_pool);
    kv_lengths = Upload<std::int32_t>(host.kv_lengths);
    layers = Upload<std::int32_t>(host.layers);
    block_tables = Upload<std::int32_t>(host.block_tables);
    q = Upload<Half>(host.q);
    k_new = Upload<Half>(host.k_new);
    v_new = Upload<Half>(host.v_new);
    out = DeviceBytes(host.out.size() * sizeof(Half));
    lse = DeviceBytes(host.lse.size() * sizeof(float));
    Poison();
    pools_view = host.pools();
    pools_view.k = k_pool.as<Half>();
    pools_view.v = v_pool.as<Half>();
    batch_view = host.view();
    batch_view.kv_lengths = kv_lengths.as<std::int32_t>();
    batch_view.layers = layers.as<std::int32_t>();
    batch_view.block_tables = block_tables.as<std::int32_t>();
    batch_view.q = q.as<Half>();
    batch_view.k_new = k_new.as<Half>();
    batch_view.v_new = v_new.as<Half>();
    batch_view.out = out.as<Half>();
    batch_view.lse = lse.as<float>();
  }
  // out and lse = NaN (0xFF bytes: FP16 0xFFFF and FP32 0xFFFFFFFF are both NaN).
  void Poison() {
    CudaOrThrow(cudaMemset(out.data(), 0xFF, out.bytes()), "poison out");
    CudaOrThrow(cudaMemset(lse.data(), 0xFF, lse.bytes()), "poison lse");
  }
  std::vector<Half> DownloadOut() const { return Download<Half>(out, out.bytes() / sizeof(Half)); }
  std::vector<float> DownloadLse() const {
    return Download<float>(lse, lse.bytes() / sizeof(float));
  }
};

}  // namespace attnrt::testing
