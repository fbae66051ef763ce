// The public Runtime end to end: sequences, prefill, decode requests from several threads,
// outputs checked against a dense FP64 reference; bad input rejected with a Status naming the
// field. Runs on the CPU executor everywhere and on the CUDA executor where a GPU is present.
#include <gtest/gtest.h>

#include <atomic>
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

  std::unique_ptr<Runtime> rt_;
};

TEST_P(RuntimeTest, DecodesFromManyThreadsMatchDenseReference) {
  const ModelShape& s = rt_->shape();
  const int kSequences = 8, kSteps = 6, kThreads = 4, kPrompt = 37;
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  std::vector<std::vector<DenseKv>> mirror(kSequences, std::vector<DenseKv>(s.num_layers));
  NormalRng rng(11);
  for (int seq = 0; seq < kSequences; ++seq) {
    ASSERT_TRUE(rt_->CreateSequence(seq).ok());
    for (int layer = 0; layer < s.num_layers; ++layer) {
      auto k = Normal(rng, kv * kPrompt), v = Normal(rng, kv * kPrompt);
      ASSERT_TRUE(rt_->Prefill(seq, layer, kPrompt, k, v).ok());
      mirror[seq][layer].Append(k, v);
    }
  }
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      NormalRng trng(100 + t);
      for (int step = 0; step < kSteps; ++step) {
        for (int layer = 0; layer < s.num_layers; ++layer) {
          for (int seq = t; seq < kSequences; seq += kThreads) {
            auto q = Normal(trng, qn), k = Normal(trng, kv), v = Normal(trng, kv);
            DecodeRequest req = testing::MakeDecodeRequest(seq, layer, q, k, v);
            auto sub = rt_->Submit(req);
            ASSERT_TRUE(sub.ok()) << sub.status().ToString();
            mirror[seq][layer].Append(k, v);
            DecodeResult r = sub->result.get();
            ASSERT_TRUE(r.status.ok()) << r.status.ToString();
            ASSERT_EQ(r.output.size(), qn);
            auto err = testing::CompareToReference(
                r.output, testing::DenseDecode(s, mirror[seq][layer], q));
            EXPECT_LE(err.max_abs, 2e-3) << "seq " << seq << " layer " << layer << " step " << step;
            EXPECT_LE(err.rel_l2, 1e-3) << "seq " << seq << " layer " << layer << " step " << step;
            ++checked;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(checked.load(), kSequences * kSteps * s.num_layers);
  for (int seq = 0; seq < kSequences; ++seq) {
    auto len = rt_->SequenceLength(seq, 1);
    ASSERT_TRUE(len.ok());
    EXPECT_EQ(*len, kPrompt + kSteps);
  }
}

// Decode: a lone caller's steps run on its own thread (all of them, with nothing else queued or
// running), into a poisoned caller-given `out` and into DecodeResult; then callers of Decode
// beside callers of Submit, each request's output against the dense reference.
TEST_P(RuntimeTest, DecodeMatchesDenseReferenceAloneAndBesideSubmits) {
  const ModelShape& s = rt_->shape();
  const std::size_t kv = s.kv_token_elems(), qn = std::size_t(s.num_q_heads) * s.head_dim;
  const int kPrompt = 29, kAlone = 12, kSequences = 8, kSteps = 5, kThreads = 4;
  std::vector<std::vector<DenseKv>> mirror(kSequences, std::vector<DenseKv>(s.num_layers));
  NormalRng rng(23);
  for (int seq = 0; seq < kSequences; ++seq) {
    ASSERT_TRUE(rt_->CreateSequence(seq).ok());
    for (int layer = 0; layer < s.num_layers; ++layer) {
      auto k = Normal(rng, kv * kPrompt), v = Normal(rng, kv * kPrompt);
      ASSERT_TRUE(rt_->Prefill(seq, layer, kPrompt, k, v).ok());
      mirror[seq][layer].Append(k, v);
    }
  }
  auto check = [&](const std::vector<Half>& out, int seq, int layer, const std::vector<Half>& q,
                   const std::string& where) {
    auto err = testing::CompareToReference(out, testing::DenseDecode(s, mirror[seq][layer], q));
    EXPECT_LE(err.max_abs, 2e-3) << where;
    EXPECT_LE(err.rel_l2, 1e-3) << where;
  };
  for (int step = 0; step < kAlone; ++step) {
    auto q = Normal(rng, qn), k = Normal(rng, kv), v = Normal(rng, kv);
    DecodeRequest req = testing::MakeDecodeRequest(0, 1, q, k, v);
    std::vector<Half> out(qn, Half{0x7e00});  // NaN: every element must be written
    if (step % 2 == 0) req.out = out.data();
    DecodeResult r = rt_->Decode(req);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    mirror[0][1].Append(k, v);
    if (step % 2 != 0) {
      ASSERT_EQ(r.output.size(), qn);
      out = r.output;
    } else {
      EXPECT_TRUE(r.output.empty());
    }
    check(out, 0, 1, q, "alone, step " + std::to_string(step));
  }
  const std::string metrics = rt_->MetricsText();
  EXPECT_NE(metrics.find("attnrt_scheduler_decoded_inline_total " + std::to_string(kAlone)),
            std::string::npos)
      << metrics;

  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      NormalRng trng(300 + t);
      for (int step = 0; step < kSteps; ++step) {
        for (int layer = 0; layer < s.num_layers; ++layer) {
          for (int seq = t; seq < kSequences; seq += kThreads) {
            auto q = Normal(trng, qn), k = Normal(trng, kv), v = Normal(trng, kv);
            DecodeRequest req = testing::MakeDecodeRequest(seq, layer, q, k, v);
            DecodeResult r;
            if (t % 2 == 0) {
              r = rt_->Decode(req);
            } else {
              auto sub = rt_->Submit(req);
              ASSERT_TRUE(sub.ok()) << sub.status().ToString();
              r = sub->result.get();
            }
            ASSERT_TRUE(r.status.ok()) << r.status.ToString();
            mirror[seq][layer].Append(k, v);
            check(r.output, seq, layer, q,
                  "thread " + std::to_string(t) + " seq " + std::to_string(seq) + " layer " +
                      std::to_string(layer) + " step " + std::to_string(step));
            ++checked;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(checked.load(), kSequences * kSteps * s.num_layers);
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
}

}  // namespace
}  // namespace attnrt
