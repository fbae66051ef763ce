// The FP8 E4M3 codec (kernels/fp8_e4m3.h) against the GPU's own conversions (cuda_fp8.h:
// __nv_cvt_float_to_fp8 with __NV_SATFINITE, __nv_cvt_fp8_to_halfraw): for every FP16 input and
// a sweep of floats, the host encoder, the same encoder compiled for the device, and the
// hardware conversion give the same code; every code decodes to the same value; the kernels'
// vectorised quantization (QuantizeHalf8: the hardware conversion) stores the codec's bytes.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <attnrt/half.h>

#include "api/internal/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_e4m3.h"

namespace attnrt::kernels {
namespace {

__global__ void EncodeBoth(const float* x, int n, std::uint8_t* ours, std::uint8_t* cuda) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  ours[i] = EncodeE4M3(x[i]);
  cuda[i] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3));
}

__global__ void DecodeBoth(float* ours, float* cuda) {
  const int c = threadIdx.x;
  ours[c] = DecodeE4M3(static_cast<std::uint8_t>(c));
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
  cuda[c] = __half2float(__half(h));
}

// QuantizeHalf8 (the kernels' append: the hardware conversion) over 8 halves per thread.
__global__ void QuantizeEights(const uint4* halves, int n, float scale, uint2* codes) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) codes[i] = QuantizeHalf8(halves[i], scale);
}

bool SameCode(std::uint8_t a, std::uint8_t b) {
  const bool nan_a = (a & 0x7f) == 0x7f, nan_b = (b & 0x7f) == 0x7f;
  return nan_a || nan_b ? nan_a && nan_b : a == b;  // NaN's sign is not specified
}

class Fp8E4M3GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the GPU's conversions need one";
  }
};

TEST_F(Fp8E4M3GpuTest, EncodeMatchesTheHardwareForEveryHalfAndAFloatSweep) {
  std::vector<float> x;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    x.push_back(HalfToFloat(Half{static_cast<std::uint16_t>(h)}));
  }
  for (std::uint64_t bits = 0; bits < 0x100000000ull; bits += 0x3fffu) {  // every sign, exponent
    const std::uint32_t b = static_cast<std::uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, sizeof(f));
    x.push_back(f);
  }
  const int n = static_cast<int>(x.size());
  float* dx = nullptr;
  std::uint8_t *d_ours = nullptr, *d_cuda = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ours, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_cuda, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EncodeBoth<<<(n + 255) / 256, 256>>>(dx, n, d_ours, d_cuda);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint8_t> ours(n), cuda(n);
  ASSERT_EQ(cudaMemcpy(ours.data(), d_ours, n, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(cuda.data(), d_cuda, n, cudaMemcpyDeviceToHost), cudaSuccess);
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint8_t host = EncodeE4M3(x[i]);
    if (!SameCode(host, cuda[i]) || !SameCode(ours[i], cuda[i])) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "x = " << x[i] << ": host " << int(host) << ", device " << int(ours[i])
                      << ", hardware " << int(cuda[i]);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << n << " inputs";
  cudaFree(dx);
  cudaFree(d_ours);
  cudaFree(d_cuda);
}

// The append's vectorised quantization stores exactly the host codec's bytes (NaN's sign too):
// every FP16 value under scales that make results subnormal, normal, saturated and exact.
TEST_F(Fp8E4M3GpuTest, QuantizeHalf8StoresTheCodecsBytesForEveryHalf) {
  std::vector<Half> h(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) h[b] = Half{static_cast<std::uint16_t>(b)};
  const int n = 65536 / 8;
  uint4* d_in = nullptr;
  uint2* d_codes = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, n * sizeof(uint4)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_codes, n * sizeof(uint2)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, h.data(), n * sizeof(uint4), cudaMemcpyHostToDevice), cudaSuccess);
  for (const float scale : {1.0f, 0.0123f, 3.7f, 1.0f / 448.0f, 97.5f}) {
    ASSERT_EQ(cudaMemset(d_codes, 0xA5, n * sizeof(uint2)), cudaSuccess);  // poisoned
    QuantizeEights<<<(n + 255) / 256, 256>>>(d_in, n, scale, d_codes);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint8_t> codes(65536);
    ASSERT_EQ(cudaMemcpy(codes.data(), d_codes, codes.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    int mismatches = 0;
    for (int i = 0; i < 65536; ++i) {
      const std::uint8_t host = QuantizeE4M3(HalfToFloat(h[i]), scale);
      if (codes[i] != host && ++mismatches <= 10) {
        ADD_FAILURE() << "half bits " << i << " scale " << scale << ": device "
                      << int(codes[i]) << ", host " << int(host);
      }
    }
    EXPECT_EQ(mismatches, 0) << "scale " << scale;
  }
  cudaFree(d_in);
  cudaFree(d_codes);
}

TEST_F(Fp8E4M3GpuTest, EveryCodeDecodesAsTheHardwareDoes) {
  float *d_ours = nullptr, *d_cuda = nullptr;
  ASSERT_EQ(cudaMalloc(&d_ours, 256 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_cuda, 256 * sizeof(float)), cudaSuccess);
  DecodeBoth<<<1, 256>>>(d_ours, d_cuda);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> ours(256), cuda(256);
  ASSERT_EQ(cudaMemcpy(ours.data(), d_ours, 256 * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(cuda.data(), d_cuda, 256 * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int c = 0; c < 256; ++c) {
    const float host = DecodeE4M3(static_cast<std::uint8_t>(c));
    if (std::isnan(cuda[c])) {
      EXPECT_TRUE(std::isnan(host) && std::isnan(ours[c])) << "code " << c;
    } else {
      EXPECT_EQ(host, cuda[c]) << "code " << c;
      EXPECT_EQ(ours[c], cuda[c]) << "code " << c;
    }
  }
  cudaFree(d_ours);
  cudaFree(d_cuda);
}

}  // namespace
}  // namespace attnrt::kernels
