// Device mirror of a host PagedBatch (tests/support/paged_batch.h) for GPU tests and benchmarks:
// RAII device arrays, upload of every input, download of out/lse/pools, a poisoned workspace.
// CUDA translation units only. Errors come back as Status (callers ASSERT on them).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/views.h"
#include "tests/support/paged_batch.h"

namespace attnrt::testing {

// Move-only cudaMalloc'd array of T.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  Status Allocate(std::size_t n) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = n;
    if (n == 0) return Status::Ok();
    ATTNRT_CUDA_RETURN(cudaMalloc(&data_, n * sizeof(T)));
    return Status::Ok();
  }
  Status Upload(std::span<const T> host) {
    if (host.size() != size_) ATTNRT_RETURN_IF_ERROR(Allocate(host.size()));
    if (!host.empty()) {
      ATTNRT_CUDA_RETURN(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    return Status::Ok();
  }
  Status Download(std::span<T> host) const {
    if (host.size() != size_) return InternalError("DeviceArray::Download size mismatch");
    if (!host.empty()) {
      ATTNRT_CUDA_RETURN(cudaMemcpy(host.data(), data_, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return Status::Ok();
  }
  T* get() const { return data_; }
  T* data() const { return data_; }  // as a vector's, for PoolViewOf and BatchViewOf
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// The device copy of one PagedBatch; view()/pools() point at device memory.
struct DevicePagedBatch {
  ModelShape shape;
  int capacity = 0, num_blocks = 0, max_blocks_per_seq = 0;
  float scale = 1.0f;  // shape.scale()
  DeviceArray<Half> k_pool, v_pool, q, k_new, v_new, out;
  DeviceArray<std::int32_t> kv_lengths, layers, block_tables;
  DeviceArray<float> lse;

  // Uploads every array of `h` (reallocating only where sizes changed, so pointers captured in a
  // graph stay valid when a same-sized batch is uploaded again).
  Status Upload(const PagedBatch& h) {
    shape = h.shape;
    capacity = h.capacity;
    num_blocks = h.num_blocks;
    max_blocks_per_seq = h.max_blocks_per_seq;
    scale = h.shape.scale();
    ATTNRT_RETURN_IF_ERROR(k_pool.Upload(h.k_pool));
    ATTNRT_RETURN_IF_ERROR(v_pool.Upload(h.v_pool));
    ATTNRT_RETURN_IF_ERROR(q.Upload(h.q));
    ATTNRT_RETURN_IF_ERROR(k_new.Upload(h.k_new));
    ATTNRT_RETURN_IF_ERROR(v_new.Upload(h.v_new));
    ATTNRT_RETURN_IF_ERROR(out.Upload(h.out));
    ATTNRT_RETURN_IF_ERROR(kv_lengths.Upload(h.kv_lengths));
    ATTNRT_RETURN_IF_ERROR(layers.Upload(h.layers));
    ATTNRT_RETURN_IF_ERROR(block_tables.Upload(h.block_tables));
    ATTNRT_RETURN_IF_ERROR(lse.Upload(h.lse));
    return Status::Ok();
  }
  kernels::KvPoolView pools() const { return PoolViewOf(*this); }
  kernels::DecodeBatchView view() const { return BatchViewOf(*this); }
};

// The batch's new K/V where requests in place keep them (DecodeBatchView::k_rows / v_rows): each
// row's [Hkv][D] at an address of its own in mapped pinned host memory (the executor's staged
// requests, read across PCIe), rows stored in reverse order; view() points k_new/v_new at NaNs,
// so a kernel that reads them instead writes NaN into the pools and the output.
struct NewKvRows {
  NewKvRows() = default;
  NewKvRows(const NewKvRows&) = delete;
  NewKvRows& operator=(const NewKvRows&) = delete;
  ~NewKvRows() {
    if (mapped_ != nullptr) cudaFreeHost(mapped_);
  }

  Status Build(const PagedBatch& h, const DevicePagedBatch& dev) {
    base_ = dev.view();
    const std::size_t row = static_cast<std::size_t>(h.shape.num_kv_heads) * h.shape.head_dim;
    const std::size_t rows = static_cast<std::size_t>(h.capacity);
    if (mapped_ != nullptr) cudaFreeHost(mapped_);
    mapped_ = nullptr;
    ATTNRT_CUDA_RETURN(
        cudaHostAlloc(reinterpret_cast<void**>(&mapped_), 2 * rows * row * sizeof(Half),
                      cudaHostAllocMapped));
    Half* k = mapped_;
    Half* v = mapped_ + rows * row;
    std::vector<std::uint64_t> k_at(rows), v_at(rows);
    for (std::size_t i = 0; i < rows; ++i) {
      const std::size_t slot = rows - 1 - i;
      std::copy_n(h.k_new.begin() + i * row, row, k + slot * row);
      std::copy_n(h.v_new.begin() + i * row, row, v + slot * row);
      Half* k_dev = nullptr;
      Half* v_dev = nullptr;
      ATTNRT_CUDA_RETURN(cudaHostGetDevicePointer(reinterpret_cast<void**>(&k_dev),
                                                  k + slot * row, 0));
      ATTNRT_CUDA_RETURN(cudaHostGetDevicePointer(reinterpret_cast<void**>(&v_dev),
                                                  v + slot * row, 0));
      k_at[i] = reinterpret_cast<std::uint64_t>(k_dev);
      v_at[i] = reinterpret_cast<std::uint64_t>(v_dev);
    }
    ATTNRT_RETURN_IF_ERROR(k_addr_.Upload(k_at));
    ATTNRT_RETURN_IF_ERROR(v_addr_.Upload(v_at));
    ATTNRT_RETURN_IF_ERROR(nan_.Allocate(rows * row));
    ATTNRT_CUDA_RETURN(cudaMemset(nan_.get(), 0xFF, rows * row * sizeof(Half)));
    return Status::Ok();
  }
  // dev.view() with the new K/V read in place.
  kernels::DecodeBatchView view() const {
    kernels::DecodeBatchView v = base_;
    v.k_new = v.v_new = nan_.get();
    v.k_rows = k_addr_.get();
    v.v_rows = v_addr_.get();
    return v;
  }

 private:
  kernels::DecodeBatchView base_;
  Half* mapped_ = nullptr;
  DeviceArray<std::uint64_t> k_addr_, v_addr_;
  DeviceArray<Half> nan_;
};

// A workspace of the plan's size poisoned with 0xFF bytes (NaN floats): a merge that reads a
// partial nobody wrote shows up as NaN. Then prepared as every caller must
// (PrepareDecodeWorkspace: the split-KV arrival counters zeroed).
inline Status MakePoisonedWorkspace(const kernels::DecodePlan& plan, DeviceArray<char>* storage,
                                    kernels::DecodeWorkspace* ws) {
  ATTNRT_RETURN_IF_ERROR(storage->Allocate(plan.workspace_bytes));
  if (plan.workspace_bytes > 0) {
    ATTNRT_CUDA_RETURN(cudaMemset(storage->get(), 0xFF, plan.workspace_bytes));
  }
  ws->data = storage->get();
  ws->bytes = plan.workspace_bytes;
  ATTNRT_RETURN_IF_ERROR(kernels::PrepareDecodeWorkspace(plan, *ws, nullptr));
  ATTNRT_CUDA_RETURN(cudaDeviceSynchronize());
  return Status::Ok();
}

}  // namespace attnrt::testing
