// Whether a CUDA device can be used, for code that includes no CUDA header (the facade, tests,
// tools): false in a build without CUDA (ATTNRT_WITH_CUDA=OFF). Internal; target
// attnrt_cuda_device.
#pragma once

#include <string>

namespace attnrt {

// True where a CUDA device is usable (tests skip GPU cases otherwise).
bool CudaDeviceAvailable();
// Why no CUDA device can be used, or "" where one can: the failing call and its error, no device
// found, or a library built without CUDA.
std::string NoCudaDeviceReason();

}  // namespace attnrt
