// Move-only RAII owners of CUDA resources: device and pinned buffers, streams, events, graphs,
// instantiated graphs and cuBLAS handles. Each is made by a factory returning StatusOr (errors
// through api/internal/cuda_check.h); destructors release without throwing, and an error there
// only leaves a warning in the library log (a destructor has nobody to report to, and a sticky
// device error must not abort teardown).
// Internal header of runtime/ (includes CUDA headers; never included from api/ or executor.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include <attnrt/status.h>

namespace attnrt::runtime {

// Owns one handle of type T, released by `Release`; empty when the handle equals T{}.
template <typename T, void (*Release)(T)>
class UniqueCudaHandle {
 public:
  UniqueCudaHandle() = default;
  explicit UniqueCudaHandle(T handle) : handle_(handle) {}
  ~UniqueCudaHandle() { Reset(); }
  UniqueCudaHandle(UniqueCudaHandle&& other) noexcept : handle_(std::exchange(other.handle_, T{})) {}
  UniqueCudaHandle& operator=(UniqueCudaHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, T{});
    }
    return *this;
  }
  UniqueCudaHandle(const UniqueCudaHandle&) = delete;
  UniqueCudaHandle& operator=(const UniqueCudaHandle&) = delete;

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void Reset() {
    if (handle_ != T{}) Release(std::exchange(handle_, T{}));
  }

 private:
  T handle_{};
};

// Where a CudaBuffer lives: device memory (cudaMalloc), or page-locked host memory
// (cudaMallocHost: the source and target of graph memcpy nodes).
enum class CudaMemory { kDevice, kPinnedHost };

namespace detail {
void FreeDevice(void* p);
void FreePinned(void* p);
template <CudaMemory kMemory>
void FreeBuffer(void* p) {
  if constexpr (kMemory == CudaMemory::kDevice) {
    FreeDevice(p);
  } else {
    FreePinned(p);
  }
}
void DestroyStream(cudaStream_t s);
void DestroyEvent(cudaEvent_t e);
void DestroyGraph(cudaGraph_t g);
void DestroyGraphExec(cudaGraphExec_t g);
void DestroyCublas(cublasHandle_t h);
}  // namespace detail

// A region of `bytes()` bytes of `kMemory`.
template <CudaMemory kMemory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  static StatusOr<CudaBuffer> Create(std::size_t bytes);

  void* data() const { return ptr_.get(); }
  template <typename T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_.get()) + byte_offset);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  UniqueCudaHandle<void*, detail::FreeBuffer<kMemory>> ptr_;
  std::size_t bytes_ = 0;
};
using DeviceBuffer = CudaBuffer<CudaMemory::kDevice>;
using PinnedBuffer = CudaBuffer<CudaMemory::kPinnedHost>;

// A non-blocking stream (no implicit sync with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  static StatusOr<Stream> Create();
  cudaStream_t get() const { return stream_.get(); }

 private:
  UniqueCudaHandle<cudaStream_t, detail::DestroyStream> stream_;
};

class Event {
 public:
  Event() = default;
  // `timing` false makes a lighter event (cudaEventDisableTiming) for pure ordering/completion.
  static StatusOr<Event> Create(bool timing);
  cudaEvent_t get() const { return event_.get(); }

 private:
  UniqueCudaHandle<cudaEvent_t, detail::DestroyEvent> event_;
};

class Graph {
 public:
  Graph() = default;
  static StatusOr<Graph> Create();
  // Takes ownership of a graph made elsewhere (e.g. cudaStreamEndCapture).
  static Graph Adopt(cudaGraph_t graph) {
    Graph g;
    g.graph_ = UniqueCudaHandle<cudaGraph_t, detail::DestroyGraph>(graph);
    return g;
  }
  cudaGraph_t get() const { return graph_.get(); }

 private:
  UniqueCudaHandle<cudaGraph_t, detail::DestroyGraph> graph_;
};

class GraphExec {
 public:
  GraphExec() = default;
  static StatusOr<GraphExec> Instantiate(const Graph& graph);
  cudaGraphExec_t get() const { return exec_.get(); }

 private:
  UniqueCudaHandle<cudaGraphExec_t, detail::DestroyGraphExec> exec_;
};

class CublasHandle {
 public:
  CublasHandle() = default;
  // A handle bound to `stream` with a user workspace (`workspace` must outlive the handle),
  // which cuBLAS needs to run inside a captured graph without allocating.
  static StatusOr<CublasHandle> Create(cudaStream_t stream, void* workspace,
                                       std::size_t workspace_bytes);
  cublasHandle_t get() const { return handle_.get(); }

 private:
  UniqueCudaHandle<cublasHandle_t, detail::DestroyCublas> handle_;
};

}  // namespace attnrt::runtime
