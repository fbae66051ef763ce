// The one macro that turns a CUDA or cuBLAS error into a Status with file and line. A leaf like
// the public types beside it, but internal (it includes CUDA headers, so it is never a public
// header): target attnrt_cuda_check, which kvcache, kernels and runtime link.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include <attnrt/status.h>
#include "api/internal/cuda_device.h"  // CudaDeviceAvailable, for the files that include this

namespace attnrt {

inline Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return InternalError(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

inline Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return InternalError(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + cublasGetStatusName(err) + " (" + cublasGetStatusString(err) + ")");
}

}  // namespace attnrt

// ATTNRT_CUDA_RETURN(cudaMemcpyAsync(...)); returns a Status on failure.
#define ATTNRT_CUDA_RETURN(expr) \
  ATTNRT_RETURN_IF_ERROR(::attnrt::CudaStatus((expr), #expr, __FILE__, __LINE__))
#define ATTNRT_CUBLAS_RETURN(expr) \
  ATTNRT_RETURN_IF_ERROR(::attnrt::CublasStatus((expr), #expr, __FILE__, __LINE__))
// After a kernel launch: checks the launch error.
#define ATTNRT_CUDA_RETURN_LAUNCH() ATTNRT_CUDA_RETURN(cudaGetLastError())
