// Whether a CUDA device can be used (api/internal/cuda_device.h). Without CUDA: never.
#include "api/internal/cuda_device.h"

#include <attnrt/version.h>  // ATTNRT_WITH_CUDA

#if ATTNRT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnrt {

std::string NoCudaDeviceReason() {
#if ATTNRT_WITH_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it; nothing else should see it
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "cudaGetDeviceCount found 0 CUDA devices";
  return "";
#else
  return "attnrt was built without CUDA (ATTNRT_WITH_CUDA=OFF)";
#endif
}

bool CudaDeviceAvailable() { return NoCudaDeviceReason().empty(); }

}  // namespace attnrt
