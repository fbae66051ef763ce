// The public Runtime end to end: sequences, prefill, decode requests from several threads,
// outputs checked against a dense FP64 reference; bad input rejected with a Status naming the
// field. Runs on the CPU executor everywhere and on the CUDA executor where a GPU is present.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
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

class RuntimeTest : public testing::RuntimeDeviceTest {
 protected:
  void SetUp() override {
    RuntimeDeviceTest::SetUp();
    if (IsSkipped()) return;
    auto rt = Runtime::Create(options_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(*rt);
  }

  // `sequences` sequences, each layer prefilled with `prompt` random tokens; mirror_ holds
  // their K/V for the dense reference.
  void PrefillSequences(int sequences, int prompt, NormalRng& rng) {
    const ModelShape& s = rt_->shape();
    const std::size_t kv = s.kv_token_elems();
    mirror_.assign(sequences, std::vector<DenseKv>(s.num_layers));
    for (int seq = 0; seq < sequences; ++seq) {
      ASSERT_TRUE(rt_->CreateSequence(seq).ok());
      for (int layer = 0; layer < s.num_layers; ++layer) {
        auto k = Normal(rng, kv * prompt), v = Normal(rng, kv * prompt);
        ASSERT_TRUE(rt_->Prefill(seq, layer, prompt, k, v).ok());
        mirror_[seq][layer].Append(k, v);
      }
    }
  }

  enum class LseWanted { kNo, kIntoResult, kIntoCallersArray };
  // One decode of (seq, layer) with fresh random q/k/v through `decode`, its output (or `out`,
  // where the request gave one) and the LSE asked for against the dense reference.
  void DecodeAndCheck(int seq, int layer, NormalRng& rng,
                      const std::function<DecodeResult(const DecodeRequest&)>& decode,
                      const std::string& where, std::vector<Half>* out = nullptr,
                      LseWanted lse = LseWanted::kNo) {
    const ModelShape& s = rt_->shape();
    const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    DecodeRequest req = testing::MakeDecodeRequest(seq, layer, q, k, v);
    if (out != nullptr) {
      out->assign(qn, Half{0x7e00});  // NaN: every element must be written
      req.out = out->data();
    }
    // LSE too on some steps: into DecodeResult (want_lse) or a poisoned caller-given array.
    std::vector<float> lse_out;
    if (lse != LseWanted::kNo) req.want_lse = true;
    if (lse == LseWanted::kIntoCallersArray) {
      lse_out.assign(static_cast<std::size_t>(s.num_q_heads), std::nanf(""));
      req.lse = lse_out.data();
    }
    DecodeResult r = decode(req);
    ASSERT_TRUE(r.status.ok()) << where << ": " << r.status.ToString();
    mirror_[seq][layer].Append(k, v);
    if (out != nullptr) {
      EXPECT_TRUE(r.output.empty()) << where;
    }
    const std::vector<Half>& got = out != nullptr ? *out : r.output;
    ASSERT_EQ(got.size(), qn) << where;
    std::vector<double> ref_lse;
    auto err = testing::CompareToReference(
        got, testing::DenseDecode(s, mirror_[seq][layer], q, &ref_lse));
    EXPECT_LE(err.max_abs, 2e-3) << where;
    EXPECT_LE(err.rel_l2, 1e-3) << where;
    if (lse == LseWanted::kNo) return;
    const std::vector<float>& got_lse = lse == LseWanted::kIntoCallersArray ? lse_out : r.lse;
    ASSERT_EQ(got_lse.size(), ref_lse.size()) << where;
    for (std::size_t h = 0; h < ref_lse.size(); ++h) {
      EXPECT_NEAR(got_lse[h], ref_lse[h], 2e-3) << where << ", LSE of head " << h;
    }
  }

  // `threads` threads; thread t decodes every layer of the sequences s with s % threads == t,
  // `steps` times, through decode(t, request). Returns the decodes checked.
  int DecodeFromThreads(int threads, int steps, int seed,
                        const std::function<DecodeResult(int, const DecodeRequest&)>& decode) {
    const int sequences = static_cast<int>(mirror_.size());
    std::atomic<int> checked{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        NormalRng rng(seed + t);
        for (int step = 0; step < steps; ++step) {
          for (int layer = 0; layer < rt_->shape().num_layers; ++layer) {
            for (int seq = t; seq < sequences; seq += threads) {
              DecodeAndCheck(seq, layer, rng,
                             [&](const DecodeRequest& r) { return decode(t, r); },
                             "thread " + std::to_string(t) + " seq " + std::to_string(seq) +
                                 " layer " + std::to_string(layer) + " step " +
                                 std::to_string(step));
              ++checked;
            }
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    return checked.load();
  }

  DecodeResult SubmitAndGet(const DecodeRequest& r) {
    auto sub = rt_->Submit(r);
    if (!sub.ok()) return DecodeResult{.status = sub.status()};
    return sub->result.get();
  }

  std::unique_ptr<Runtime> rt_;
  std::vector<std::vector<DenseKv>> mirror_;  // [sequence][layer]
};

TEST_P(RuntimeTest, DecodesFromManyThreadsMatchDenseReference) {
  const int kSequences = 8, kSteps = 6, kThreads = 4, kPrompt = 37;
  NormalRng rng(11);
  PrefillSequences(kSequences, kPrompt, rng);
  const int checked = DecodeFromThreads(kThreads, kSteps, 100, [&](int, const DecodeRequest& r) {
    return SubmitAndGet(r);
  });
  EXPECT_EQ(checked, kSequences * kSteps * rt_->shape().num_layers);
  for (int seq = 0; seq < kSequences; ++seq) {
    auto len = rt_->SequenceLength(seq, 1);
    ASSERT_TRUE(len.ok());
    EXPECT_EQ(*len, kPrompt + kSteps);
  }
}

// Decode: a lone caller's steps run on its own thread (all of them, with nothing else queued or
// running), into a poisoned caller-given `out` and into DecodeResult, with and without LSE (into
// the result or a poisoned caller-given array); then callers of Decode
// beside callers of Submit, each request's output against the dense reference.
TEST_P(RuntimeTest, DecodeMatchesDenseReferenceAloneAndBesideSubmits) {
  const int kPrompt = 29, kAlone = 12, kSequences = 8, kSteps = 5, kThreads = 4;
  NormalRng rng(23);
  PrefillSequences(kSequences, kPrompt, rng);
  auto decode = [&](const DecodeRequest& r) { return rt_->Decode(r); };
  for (int step = 0; step < kAlone; ++step) {
    std::vector<Half> out;
    DecodeAndCheck(0, 1, rng, decode, "alone, step " + std::to_string(step),
                   step % 2 == 0 ? &out : nullptr, static_cast<LseWanted>(step % 3));
  }
  const std::string metrics = rt_->MetricsText();
  EXPECT_NE(metrics.find("attnrt_scheduler_decoded_inline_total " + std::to_string(kAlone)),
            std::string::npos)
      << metrics;
  const int checked = DecodeFromThreads(kThreads, kSteps, 300, [&](int t, const DecodeRequest& r) {
    return t % 2 == 0 ? rt_->Decode(r) : SubmitAndGet(r);
  });
  EXPECT_EQ(checked, kSequences * kSteps * rt_->shape().num_layers);
  EXPECT_EQ(*rt_->SequenceLength(0, 1), kPrompt + kAlone + kSteps);
}

// The documented order guarantee: steps of one (sequence, layer) submitted from one thread
// without waiting run in submission order, so output i attends exactly tokens 0..prompt+i.
TEST_P(RuntimeTest, PipelinedStepsFromOneThreadRunInSubmissionOrder) {
  const ModelShape& s = rt_->shape();
  const int kSteps = 40, kPrompt = 5;
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  NormalRng rng(77);
  DenseKv mirror;
  ASSERT_TRUE(rt_->CreateSequence(3).ok());
  auto pk = Normal(rng, kv * kPrompt), pv = Normal(rng, kv * kPrompt);
  ASSERT_TRUE(rt_->Prefill(3, 1, kPrompt, pk, pv).ok());
  mirror.Append(pk, pv);
  std::vector<std::vector<double>> expected;
  std::vector<ResultFuture> results;
  for (int i = 0; i < kSteps; ++i) {
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    DecodeRequest req = testing::MakeDecodeRequest(3, 1, q, k, v);
    auto sub = rt_->Submit(req);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    results.push_back(std::move(sub->result));
    mirror.Append(k, v);
    expected.push_back(testing::DenseDecode(s, mirror, q));
  }
  for (int i = 0; i < kSteps; ++i) {
    DecodeResult r = results[i].get();
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    auto err = testing::CompareToReference(r.output, expected[i]);
    EXPECT_LE(err.max_abs, 2e-3) << "step " << i;
    EXPECT_LE(err.rel_l2, 1e-3) << "step " << i;
  }
  EXPECT_EQ(*rt_->SequenceLength(3, 1), kPrompt + kSteps);
}

TEST_P(RuntimeTest, RejectsMalformedRequestsNamingTheField) {
  const ModelShape& s = rt_->shape();
  ASSERT_TRUE(rt_->CreateSequence(7).ok());
  std::vector<Half> q(std::size_t(s.num_q_heads) * s.head_dim), k(s.kv_token_elems()),
      v(s.kv_token_elems());
  NormalRng rng(3);
  FillNormal(q, rng);
  FillNormal(k, rng);
  FillNormal(v, rng);
  DecodeRequest req;
  req.sequence_id = 7;
  req.q = std::span<const Half>(q).first(q.size() - 1);
  req.k = k;
  req.v = v;
  auto bad_q = rt_->Submit(req);
  ASSERT_FALSE(bad_q.ok());
  EXPECT_EQ(bad_q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_q.status().message().find("q"), std::string::npos) << bad_q.status().ToString();

  req.q = q;
  req.layer = s.num_layers;
  auto bad_layer = rt_->Submit(req);
  ASSERT_FALSE(bad_layer.ok());
  EXPECT_NE(bad_layer.status().message().find("layer"), std::string::npos);

  req.layer = 0;
  req.sequence_id = 12345;
  auto unknown = rt_->Submit(req);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("12345"), std::string::npos);

  Status prefill = rt_->Prefill(7, 0, 2, k, v);  // k holds one token, not two
  EXPECT_EQ(prefill.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(prefill.message().find("num_tokens"), std::string::npos) << prefill.ToString();

  // Nothing was disturbed: the sequence is still empty and a good request still runs.
  EXPECT_EQ(*rt_->SequenceLength(7, 0), 0);
  req.sequence_id = 7;
  auto good = rt_->Submit(req);
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->result.get().status.ok());
  EXPECT_EQ(*rt_->SequenceLength(7, 0), 1);
}

TEST_P(RuntimeTest, EveryCallbackRunsExactlyOnceThenShutdownRejects) {
  const ModelShape& s = rt_->shape();
  const int kSequences = 16, kPerSequence = 20;
  for (int seq = 0; seq < kSequences; ++seq) ASSERT_TRUE(rt_->CreateSequence(seq).ok());
  std::vector<Half> q(std::size_t(s.num_q_heads) * s.head_dim), kv(s.kv_token_elems());
  NormalRng rng(5);
  FillNormal(q, rng);
  FillNormal(kv, rng);
  std::vector<std::atomic<int>> calls(kSequences * kPerSequence);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int seq = t; seq < kSequences; seq += 4) {
        for (int i = 0; i < kPerSequence; ++i) {
          DecodeRequest req;
          req.sequence_id = seq;
          req.q = q;
          req.k = kv;
          req.v = kv;
          const int id = seq * kPerSequence + i;
          auto h = rt_->Submit(req, [&, id](DecodeResult r) {
            calls[id]++;
            if (r.status.ok()) ok++;
          });
          ASSERT_TRUE(h.ok()) << h.status().ToString();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  rt_->Drain();
  for (auto& c : calls) EXPECT_EQ(c.load(), 1);
  EXPECT_EQ(ok.load(), kSequences * kPerSequence);
  EXPECT_EQ(*rt_->SequenceLength(3, 0), kPerSequence);

  rt_->Shutdown();
  DecodeRequest req;
  req.q = q;
  req.k = kv;
  req.v = kv;
  auto after = rt_->Submit(req);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(rt_->MetricsText().find("attnrt_scheduler_requests_completed_total 320"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Devices, RuntimeTest, testing::kBothDevices, testing::DeviceName);

// stage_in_mapped_memory: requests copied once into mapped pinned memory at Submit, gathered and
// scattered there by the step. A backlog of 640 requests in flight (past the staged working set,
// so later ones are staged on the heap and batches mix both kinds) and each output checked
// against the reference of exactly the tokens before it.
TEST(RuntimeStagedTest, StagedInMappedMemoryMatchesDenseReference) {
  if (!CudaDeviceAvailable()) {
    GTEST_SKIP() << "no CUDA device (" << NoCudaDeviceReason() << "): needs a GPU";
  }
  RuntimeOptions o = testing::SmallRuntimeOptions(DeviceKind::kCuda);
  o.stage_in_mapped_memory = true;
  auto created = Runtime::Create(o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Runtime& rt = **created;
  const ModelShape& s = rt.shape();
  const int kSequences = 8, kPrompt = 21, kRequests = 640;
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  std::vector<std::vector<DenseKv>> mirror(kSequences, std::vector<DenseKv>(s.num_layers));
  NormalRng rng(12);
  for (int seq = 0; seq < kSequences; ++seq) {
    ASSERT_TRUE(rt.CreateSequence(seq).ok());
    for (int layer = 0; layer < s.num_layers; ++layer) {
      auto k = Normal(rng, kv * kPrompt), v = Normal(rng, kv * kPrompt);
      ASSERT_TRUE(rt.Prefill(seq, layer, kPrompt, k, v).ok());
      mirror[seq][layer].Append(k, v);
    }
  }
  std::vector<ResultFuture> results;
  std::vector<std::vector<double>> expected;
  results.reserve(kRequests);
  expected.reserve(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    const int seq = i % kSequences, layer = (i / kSequences) % s.num_layers;
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    auto sub = rt.Submit(testing::MakeDecodeRequest(seq, layer, q, k, v));
    ASSERT_TRUE(sub.ok()) << "request " << i << ": " << sub.status().ToString();
    mirror[seq][layer].Append(k, v);
    expected.push_back(testing::DenseDecode(s, mirror[seq][layer], q));
    results.push_back(std::move(sub->result));
  }
  for (int i = 0; i < kRequests; ++i) {
    DecodeResult r = results[i].get();
    ASSERT_TRUE(r.status.ok()) << "request " << i << ": " << r.status.ToString();
    ASSERT_EQ(r.output.size(), qn);
    auto err = testing::CompareToReference(r.output, expected[i]);
    EXPECT_LE(err.max_abs, 2e-3) << "request " << i;
    EXPECT_LE(err.rel_l2, 1e-3) << "request " << i;
  }
}

TEST(RuntimeCreateTest, RejectsBadOptionsNamingTheField) {
  RuntimeOptions o;
  o.device = DeviceKind::kCpu;
  o.shape.head_dim = 100;
  auto r = Runtime::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("head_dim = 100"), std::string::npos);
  o.shape.head_dim = 128;
  o.max_batch_size = 0;
  r = Runtime::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_batch_size"), std::string::npos) << r.status().ToString();
  o.max_batch_size = 8;
  o.decode_path = "split_kvv";
  r = Runtime::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("decode_path = 'split_kvv'"), std::string::npos)
      << r.status().ToString();
  o.decode_path = "gemm";
  EXPECT_TRUE(Runtime::Create(o).ok());
  o.decode_path = "";
  o.kv_cache_fraction = 1.5;
  r = Runtime::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_cache_fraction"), std::string::npos);
  o.kv_cache_fraction = RuntimeOptions{}.kv_cache_fraction;
  o.mapped_staging_bytes = -2;
  r = Runtime::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mapped_staging_bytes -2"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace attnrt
