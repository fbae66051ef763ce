// The C interface (attnrt/c_api.h) on the CPU executor: error codes and messages, the sequence
// calls, blocking and asynchronous decode checked against a dense FP64 reference; the FP8 E4M3
// KV cache option with its scales.
#include <attnrt/c_api.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include "api/internal/fp8_e4m3.h"
#include "tests/support/dense_attention.h"
#include "tests/support/random_fp16.h"

namespace attnrt {
namespace {

attnrt_options SmallOptions() {
  attnrt_options o;
  attnrt_options_init(&o);
  o.num_layers = 2;
  o.num_q_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.block_size = 16;
  o.max_context = 128;
  o.device = ATTNRT_DEVICE_CPU;
  o.kv_cache_bytes = 4 << 20;
  return o;
}

ModelShape ShapeOf(const attnrt_options& o) {
  ModelShape s;
  s.num_layers = o.num_layers;
  s.num_q_heads = o.num_q_heads;
  s.num_kv_heads = o.num_kv_heads;
  s.head_dim = o.head_dim;
  s.block_size = o.block_size;
  s.max_context = o.max_context;
  return s;
}

std::vector<uint16_t> Normal(testing::NormalRng& rng, std::size_t n) {
  std::vector<Half> h(n);
  testing::FillNormal(h, rng);
  std::vector<uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i) bits[i] = h[i].bits;
  return bits;
}

std::span<const Half> AsHalves(const std::vector<uint16_t>& v) {
  return {reinterpret_cast<const Half*>(v.data()), v.size()};
}

TEST(CApiTest, CreateRejectsBadOptionsNamingTheField) {
  attnrt_options o = SmallOptions();
  o.head_dim = 96;
  attnrt_runtime* rt = reinterpret_cast<attnrt_runtime*>(0x1);
  char error[256] = "";
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(std::string(error).find("head_dim = 96"), std::string::npos) << error;

  o = SmallOptions();
  o.device = static_cast<attnrt_device>(7);
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("options.device = 7"), std::string::npos) << error;

  char tiny[8];
  o = SmallOptions();
  o.max_queue_delay_us = -1;
  EXPECT_EQ(attnrt_create(&o, &rt, tiny, sizeof(tiny)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tiny), "options");  // truncated to 7 characters + NUL
  EXPECT_EQ(attnrt_create(nullptr, &rt, nullptr, 0), ATTNRT_INVALID_ARGUMENT);
}

TEST(CApiTest, OptionsInitSetsTheFp16CacheWithoutScales) {
  attnrt_options o;
  std::memset(&o, 0xab, sizeof(o));
  attnrt_options_init(&o);
  EXPECT_EQ(o.kv_cache_type, ATTNRT_KV_CACHE_FP16);
  EXPECT_EQ(o.kv_scales, nullptr);
  EXPECT_EQ(o.num_kv_scales, 0u);
}

TEST(CApiTest, CreateRejectsBadKvCacheOptionsNamingTheField) {
  attnrt_runtime* rt = reinterpret_cast<attnrt_runtime*>(0x1);
  char error[256] = "";
  attnrt_options o = SmallOptions();  // 2 layers x 2 KV heads: 8 scales
  o.kv_cache_type = static_cast<attnrt_kv_cache_type>(5);
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(std::string(error).find("options.kv_cache_type = 5"), std::string::npos) << error;

  o = SmallOptions();
  o.kv_cache_type = ATTNRT_KV_CACHE_FP8_E4M3;
  float scales[8] = {1, 1, 1, 1, 1, -2, 1, 1};
  o.kv_scales = scales;
  o.num_kv_scales = 8;
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("kv_scales[5] = -2"), std::string::npos) << error;
  scales[5] = 0.0f;
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("kv_scales[5] = 0"), std::string::npos) << error;
  scales[5] = 1.0f;
  o.num_kv_scales = 7;
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("kv_scales has 7 values"), std::string::npos) << error;
  o.num_kv_scales = std::size_t{1} << 40;  // never read: refused before any copy
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("options.num_kv_scales = 1099511627776"), std::string::npos)
      << error;
  o.kv_scales = nullptr;
  o.num_kv_scales = 8;
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("options.kv_scales is NULL"), std::string::npos) << error;

  o = SmallOptions();  // scales with an FP16 cache
  o.kv_scales = scales;
  o.num_kv_scales = 8;
  EXPECT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("fp16 takes none"), std::string::npos) << error;
  EXPECT_EQ(rt, nullptr);
}

// An FP8 cache with calibrated scales: prefill and decodes match the FP64 reference over the
// dequantised K/V; the scales are copied during attnrt_create (the caller's array may go).
TEST(CApiTest, Fp8CacheWithScalesMatchesTheDequantisedReference) {
  attnrt_options o = SmallOptions();
  const ModelShape shape = ShapeOf(o);
  o.kv_cache_type = ATTNRT_KV_CACHE_FP8_E4M3;
  std::vector<float> scales = {0.5f, 2.0f, 1.0f, 0.25f, 1.5f, 0.75f, 3.0f, 1.0f};
  const std::vector<float> kept = scales;
  o.kv_scales = scales.data();
  o.num_kv_scales = scales.size();
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  std::fill(scales.begin(), scales.end(), -1.0f);  // the runtime holds its own copy

  const int layer = 1;
  auto dequantised = [&](const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                         testing::DenseKv* mirror) {
    for (std::size_t i = 0; i < k.size(); ++i) {
      const int h = static_cast<int>(i / shape.head_dim % shape.num_kv_heads);
      const float ks = kept[shape.kv_scale_index(false, layer, h)];
      const float vs = kept[shape.kv_scale_index(true, layer, h)];
      mirror->k.push_back(DequantizeE4M3(QuantizeE4M3(HalfToFloat(Half{k[i]}), ks), ks));
      mirror->v.push_back(DequantizeE4M3(QuantizeE4M3(HalfToFloat(Half{v[i]}), vs), vs));
    }
  };
  const std::size_t kv = shape.kv_token_elems(), qn = std::size_t(shape.num_q_heads) * shape.head_dim;
  testing::NormalRng rng(31);
  testing::DenseKv mirror;
  ASSERT_EQ(attnrt_create_sequence(rt, 3, error, sizeof(error)), ATTNRT_OK) << error;
  auto pk = Normal(rng, kv * 40), pv = Normal(rng, kv * 40);
  ASSERT_EQ(attnrt_prefill(rt, 3, layer, 40, pk.data(), pv.data(), error, sizeof(error)), ATTNRT_OK)
      << error;
  dequantised(pk, pv, &mirror);
  for (int step = 0; step < 4; ++step) {
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    std::vector<uint16_t> out(qn, 0x7e00);
    ASSERT_EQ(attnrt_decode(rt, 3, layer, q.data(), k.data(), v.data(), out.data(), error,
                            sizeof(error)),
              ATTNRT_OK)
        << error;
    dequantised(k, v, &mirror);
    auto err = testing::CompareToReference(AsHalves(out),
                                           testing::DenseDecode(shape, mirror, AsHalves(q)));
    EXPECT_LE(err.max_abs, 2e-3) << "step " << step;
    EXPECT_LE(err.rel_l2, 1e-3) << "step " << step;
  }
  attnrt_destroy(rt);
}

TEST(CApiTest, DecodesMatchDenseReferenceBlockingAndAsync) {
  attnrt_options o = SmallOptions();
  const ModelShape shape = ShapeOf(o);
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;

  const std::size_t kv = shape.kv_token_elems(), qn = std::size_t(shape.num_q_heads) * shape.head_dim;
  testing::NormalRng rng(21);
  testing::DenseKv mirror;
  ASSERT_EQ(attnrt_create_sequence(rt, 5, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(attnrt_create_sequence(rt, 5, error, sizeof(error)), ATTNRT_ALREADY_EXISTS);
  auto pk = Normal(rng, kv * 20), pv = Normal(rng, kv * 20);
  ASSERT_EQ(attnrt_prefill(rt, 5, 1, 20, pk.data(), pv.data(), error, sizeof(error)), ATTNRT_OK)
      << error;
  mirror.Append(AsHalves(pk), AsHalves(pv));

  // Blocking decode.
  auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
  std::vector<uint16_t> out(qn, 0x7e00);  // poisoned (NaN)
  ASSERT_EQ(attnrt_decode(rt, 5, 1, q.data(), k.data(), v.data(), out.data(), error, sizeof(error)),
            ATTNRT_OK)
      << error;
  mirror.Append(AsHalves(k), AsHalves(v));
  auto err = testing::CompareToReference(AsHalves(out), testing::DenseDecode(shape, mirror, AsHalves(q)));
  EXPECT_LE(err.max_abs, 2e-3);
  EXPECT_LE(err.rel_l2, 1e-3);

  // Asynchronous decode: the callback gets the output.
  struct Result {
    std::atomic<int> calls{0};
    attnrt_code code = ATTNRT_INTERNAL;
    std::vector<uint16_t> out;
  } result;
  auto q2 = Normal(rng, qn), k2 = Normal(rng, kv), v2 = Normal(rng, kv);
  ASSERT_EQ(attnrt_submit(
                rt, 5, 1, 0, q2.data(), k2.data(), v2.data(),
                [](void* user, attnrt_code code, const char*, const uint16_t* out) {
                  auto* r = static_cast<Result*>(user);
                  r->code = code;
                  if (out) r->out.assign(out, out + 4 * 64);
                  r->calls++;
                },
                &result, error, sizeof(error)),
            ATTNRT_OK)
      << error;
  mirror.Append(AsHalves(k2), AsHalves(v2));
  attnrt_drain(rt);
  EXPECT_EQ(result.calls.load(), 1);
  ASSERT_EQ(result.code, ATTNRT_OK);
  err = testing::CompareToReference(AsHalves(result.out),
                                    testing::DenseDecode(shape, mirror, AsHalves(q2)));
  EXPECT_LE(err.max_abs, 2e-3);
  EXPECT_LE(err.rel_l2, 1e-3);

  int length = 0;
  ASSERT_EQ(attnrt_sequence_length(rt, 5, 1, &length, error, sizeof(error)), ATTNRT_OK);
  EXPECT_EQ(length, 22);
  ASSERT_EQ(attnrt_sequence_length(rt, 5, 0, &length, error, sizeof(error)), ATTNRT_OK);
  EXPECT_EQ(length, 0);
  // After drain, submits are refused.
  EXPECT_EQ(attnrt_decode(rt, 5, 0, q.data(), k.data(), v.data(), out.data(), error, sizeof(error)),
            ATTNRT_UNAVAILABLE);
  attnrt_destroy(rt);
  attnrt_destroy(nullptr);
}

TEST(CApiTest, NullArgumentsAreNamed) {
  attnrt_options o = SmallOptions();
  attnrt_runtime* rt = nullptr;
  char error[128] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_create_sequence(rt, 1, error, sizeof(error)), ATTNRT_OK);
  std::vector<uint16_t> q(4 * 64), kv(2 * 64), out(4 * 64);
  EXPECT_EQ(attnrt_decode(rt, 1, 0, q.data(), nullptr, kv.data(), out.data(), error, sizeof(error)),
            ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "k is NULL");
  EXPECT_EQ(attnrt_decode(rt, 1, 0, q.data(), kv.data(), kv.data(), nullptr, error, sizeof(error)),
            ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "out is NULL");
  EXPECT_EQ(attnrt_submit(rt, 1, 0, 0, q.data(), kv.data(), kv.data(), nullptr, nullptr, error,
                          sizeof(error)),
            ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "done is NULL");
  EXPECT_EQ(attnrt_create_sequence(nullptr, 1, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "runtime is NULL");
  EXPECT_EQ(attnrt_decode(rt, 99, 0, q.data(), kv.data(), kv.data(), out.data(), error,
                          sizeof(error)),
            ATTNRT_NOT_FOUND);
  EXPECT_NE(std::string(error).find("99"), std::string::npos) << error;
  attnrt_destroy(rt);
}

// Fork shares the parent's prefix; afterwards parent and child each see only their own tokens.
// Free releases the id (later calls answer NOT_FOUND naming it) without touching the child.
// A token count past max_context is refused before any K/V is read: the C caller's buffers
// need only hold what could fit (found by c_api_fuzz: the finite scan read num_tokens tokens
// first; under ASan this test would report the overread).
TEST(CApiTest, PrefillPastMaxContextIsRefusedBeforeReadingKv) {
  attnrt_options o = SmallOptions();
  const ModelShape shape = ShapeOf(o);
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_create_sequence(rt, 5, error, sizeof(error)), ATTNRT_OK) << error;
  testing::NormalRng rng(34);
  auto k = Normal(rng, shape.kv_token_elems()), v = Normal(rng, shape.kv_token_elems());
  for (int n : {o.max_context + 1, 1 << 24}) {
    EXPECT_EQ(attnrt_prefill(rt, 5, 0, n, k.data(), v.data(), error, sizeof(error)),
              ATTNRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(error).find("max_context"), std::string::npos) << error;
  }
  int length = -1;
  ASSERT_EQ(attnrt_sequence_length(rt, 5, 0, &length, error, sizeof(error)), ATTNRT_OK);
  EXPECT_EQ(length, 0);
  attnrt_destroy(rt);
}

TEST(CApiTest, ForkAndFreeSequence) {
  attnrt_options o = SmallOptions();
  const ModelShape shape = ShapeOf(o);
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  const std::size_t kv = shape.kv_token_elems();
  const std::size_t qn = std::size_t(shape.num_q_heads) * shape.head_dim;
  testing::NormalRng rng(33);
  testing::DenseKv parent;
  ASSERT_EQ(attnrt_create_sequence(rt, 5, error, sizeof(error)), ATTNRT_OK) << error;
  auto pk = Normal(rng, kv * 21), pv = Normal(rng, kv * 21);
  ASSERT_EQ(attnrt_prefill(rt, 5, 0, 21, pk.data(), pv.data(), error, sizeof(error)), ATTNRT_OK)
      << error;
  parent.Append(AsHalves(pk), AsHalves(pv));

  ASSERT_EQ(attnrt_fork_sequence(rt, 5, 6, error, sizeof(error)), ATTNRT_OK) << error;
  int length = 0;
  ASSERT_EQ(attnrt_sequence_length(rt, 6, 0, &length, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(length, 21);
  testing::DenseKv child = parent;

  auto decode_and_check = [&](uint64_t id, testing::DenseKv& mirror, const char* what) {
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    std::vector<uint16_t> out(qn, 0x7e00);  // poisoned (NaN)
    ASSERT_EQ(attnrt_decode(rt, id, 0, q.data(), k.data(), v.data(), out.data(), error,
                            sizeof(error)),
              ATTNRT_OK)
        << what << ": " << error;
    mirror.Append(AsHalves(k), AsHalves(v));
    auto err = testing::CompareToReference(AsHalves(out),
                                           testing::DenseDecode(shape, mirror, AsHalves(q)));
    EXPECT_LE(err.max_abs, 2e-3) << what;
    EXPECT_LE(err.rel_l2, 1e-3) << what;
  };
  decode_and_check(6, child, "child, first step");
  decode_and_check(5, parent, "parent after the child diverged");
  decode_and_check(6, child, "child, second step");

  ASSERT_EQ(attnrt_free_sequence(rt, 5, error, sizeof(error)), ATTNRT_OK) << error;
  decode_and_check(6, child, "child after the parent was freed");
  ASSERT_EQ(attnrt_sequence_length(rt, 6, 0, &length, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(length, 24);

  std::fill(std::begin(error), std::end(error), '\0');
  EXPECT_EQ(attnrt_sequence_length(rt, 5, 0, &length, error, sizeof(error)), ATTNRT_NOT_FOUND);
  EXPECT_NE(std::string(error).find("5"), std::string::npos) << error;
  EXPECT_EQ(attnrt_free_sequence(rt, 5, error, sizeof(error)), ATTNRT_NOT_FOUND);
  EXPECT_NE(std::string(error).find("sequence 5"), std::string::npos) << error;
  // The freed id can be created again, empty.
  ASSERT_EQ(attnrt_create_sequence(rt, 5, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_sequence_length(rt, 5, 0, &length, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(length, 0);
  attnrt_destroy(rt);
}

TEST(CApiTest, ForkAndFreeErrorsAreCodedAndNamed) {
  attnrt_options o = SmallOptions();
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(attnrt_fork_sequence(rt, 42, 43, error, sizeof(error)), ATTNRT_NOT_FOUND);
  EXPECT_NE(std::string(error).find("42"), std::string::npos) << error;
  EXPECT_EQ(attnrt_free_sequence(rt, 44, error, sizeof(error)), ATTNRT_NOT_FOUND);
  EXPECT_NE(std::string(error).find("44"), std::string::npos) << error;

  ASSERT_EQ(attnrt_create_sequence(rt, 1, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_create_sequence(rt, 2, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(attnrt_fork_sequence(rt, 1, 2, error, sizeof(error)), ATTNRT_ALREADY_EXISTS);
  EXPECT_NE(std::string(error).find("sequence 2"), std::string::npos) << error;
  // The failed fork onto 43 created nothing.
  int length = -1;
  EXPECT_EQ(attnrt_sequence_length(rt, 43, 0, &length, error, sizeof(error)), ATTNRT_NOT_FOUND);

  EXPECT_EQ(attnrt_fork_sequence(nullptr, 1, 3, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "runtime is NULL");
  EXPECT_EQ(attnrt_free_sequence(nullptr, 1, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_STREQ(error, "runtime is NULL");
  // No error buffer: the code alone comes back.
  EXPECT_EQ(attnrt_free_sequence(rt, 44, nullptr, 0), ATTNRT_NOT_FOUND);
  EXPECT_EQ(attnrt_fork_sequence(rt, 42, 43, nullptr, 0), ATTNRT_NOT_FOUND);
  char tiny[9];
  EXPECT_EQ(attnrt_free_sequence(rt, 44, tiny, sizeof(tiny)), ATTNRT_NOT_FOUND);
  EXPECT_EQ(std::string(tiny), "sequence");  // truncated to 8 characters + NUL

  // After drain decodes are refused but sequence calls still work (attnrt/runtime.h, Drain).
  attnrt_drain(rt);
  EXPECT_EQ(attnrt_fork_sequence(rt, 1, 3, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(attnrt_free_sequence(rt, 3, error, sizeof(error)), ATTNRT_OK) << error;
  std::vector<uint16_t> q(4 * 64), kv(2 * 64), out(4 * 64);
  EXPECT_EQ(attnrt_decode(rt, 1, 0, q.data(), kv.data(), kv.data(), out.data(), error,
                          sizeof(error)),
            ATTNRT_UNAVAILABLE);
  attnrt_destroy(rt);
}

// A request held by a long window is outstanding: free and fork of its sequence are refused with
// FAILED_PRECONDITION naming the call; attnrt_destroy still finishes it (its callback runs).
TEST(CApiTest, FreeAndForkRefusedWhileADecodeIsOutstanding) {
  attnrt_options o = SmallOptions();
  o.max_batch_size = 2;              // a lone request does not fill the full bucket
  o.max_queue_delay_us = 5'000'000;  // and the window outlasts the test
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_create_sequence(rt, 7, error, sizeof(error)), ATTNRT_OK) << error;
  testing::NormalRng rng(8);
  auto q = Normal(rng, 4 * 64), k = Normal(rng, 2 * 64), v = Normal(rng, 2 * 64);
  struct Result {
    std::atomic<int> calls{0};
    std::atomic<int> code{-1};
  } result;
  ASSERT_EQ(attnrt_submit(
                rt, 7, 0, 0, q.data(), k.data(), v.data(),
                [](void* user, attnrt_code code, const char*, const uint16_t*) {
                  auto* r = static_cast<Result*>(user);
                  r->code = code;
                  r->calls++;
                },
                &result, error, sizeof(error)),
            ATTNRT_OK)
      << error;
  EXPECT_EQ(attnrt_free_sequence(rt, 7, error, sizeof(error)), ATTNRT_FAILED_PRECONDITION);
  EXPECT_NE(std::string(error).find("FreeSequence"), std::string::npos) << error;
  EXPECT_EQ(attnrt_fork_sequence(rt, 7, 8, error, sizeof(error)), ATTNRT_FAILED_PRECONDITION);
  EXPECT_NE(std::string(error).find("ForkSequence"), std::string::npos) << error;
  EXPECT_EQ(result.calls.load(), 0);

  attnrt_drain(rt);  // dispatches the held request without waiting for the window
  EXPECT_EQ(result.calls.load(), 1);
  EXPECT_EQ(result.code.load(), ATTNRT_OK);
  ASSERT_EQ(attnrt_fork_sequence(rt, 7, 8, error, sizeof(error)), ATTNRT_OK) << error;
  int length = 0;
  ASSERT_EQ(attnrt_sequence_length(rt, 8, 0, &length, error, sizeof(error)), ATTNRT_OK) << error;
  EXPECT_EQ(length, 1);
  ASSERT_EQ(attnrt_free_sequence(rt, 7, error, sizeof(error)), ATTNRT_OK) << error;
  attnrt_destroy(rt);
}

TEST(CApiTest, DestroyFinishesAnAdmittedRequest) {
  attnrt_options o = SmallOptions();
  o.max_batch_size = 2;
  o.max_queue_delay_us = 5'000'000;
  attnrt_runtime* rt = nullptr;
  char error[256] = "";
  ASSERT_EQ(attnrt_create(&o, &rt, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_create_sequence(rt, 1, error, sizeof(error)), ATTNRT_OK) << error;
  ASSERT_EQ(attnrt_fork_sequence(rt, 1, 2, error, sizeof(error)), ATTNRT_OK) << error;
  testing::NormalRng rng(9);
  auto q = Normal(rng, 4 * 64), k = Normal(rng, 2 * 64), v = Normal(rng, 2 * 64);
  std::atomic<int> ok_calls{0};
  ASSERT_EQ(attnrt_submit(
                rt, 2, 1, 0, q.data(), k.data(), v.data(),
                [](void* user, attnrt_code code, const char*, const uint16_t* out) {
                  if (code == ATTNRT_OK && out != nullptr) ++*static_cast<std::atomic<int>*>(user);
                },
                &ok_calls, error, sizeof(error)),
            ATTNRT_OK)
      << error;
  attnrt_destroy(rt);  // not Unavailable: destroy drains (c_api.h)
  EXPECT_EQ(ok_calls.load(), 1);
}

}  // namespace
}  // namespace attnrt
