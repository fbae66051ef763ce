// The CUDA executor (runtime/cuda_executor.cc) on the decode table's GEMM path at long contexts
// (issue 12): batches whose whole-batch GEMM workspace is past gemm_max_workspace_bytes run in
// context chunks and batch slices (kernels/gemm_path.h) inside the captured graphs and match the
// dense FP64 shadow. Every test skips (with the reason) where no CUDA device is present.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/gemm_path.h"
#include "runtime/cuda_executor.h"
#include "tests/runtime/executor_harness.h"

namespace attnrt::runtime {
namespace {

using attnrt::testing::FillNormalParallel;
using testing::MakeRequest;
using testing::MatchesExpected;
using testing::NormalRng;
using testing::OwnedRequest;
using testing::RandomWorkload;
using testing::ShadowCache;
using testing::SubmitAndWait;

constexpr int kFillThreads = 16;  // K/V of a long prompt: hundreds of millions of values

// The issue's model: H32, Hkv32, D128 (MHA), block 16, one layer.
ModelShape IssueShape(int max_context) {
  ModelShape s;
  s.num_layers = 1;
  s.num_q_heads = 32;
  s.num_kv_heads = 32;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = max_context;
  return s;
}

CudaExecutorOptions GemmOptions(const ModelShape& shape, std::int32_t num_blocks) {
  CudaExecutorOptions o;
  o.shape = shape;
  o.num_blocks = num_blocks;
  o.buckets = {1, 8, 16};
  o.paths = {std::string(kGemmPathName)};
  return o;  // gemm_max_workspace_bytes: the default 1 GiB
}

class CudaExecutorGemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the CUDA executor needs a GPU";
  }

  // Creates sequence `id` with a random prompt of `tokens` tokens on layer 0, in the executor
  // and the shadow.
  static void AddPrompt(CudaExecutor& ex, ShadowCache& shadow, SequenceId id, int tokens,
                        std::uint64_t seed) {
    ASSERT_TRUE(ex.CreateSequence(id).ok());
    shadow.Create(id);
    std::vector<Half> k(static_cast<std::size_t>(tokens) * ex.shape().kv_token_elems());
    std::vector<Half> v(k.size());
    FillNormalParallel(k, seed * 2, kFillThreads);
    FillNormalParallel(v, seed * 2 + 1, kFillThreads);
    const Status s = ex.Prefill(id, 0, tokens, k.data(), v.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    shadow.Append(id, 0, k, v);
  }

  // One decode step for `ids` (layer 0), every request checked against the shadow.
  static void StepAndExpectAllMatch(CudaExecutor& ex, ShadowCache& shadow,
                                    const std::vector<SequenceId>& ids, NormalRng& rng,
                                    const std::string& where) {
    std::vector<OwnedRequest> reqs;
    for (SequenceId id : ids) {
      reqs.push_back(MakeRequest(ex.shape(), id, 0, rng));
      shadow.Expect(reqs.back());
    }
    const testing::SyncResult r = SubmitAndWait(ex, RandomWorkload::ToBatch(reqs));
    ASSERT_TRUE(r.submit.ok()) << where << ": " << r.submit.ToString();
    ASSERT_EQ(r.statuses.size(), reqs.size()) << where;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << where << " request " << i << ": "
                                      << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << where << " request " << i;
    }
  }
};

// Every (bucket, Tpad) of the GEMM path was captured: none was over the budget.
void ExpectEveryGemmGraphCaptured(const CudaExecutor& ex, std::size_t budget) {
  const CudaExecutorMemory& m = ex.memory();
  EXPECT_EQ(m.graphs.size(),
            ex.buckets().size() * kernels::GemmPathTpadBuckets(ex.shape()).size());
  for (const BucketGraphReport& g : m.graphs) {
    EXPECT_LE(g.workspace_bytes, budget) << g.path << " at bucket " << g.bucket;
  }
  EXPECT_LE(m.workspace_bytes, budget);
}

// Issue 12's first batch: 7 sequences at T=12345 on bucket 8 completed every request with
// ResourceExhausted (path gemm/t12416 needed 1,680,148,736 bytes).
TEST_F(CudaExecutorGemmGpuTest, GemmPathLongContextIssueSevenSequencesAtT12345Bucket8) {
  const ModelShape shape = IssueShape(12416);
  auto created = CreateCudaExecutor(GemmOptions(shape, 7 * (12416 / 16) + 64));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  CudaExecutor& ex = **created;
  ExpectEveryGemmGraphCaptured(ex, kernels::kGemmPathDefaultMaxWorkspaceBytes);
  ShadowCache shadow(shape);
  std::vector<SequenceId> ids;
  for (SequenceId id = 1; id <= 7; ++id) {
    AddPrompt(ex, shadow, id, 12344, 100 + id);
    ids.push_back(id);
  }
  NormalRng rng(12345);
  StepAndExpectAllMatch(ex, shadow, ids, rng, "7 x T=12345 (bucket 8)");
  StepAndExpectAllMatch(ex, shadow, ids, rng, "7 x T=12346 (bucket 8)");
  EXPECT_EQ(ex.stats().failed_batches, 0);
}

// The issue's second: T=20000 on bucket 16 (max_context 32768: Tpad 32768), then one batch of
// mixed lengths (9 long, 3 short) and a batch split into pieces past the largest bucket.
TEST_F(CudaExecutorGemmGpuTest, GemmPathLongContextIssueSequencesAtT20000Bucket16) {
  const ModelShape shape = IssueShape(32768);
  auto created = CreateCudaExecutor(GemmOptions(shape, 9 * (20016 / 16) + 12 * 4 + 64));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  CudaExecutor& ex = **created;
  ExpectEveryGemmGraphCaptured(ex, kernels::kGemmPathDefaultMaxWorkspaceBytes);
  ShadowCache shadow(shape);
  std::vector<SequenceId> long_ids, all_ids;
  for (SequenceId id = 1; id <= 9; ++id) {
    AddPrompt(ex, shadow, id, 19999, 200 + id);
    long_ids.push_back(id);
  }
  NormalRng rng(20000);
  StepAndExpectAllMatch(ex, shadow, long_ids, rng, "9 x T=20000 (bucket 16)");
  all_ids = long_ids;
  for (SequenceId id = 10; id <= 21; ++id) {
    AddPrompt(ex, shadow, id, static_cast<int>(rng.NextInt(1, 40)), 300 + id);
    all_ids.push_back(id);
  }
  std::vector<SequenceId> mixed(all_ids.begin(), all_ids.begin() + 12);
  StepAndExpectAllMatch(ex, shadow, mixed, rng, "9 x T=20001 + 3 short (bucket 16)");
  StepAndExpectAllMatch(ex, shadow, all_ids, rng, "21 requests: pieces of 16 and 8");
  EXPECT_EQ(ex.stats().failed_batches, 0);
}

// A small budget (48 MiB, of which 32 MiB are cuBLAS's): every (bucket, Tpad) is still captured,
// in chunks and slices, and every request of a large mixed batch completes. Needs the executor
// to plan the GEMM path with DecodePlanRequest::max_workspace_bytes =
// options.gemm_max_workspace_bytes.
TEST_F(CudaExecutorGemmGpuTest, GemmPathLongContextSmallBudgetRunsEveryPiece) {
  CudaExecutorOptions o;
  o.shape.num_layers = 2;
  o.shape.num_q_heads = 8;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 128;
  o.shape.block_size = 16;
  o.shape.max_context = 4096;
  o.num_blocks = 24000;
  o.paths = {std::string(kGemmPathName)};
  o.gemm_max_workspace_bytes = std::size_t{48} << 20;
  auto created = CreateCudaExecutor(o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  CudaExecutor& ex = **created;
  ExpectEveryGemmGraphCaptured(ex, o.gemm_max_workspace_bytes);
  RandomWorkload w(ex, 4848);
  w.AddSequences(40, 4000);
  for (int step = 0; step < 3; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(step == 0 ? 2 : 70);
    const testing::SyncResult r = SubmitAndWait(ex, RandomWorkload::ToBatch(reqs));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << "step " << step << " request " << i << ": "
                                      << r.statuses[i].ToString();
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " request " << i;
    }
  }
}

}  // namespace
}  // namespace attnrt::runtime
