// What the public-Runtime tests share: N(0,1) FP16 vectors, a decode request over them, the small
// model they run (2 layers, H 8, Hkv 2, D 64, block 16) with its options, and the device parameter
// (CPU everywhere, CUDA where a GPU is present; the CUDA case skips with its reason elsewhere).
// Header-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "api/internal/cuda_device.h"
#include <attnrt/runtime.h>
#include "tests/support/random_fp16.h"

namespace attnrt::testing {

inline std::vector<Half> Normal(NormalRng& rng, std::size_t n) {
  std::vector<Half> v(n);
  FillNormal(v, rng);
  return v;
}

// A decode request of (sequence_id, layer) over q, k, v (which must outlive it); every other
// field keeps its default.
inline DecodeRequest MakeDecodeRequest(SequenceId sequence_id, int layer, std::span<const Half> q,
                                       std::span<const Half> k, std::span<const Half> v) {
  DecodeRequest req;
  req.sequence_id = sequence_id;
  req.layer = layer;
  req.q = q;
  req.k = k;
  req.v = v;
  return req;
}

// The small model on `device`: 8 MiB of KV, batches up to 16 in buckets 1..16, a 200 µs window.
inline RuntimeOptions SmallRuntimeOptions(DeviceKind device) {
  RuntimeOptions o;
  o.shape.num_layers = 2;
  o.shape.num_q_heads = 8;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 64;
  o.shape.block_size = 16;
  o.shape.max_context = 256;
  o.device = device;
  o.kv_cache_bytes = std::size_t{8} << 20;
  o.max_batch_size = 16;
  o.max_queue_delay = std::chrono::microseconds(200);
  o.buckets = {1, 2, 4, 8, 16};
  return o;
}

// A test over both executors: SetUp skips the CUDA case without a GPU and fills options_.
class RuntimeDeviceTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::kCuda && !CudaDeviceAvailable()) {
      GTEST_SKIP() << "no CUDA device (" << NoCudaDeviceReason()
                   << "): the CUDA executor case needs a GPU";
    }
    options_ = SmallRuntimeOptions(GetParam());
  }
  RuntimeOptions options_;
};

inline const auto kBothDevices = ::testing::Values(DeviceKind::kCpu, DeviceKind::kCuda);
inline std::string DeviceName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return info.param == DeviceKind::kCpu ? "Cpu" : "Cuda";
}

}  // namespace attnrt::testing
