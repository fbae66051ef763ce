// TensorMemory::kDevice through the public Runtime: the CUDA executor reads q/k/v and writes
// out/lse in the caller's device buffers (nothing copied on the host) and agrees with the same
// request made from host memory; the CPU executor refuses device memory naming the field.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <attnrt/runtime.h>
#include "tests/support/runtime_test_support.h"

namespace attnrt {
namespace {

using testing::Normal;
using testing::NormalRng;
using testing::SmallRuntimeOptions;

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> HostCopy(const T* device, std::size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

DecodeRequest Request(SequenceId id, int layer, std::span<const Half> q, std::span<const Half> k,
                      std::span<const Half> v) {
  DecodeRequest r;
  r.sequence_id = id;
  r.layer = layer;
  r.q = q;
  r.k = k;
  r.v = v;
  return r;
}

TEST(RuntimeDeviceMemoryTest, CpuExecutorRefusesDeviceMemoryNamingTheField) {
  auto rt = Runtime::Create(SmallRuntimeOptions(DeviceKind::kCpu));
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  ASSERT_TRUE((*rt)->CreateSequence(1).ok());
  NormalRng rng(1);
  const ModelShape& s = (*rt)->shape();
  std::vector<Half> q = Normal(rng, std::size_t(s.num_q_heads) * s.head_dim);
  std::vector<Half> kv = Normal(rng, s.kv_token_elems());
  std::vector<Half> out(q.size());
  DecodeRequest r = Request(1, 0, q, kv, kv);
  r.out = out.data();
  r.memory = TensorMemory::kDevice;
  auto sub = (*rt)->Submit(r);
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sub.status().message().find("kDevice"), std::string::npos) << sub.status().ToString();
}

// Two sequences with the same prompt; each step decodes the same q/k/v on both, one request
// from host memory, one from device memory. Outputs and LSE agree within FP16 tolerance (the
// two may run in batches of different sizes, so split points differ), the device output was
// written in place over a poisoned buffer, and no output comes back in the result.
TEST(RuntimeDeviceMemoryTest, CudaReadsAndWritesDeviceBuffersInPlace) {
  if (!CudaDeviceAvailable()) {
    GTEST_SKIP() << "no CUDA device: device-memory requests need the CUDA executor";
  }
  RuntimeOptions o = SmallRuntimeOptions(DeviceKind::kCuda);
  auto created = Runtime::Create(o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Runtime& rt = **created;
  const ModelShape& s = rt.shape();
  const std::size_t q_elems = std::size_t(s.num_q_heads) * s.head_dim;
  NormalRng rng(77);
  for (SequenceId id : {1, 2}) ASSERT_TRUE(rt.CreateSequence(id).ok());
  for (int layer = 0; layer < s.num_layers; ++layer) {
    const int prompt = 37 + layer * 16;  // crosses block boundaries
    std::vector<Half> k = Normal(rng, std::size_t(prompt) * s.kv_token_elems());
    std::vector<Half> v = Normal(rng, k.size());
    for (SequenceId id : {1, 2}) ASSERT_TRUE(rt.Prefill(id, layer, prompt, k, v).ok());
  }
  for (int step = 0; step < 6; ++step) {
    const int layer = step % s.num_layers;
    std::vector<Half> q = Normal(rng, q_elems);
    std::vector<Half> k = Normal(rng, s.kv_token_elems());
    std::vector<Half> v = Normal(rng, k.size());
    Half* dq = DeviceCopy(q);
    Half* dk = DeviceCopy(k);
    Half* dv = DeviceCopy(v);
    Half* dout = nullptr;
    float* dlse = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, q_elems * sizeof(Half)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dlse, s.num_q_heads * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0xff, q_elems * sizeof(Half)), cudaSuccess);  // NaN poison
    ASSERT_EQ(cudaMemset(dlse, 0xff, s.num_q_heads * sizeof(float)), cudaSuccess);

    DecodeRequest host = Request(1, layer, q, k, v);
    host.want_lse = true;
    DecodeRequest device = Request(2, layer, {dq, q_elems}, {dk, k.size()}, {dv, v.size()});
    device.out = dout;
    device.lse = dlse;
    device.want_lse = true;
    device.memory = TensorMemory::kDevice;
    auto h = rt.Submit(host);
    auto d = rt.Submit(device);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    DecodeResult hr = h->result.get();
    DecodeResult dr = d->result.get();
    ASSERT_TRUE(hr.status.ok()) << hr.status.ToString();
    ASSERT_TRUE(dr.status.ok()) << dr.status.ToString();
    EXPECT_TRUE(dr.output.empty());
    EXPECT_TRUE(dr.lse.empty());
    const std::vector<Half> out = HostCopy(dout, q_elems);
    const std::vector<float> lse = HostCopy(dlse, s.num_q_heads);
    ASSERT_EQ(hr.output.size(), q_elems);
    double max_abs = 0;
    for (std::size_t i = 0; i < q_elems; ++i) {
      const float a = HalfToFloat(out[i]), b = HalfToFloat(hr.output[i]);
      ASSERT_TRUE(std::isfinite(a)) << "device output " << i << " not written (poison left)";
      max_abs = std::max(max_abs, std::fabs(double(a) - b));
    }
    EXPECT_LE(max_abs, 2e-3) << "step " << step;
    for (int h_i = 0; h_i < s.num_q_heads; ++h_i) {
      ASSERT_TRUE(std::isfinite(lse[h_i]));
      EXPECT_NEAR(lse[h_i], hr.lse[h_i], 2e-3) << "head " << h_i;
    }
    // Both sequences took the token.
    EXPECT_EQ(*rt.SequenceLength(1, layer), *rt.SequenceLength(2, layer));
    for (void* p : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dv),
                    static_cast<void*>(dout), static_cast<void*>(dlse)}) {
      EXPECT_EQ(cudaFree(p), cudaSuccess);
    }
  }
  // The K/V the device requests appended is the host requests' K/V: one more pair of decodes,
  // this time both from host memory, must agree too.
  NormalRng again(78);
  std::vector<Half> q = Normal(again, q_elems);
  std::vector<Half> k = Normal(again, s.kv_token_elems());
  std::vector<Half> v = Normal(again, k.size());
  auto a = rt.Submit(Request(1, 0, q, k, v));
  auto b = rt.Submit(Request(2, 0, q, k, v));
  ASSERT_TRUE(a.ok() && b.ok());
  DecodeResult ar = a->result.get(), br = b->result.get();
  ASSERT_TRUE(ar.status.ok() && br.status.ok());
  double max_abs = 0;
  for (std::size_t i = 0; i < q_elems; ++i) {
    max_abs = std::max(max_abs,
                       std::fabs(double(HalfToFloat(ar.output[i])) - HalfToFloat(br.output[i])));
  }
  EXPECT_LE(max_abs, 2e-3) << "the caches diverged: device-memory K/V were appended wrongly";
}

}  // namespace
}  // namespace attnrt
