// Factories and releases of the CUDA RAII owners (cuda_resources.h).
#include "runtime/cuda_resources.h"

#include "api/internal/cuda_check.h"
#include "api/internal/log.h"

namespace attnrt::runtime {
namespace detail {
namespace {
// A release has nobody to return an error to (see the header): it leaves a warning instead.
void WarnOnReleaseError(const char* call, cudaError_t err) {
  if (err != cudaSuccess) {
    Logger().warn("{} failed while releasing a resource: {}", call, cudaGetErrorString(err));
  }
}
}  // namespace

void FreeDevice(void* p) { WarnOnReleaseError("cudaFree", cudaFree(p)); }
void FreePinned(void* p) { WarnOnReleaseError("cudaFreeHost", cudaFreeHost(p)); }
void DestroyStream(cudaStream_t s) {
  WarnOnReleaseError("cudaStreamDestroy", cudaStreamDestroy(s));
}
void DestroyEvent(cudaEvent_t e) { WarnOnReleaseError("cudaEventDestroy", cudaEventDestroy(e)); }
void DestroyGraph(cudaGraph_t g) { WarnOnReleaseError("cudaGraphDestroy", cudaGraphDestroy(g)); }
void DestroyGraphExec(cudaGraphExec_t g) {
  WarnOnReleaseError("cudaGraphExecDestroy", cudaGraphExecDestroy(g));
}
void DestroyCublas(cublasHandle_t h) {
  const cublasStatus_t status = cublasDestroy(h);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Logger().warn("cublasDestroy failed while releasing a handle: status {}",
                  static_cast<int>(status));
  }
}
}  // namespace detail

template <CudaMemory kMemory>
StatusOr<CudaBuffer<kMemory>> CudaBuffer<kMemory>::Create(std::size_t bytes) {
  CudaBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  if constexpr (kMemory == CudaMemory::kDevice) {
    ATTNRT_CUDA_RETURN(cudaMalloc(&p, bytes));
  } else {
    ATTNRT_CUDA_RETURN(cudaMallocHost(&p, bytes));
  }
  b.ptr_ = decltype(b.ptr_)(p);
  b.bytes_ = bytes;
  return b;
}
template class CudaBuffer<CudaMemory::kDevice>;
template class CudaBuffer<CudaMemory::kPinnedHost>;

StatusOr<Stream> Stream::Create() {
  cudaStream_t s = nullptr;
  ATTNRT_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Stream out;
  out.stream_ = UniqueCudaHandle<cudaStream_t, detail::DestroyStream>(s);
  return out;
}

StatusOr<Event> Event::Create(bool timing) {
  cudaEvent_t e = nullptr;
  ATTNRT_CUDA_RETURN(
      cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  Event out;
  out.event_ = UniqueCudaHandle<cudaEvent_t, detail::DestroyEvent>(e);
  return out;
}

StatusOr<Graph> Graph::Create() {
  cudaGraph_t g = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphCreate(&g, 0));
  return Adopt(g);
}

StatusOr<GraphExec> GraphExec::Instantiate(const Graph& graph) {
  cudaGraphExec_t e = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphInstantiate(&e, graph.get(), 0));
  GraphExec out;
  out.exec_ = UniqueCudaHandle<cudaGraphExec_t, detail::DestroyGraphExec>(e);
  return out;
}

StatusOr<CublasHandle> CublasHandle::Create(cudaStream_t stream, void* workspace,
                                            std::size_t workspace_bytes) {
  cublasHandle_t h = nullptr;
  ATTNRT_CUBLAS_RETURN(cublasCreate(&h));
  CublasHandle out;
  out.handle_ = UniqueCudaHandle<cublasHandle_t, detail::DestroyCublas>(h);
  ATTNRT_CUBLAS_RETURN(cublasSetStream(h, stream));
  if (workspace != nullptr && workspace_bytes > 0) {
    ATTNRT_CUBLAS_RETURN(cublasSetWorkspace(h, workspace, workspace_bytes));
  }
  return out;
}

}  // namespace attnrt::runtime
