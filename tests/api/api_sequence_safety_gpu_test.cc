// Sequence calls racing decodes through the public Runtime: threads decode stable sequences
// (every output checked against a dense FP64 mirror) while another thread churns sequences
// through create, prefill, decode, free as fast as the contract allows. A freed sequence's
// blocks must never be rewritten under a batch that still reads them, and a call on a sequence
// with decodes outstanding must refuse. Both executors (CUDA where a GPU is present).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <attnrt/runtime.h>
#include "api/internal/cuda_device.h"
#include "tests/support/dense_attention.h"
#include "tests/support/random_fp16.h"
#include "tests/support/runtime_test_support.h"

namespace attnrt {
namespace {

using testing::DenseKv;
using testing::FillNormal;
using testing::NormalRng;
using testing::Normal;

class SequenceSafetyTest : public testing::RuntimeDeviceTest {
 protected:
  void SetUp() override {
    RuntimeDeviceTest::SetUp();
    if (IsSkipped()) return;
    options_.shape.max_context = 512;
    // Small: about 160 blocks, so freed blocks are reused within a few churn rounds.
    options_.kv_cache_bytes = 160 * kvcache_block_bytes();
    options_.max_queue_delay = std::chrono::microseconds(50);
    auto rt = Runtime::Create(options_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(*rt);
  }

  // K + V bytes of one block of the small model, all layers.
  std::size_t kvcache_block_bytes() const {
    const ModelShape& s = options_.shape;
    return std::size_t{2} * s.num_layers * s.kv_token_elems() * s.block_size * sizeof(Half);
  }

  // One decode of (seq, layer), checked against the mirror, which then takes the token.
  void DecodeAndCheck(std::uint64_t seq, int layer, DenseKv& mirror, NormalRng& rng,
                      std::atomic<int>& bad, std::string* first_error) {
    const ModelShape& s = rt_->shape();
    const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    DecodeRequest req = testing::MakeDecodeRequest(seq, layer, q, k, v);
    auto sub = rt_->Submit(req);
    if (!sub.ok()) {
      Fail(bad, first_error, "submit: " + sub.status().ToString());
      return;
    }
    DecodeResult r = sub->result.get();
    mirror.Append(k, v);
    if (!r.status.ok()) {
      Fail(bad, first_error, "decode: " + r.status.ToString());
      return;
    }
    const auto err = testing::CompareToReference(r.output, testing::DenseDecode(s, mirror, q));
    if (!(err.max_abs <= 2e-3 && err.rel_l2 <= 1e-3)) {
      Fail(bad, first_error, "sequence " + std::to_string(seq) + " layer " +
                                 std::to_string(layer) + " at length " +
                                 std::to_string(mirror.k.size() / s.kv_token_elems()) +
                                 ": max_abs " +
                                 std::to_string(err.max_abs));
    }
  }

  void Fail(std::atomic<int>& bad, std::string* first_error, const std::string& what) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (bad.fetch_add(1) == 0) *first_error = what;
  }

  std::unique_ptr<Runtime> rt_;
  std::mutex error_mu_;
};

TEST_P(SequenceSafetyTest, ChurnNeverCorruptsRunningDecodes) {
  const ModelShape& s = rt_->shape();
  const std::size_t kv = s.kv_token_elems();
  const std::int64_t blocks_before = rt_->kv_cache_usage().blocks_in_use;
  constexpr int kStable = 4, kStableSteps = 40, kChurnRounds = 60;
  std::vector<std::vector<DenseKv>> mirror(kStable, std::vector<DenseKv>(s.num_layers));
  NormalRng rng(5);
  for (int seq = 0; seq < kStable; ++seq) {
    ASSERT_TRUE(rt_->CreateSequence(seq).ok());
    for (int layer = 0; layer < s.num_layers; ++layer) {
      const int n = 20 + 7 * seq;
      auto k = Normal(rng, kv * n), v = Normal(rng, kv * n);
      ASSERT_TRUE(rt_->Prefill(seq, layer, n, k, v).ok());
      mirror[seq][layer].Append(k, v);
    }
  }

  std::atomic<int> bad{0};
  std::string first_error;
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      NormalRng trng(100 + t);
      for (int step = 0; step < kStableSteps; ++step) {
        for (int seq = t; seq < kStable; seq += 2) {
          for (int layer = 0; layer < s.num_layers; ++layer) {
            DecodeAndCheck(seq, layer, mirror[seq][layer], trng, bad, &first_error);
          }
        }
      }
    });
  }
  threads.emplace_back([&] {
    NormalRng crng(7);
    for (int round = 0; round < kChurnRounds; ++round) {
      const std::uint64_t id = 1000 + round;
      if (!rt_->CreateSequence(id).ok()) {
        Fail(bad, &first_error, "create churn sequence");
        return;
      }
      std::vector<DenseKv> churn(s.num_layers);
      for (int layer = 0; layer < s.num_layers; ++layer) {
        const int n = crng.NextInt(1, 40);
        auto k = Normal(crng, kv * n), v = Normal(crng, kv * n);
        if (!rt_->Prefill(id, layer, n, k, v).ok()) {
          Fail(bad, &first_error, "prefill churn sequence");
          return;
        }
        churn[layer].Append(k, v);
      }
      // A decode in flight, then free as early as the contract allows: refused while it is
      // outstanding, accepted the moment its result is visible.
      const std::size_t qn = std::size_t(s.num_q_heads) * s.head_dim;
      auto q = Normal(crng, qn), k = Normal(crng, kv), v = Normal(crng, kv);
      DecodeRequest req = testing::MakeDecodeRequest(id, round % s.num_layers, q, k, v);
      auto sub = rt_->Submit(req);
      if (!sub.ok()) {
        Fail(bad, &first_error, "churn submit: " + sub.status().ToString());
        return;
      }
      Status freed = rt_->FreeSequence(id);
      if (freed.code() == StatusCode::kFailedPrecondition) {
        refused.fetch_add(1);
        if (rt_->Prefill(id, 0, 1, k, v).code() != StatusCode::kFailedPrecondition &&
            sub->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
          Fail(bad, &first_error, "prefill of a sequence with a decode outstanding was not refused");
        }
      }
      DecodeResult r = sub->result.get();
      churn[req.layer].Append(k, v);
      if (!r.status.ok()) {
        Fail(bad, &first_error, "churn decode: " + r.status.ToString());
      } else {
        const auto err =
            testing::CompareToReference(r.output, testing::DenseDecode(s, churn[req.layer], q));
        if (!(err.max_abs <= 2e-3 && err.rel_l2 <= 1e-3)) {
          Fail(bad, &first_error, "churn decode mismatch, round " + std::to_string(round));
        }
      }
      if (!freed.ok()) freed = rt_->FreeSequence(id);  // its result is visible now
      if (!freed.ok()) Fail(bad, &first_error, "free after the result: " + freed.ToString());
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0) << first_error;
  std::printf("churn: %d of %d frees refused while a decode was outstanding\n", refused.load(),
              kChurnRounds);

  for (int seq = 0; seq < kStable; ++seq) ASSERT_TRUE(rt_->FreeSequence(seq).ok());
  EXPECT_EQ(rt_->kv_cache_usage().blocks_in_use, blocks_before) << "KV blocks leaked";
  EXPECT_EQ(rt_->kv_cache_usage().sequences, 0);
}

TEST_P(SequenceSafetyTest, CallsOnASequenceWithADecodeQueuedAreRefused) {
  rt_.reset();
  options_.max_queue_delay = std::chrono::seconds(30);  // the request stays queued
  auto rt = Runtime::Create(options_);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  rt_ = std::move(*rt);
  const ModelShape& s = rt_->shape();
  NormalRng rng(9);
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  ASSERT_TRUE(rt_->CreateSequence(1).ok());
  auto pk = Normal(rng, kv * 3), pv = Normal(rng, kv * 3);
  ASSERT_TRUE(rt_->Prefill(1, 0, 3, pk, pv).ok());
  auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
  DecodeRequest req{.sequence_id = 1, .layer = 0, .q = q, .k = k, .v = v};
  auto sub = rt_->Submit(req);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();

  const Status free_status = rt_->FreeSequence(1);
  const Status fork_status = rt_->ForkSequence(1, 2);
  const Status prefill_status = rt_->Prefill(1, 1, 3, pk, pv);
  for (const auto& [call, st] : {std::pair{"FreeSequence", free_status},
                                 std::pair{"ForkSequence", fork_status},
                                 std::pair{"Prefill", prefill_status}}) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << call << ": " << st.ToString();
    EXPECT_NE(st.message().find(call), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("1 decode request(s)"), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(*rt_->SequenceLength(1, 1), 0) << "the refused prefill wrote nothing";

  ASSERT_TRUE(rt_->Cancel(sub->handle));
  EXPECT_EQ(sub->result.get().status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(rt_->ForkSequence(1, 2).ok());
  EXPECT_TRUE(rt_->FreeSequence(1).ok());
  EXPECT_TRUE(rt_->FreeSequence(2).ok());
}

TEST_P(SequenceSafetyTest, EmptyCallbackIsRejectedAndCallsAfterShutdownAreUnavailable) {
  const ModelShape& s = rt_->shape();
  NormalRng rng(3);
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  ASSERT_TRUE(rt_->CreateSequence(4).ok());
  auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
  DecodeRequest req{.sequence_id = 4, .layer = 0, .q = q, .k = k, .v = v};
  auto empty = rt_->Submit(req, DoneCallback());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("done"), std::string::npos);

  std::vector<Half> nan_k = k;
  nan_k[3].bits = 0x7e00;  // NaN
  const Status nan_prefill = rt_->Prefill(4, 0, 1, nan_k, v);
  EXPECT_EQ(nan_prefill.code(), StatusCode::kInvalidArgument) << nan_prefill.ToString();
  EXPECT_NE(nan_prefill.message().find("k holds a non-finite value at element 3"),
            std::string::npos);
  EXPECT_EQ(*rt_->SequenceLength(4, 0), 0) << "the refused prefill stored nothing";

  auto bad_layer = rt_->SequenceLength(4, -1);
  EXPECT_EQ(bad_layer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_layer.status().message().find("layer -1"), std::string::npos);
  EXPECT_GT(rt_->kv_cache_usage().blocks_total, 0);
  EXPECT_NE(rt_->MetricsText().find("attnrt_kv_blocks{state=\"in_use\"}"), std::string::npos);

  rt_->Shutdown();
  EXPECT_EQ(rt_->CreateSequence(5).code(), StatusCode::kUnavailable);
  EXPECT_EQ(rt_->FreeSequence(4).code(), StatusCode::kUnavailable);
  EXPECT_EQ(rt_->ForkSequence(4, 6).code(), StatusCode::kUnavailable);
  EXPECT_EQ(rt_->Prefill(4, 0, 1, k, v).code(), StatusCode::kUnavailable);
  EXPECT_EQ(rt_->SequenceLength(4, 0).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(rt_->Submit(req).status().code(), StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Devices, SequenceSafetyTest, testing::kBothDevices, testing::DeviceName);

}  // namespace
}  // namespace attnrt
