// GEMM-path planning on the host (no GPU needed): Tpad buckets, plan validation and workspace
// layout, host length checks, and the cut into batch slices and context chunks that keeps every
// (bucket, Tpad) within the workspace budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include "kernels/decode.h"
#include "kernels/gemm_path.h"

namespace attnrt::kernels {
namespace {

ModelShape Llama8b(int max_context) {
  ModelShape s;
  s.num_q_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = max_context;
  return s;
}

TEST(GemmPathPlanTest, TpadBucketsArePowersOfTwoThenMaxContext) {
  EXPECT_EQ(GemmPathTpadBuckets(Llama8b(4096)),
            (std::vector<int>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(GemmPathTpadBuckets(Llama8b(5000)),
            (std::vector<int>{64, 128, 256, 512, 1024, 2048, 4096, 5056}));
  EXPECT_EQ(GemmPathTpadBuckets(Llama8b(10)), (std::vector<int>{64}));
}

TEST(GemmPathPlanTest, ChooseTpadPicksTheSmallestBucketThatHoldsTheLongest) {
  const ModelShape s = Llama8b(5000);
  EXPECT_EQ(*ChooseGemmPathTpad(s, 1), 64);
  EXPECT_EQ(*ChooseGemmPathTpad(s, 64), 64);
  EXPECT_EQ(*ChooseGemmPathTpad(s, 65), 128);
  EXPECT_EQ(*ChooseGemmPathTpad(s, 4097), 5056);
  EXPECT_EQ(*ChooseGemmPathTpad(s, 5000), 5056);
  const auto too_long = ChooseGemmPathTpad(s, 5001);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_kv_length = 5001"), std::string::npos);
  EXPECT_FALSE(ChooseGemmPathTpad(s, 0).ok());
}

TEST(GemmPathPlanTest, RejectsBadArgumentsNamingTheField) {
  const ModelShape s = Llama8b(4096);
  auto bad_tpad = PlanGemmPath(s, 8, 100);
  ASSERT_FALSE(bad_tpad.ok());
  EXPECT_EQ(bad_tpad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_tpad.status().message().find("t_pad = 100"), std::string::npos);
  EXPECT_FALSE(PlanGemmPath(s, 8, 8192).ok());  // past max_context
  auto bad_capacity = PlanGemmPath(s, 0, 64);
  ASSERT_FALSE(bad_capacity.ok());
  EXPECT_NE(bad_capacity.status().message().find("capacity = 0"), std::string::npos);
  ModelShape bad_shape = s;
  bad_shape.head_dim = 96;
  auto bad = PlanGemmPath(bad_shape, 8, 64);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("head_dim"), std::string::npos);
}

TEST(GemmPathPlanTest, WorkspacePiecesAreAlignedDisjointAndSized) {
  const ModelShape s = Llama8b(4096);
  auto plan = PlanGemmPath(s, 32, 4096);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->batch_count(), 32 * 8);
  const std::size_t kv = std::size_t{32} * 8 * 4096 * 128 * 2;  // one of K, V
  const std::size_t rows = 32 * 32;
  EXPECT_EQ(plan->kv_workspace_bytes(), 2 * kv);
  std::vector<std::pair<std::size_t, std::size_t>> pieces = {
      {plan->cublas_offset, kGemmPathCublasWorkspaceBytes},
      {plan->k_offset, kv},
      {plan->v_offset, kv},
      {plan->scores_offset, rows * 4096 * 4},
      {plan->probs_offset, rows * 4096 * 2},
      {plan->row_max_offset, rows * 4},
      {plan->row_sum_offset, rows * 4},
      {plan->acc_offset, rows * 128 * 4},
      {plan->overflow_offset, 4}};
  std::sort(pieces.begin(), pieces.end());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].first % 256, 0u) << i;
    const std::size_t end = pieces[i].first + pieces[i].second;
    EXPECT_LE(end, plan->workspace_bytes) << i;
    if (i + 1 < pieces.size()) {
      EXPECT_LE(end, pieces[i + 1].first) << i;
    }
  }
}

TEST(GemmPathPlanTest, HostLengthCheckNamesTheRow) {
  auto plan = PlanGemmPath(Llama8b(4096), 3, 256);
  ASSERT_TRUE(plan.ok());
  const std::vector<std::int32_t> ok = {0, 256, 1};
  EXPECT_TRUE(CheckGemmPathLengths(*plan, ok).ok());
  const std::vector<std::int32_t> too_long = {0, 257, 1};
  const Status st = CheckGemmPathLengths(*plan, too_long);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("kv_lengths[1] = 257"), std::string::npos) << st.message();
  const std::vector<std::int32_t> wrong_size = {1, 2};
  EXPECT_NE(CheckGemmPathLengths(*plan, wrong_size).message().find("capacity = 3"),
            std::string::npos);
}

// ---- pieces: batch slices by context chunks within the budget -------------------------------

ModelShape Mha(int head_dim, int group, int max_context) {
  ModelShape s;
  s.num_q_heads = 32;
  s.num_kv_heads = 32 / group;
  s.head_dim = head_dim;
  s.block_size = 16;
  s.max_context = max_context;
  return s;
}

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The cut covers the batch and the padded context exactly once, with equal chunks (none empty)
// and equal slices (the last one not empty), within the budget, the gather grid and alignment.
void ExpectPiecesCover(const GemmPathPlan& p, std::size_t budget) {
  SCOPED_TRACE("capacity " + std::to_string(p.capacity) + " Tpad " + std::to_string(p.t_pad) +
               " D " + std::to_string(p.shape.head_dim) + " Hkv " +
               std::to_string(p.shape.num_kv_heads) + " budget " + std::to_string(budget) +
               ": " + std::to_string(p.num_slices) + " slices of " +
               std::to_string(p.slice_rows) + ", " + std::to_string(p.num_chunks) +
               " chunks of " + std::to_string(p.chunk_tokens));
  EXPECT_LE(p.workspace_bytes, budget);
  EXPECT_GE(p.slice_rows, 1);
  EXPECT_LE(p.slice_rows, p.capacity);
  EXPECT_EQ(p.num_slices, (p.capacity + p.slice_rows - 1) / p.slice_rows);
  EXPECT_GE(p.rows_in_slice(p.num_slices - 1), 1);
  EXPECT_LE(static_cast<long long>(p.slice_rows) * p.shape.num_kv_heads, 65535);
  EXPECT_EQ(p.chunk_tokens % kGemmPathTpadQuantum, 0);
  EXPECT_GE(p.chunk_tokens, kGemmPathTpadQuantum);
  EXPECT_LE(p.chunk_tokens, p.t_pad);
  EXPECT_GE(static_cast<long long>(p.num_chunks) * p.chunk_tokens, p.t_pad);
  EXPECT_LT(static_cast<long long>(p.num_chunks - 1) * p.chunk_tokens, p.t_pad) << "empty chunk";
  EXPECT_EQ(p.pieces(), p.num_slices * p.num_chunks);
  if (p.num_chunks == 1) {
    EXPECT_EQ(p.chunk_tokens, p.t_pad);
  }
  // Chunks only once the whole batch no longer fits at Tpad; slices only once the whole batch no
  // longer fits at one quantum (or its gather grid would pass 65535).
  const bool grid_fits = static_cast<long long>(p.capacity) * p.shape.num_kv_heads <= 65535;
  if (p.num_chunks > 1 || (p.num_slices > 1 && grid_fits)) {
    EXPECT_GT(PlanGemmPath(p.shape, p.capacity, p.t_pad, SIZE_MAX)->workspace_bytes, budget);
  }
  if (p.num_slices > 1 && grid_fits) {
    const auto one_quantum = PlanGemmPath(p.shape, p.capacity, kGemmPathTpadQuantum, SIZE_MAX);
    EXPECT_GT(one_quantum->workspace_bytes, budget);
  }
}

// Issue 12: 7 sequences at T=12345 (H32, D128, bucket 8) needed 1,680,148,736 bytes at Tpad
// 12416, over the executor's default 1 GiB; the same at T=20000, bucket 16.
TEST(GemmPathPlanTest, LongContextIssueShapesFitTheDefaultBudgetInChunks) {
  struct Case {
    int capacity, longest, max_context;
  };
  for (const Case c : {Case{8, 12345, 12416}, Case{8, 12345, 32768}, Case{16, 20000, 20000},
                       Case{16, 20000, 32768}}) {
    const ModelShape s = Mha(128, 1, c.max_context);
    const int t_pad = *ChooseGemmPathTpad(s, c.longest);
    const auto whole = PlanGemmPath(s, c.capacity, t_pad, SIZE_MAX);
    ASSERT_TRUE(whole.ok());
    EXPECT_GT(whole->workspace_bytes, kGemmPathDefaultMaxWorkspaceBytes);
    if (c.max_context == 12416) {
      EXPECT_EQ(whole->workspace_bytes, 1680148736u) << "the size the issue reports";
    }
    const auto plan = PlanGemmPath(s, c.capacity, t_pad);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_GT(plan->num_chunks, 1);
    EXPECT_EQ(plan->num_slices, 1);
    ExpectPiecesCover(*plan, kGemmPathDefaultMaxWorkspaceBytes);
  }
  // 8 x 12416 in two equal chunks of 6208.
  const auto p = PlanGemmPath(Mha(128, 1, 12416), 8, 12416);
  EXPECT_EQ(p->num_chunks, 2);
  EXPECT_EQ(p->chunk_tokens, 6208);
}

// Every (bucket, Tpad) of max_context 32768, every head dim and group size, three budgets.
TEST(GemmPathPlanTest, LongContextEveryBucketAndTpadFitsTheBudget) {
  for (int d : {64, 128, 256}) {
    for (int g : {1, 2, 4, 8}) {
      const ModelShape s = Mha(d, g, 32768);
      for (std::size_t budget : {std::size_t{1} << 30, 256 * kMiB, 40 * kMiB}) {
        for (int capacity : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
          for (int t_pad : GemmPathTpadBuckets(s)) {
            const auto plan = PlanGemmPath(s, capacity, t_pad, budget);
            ASSERT_TRUE(plan.ok()) << plan.status().ToString();
            ExpectPiecesCover(*plan, budget);
            if (HasFatalFailure() || HasNonfatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(GemmPathPlanTest, SmallBudgetSlicesTheBatchIntoEqualSlices) {
  const ModelShape s = Mha(256, 1, 32768);
  const auto plan = PlanGemmPath(s, 256, 32768, 40 * kMiB);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_GT(plan->num_slices, 1);
  EXPECT_GT(plan->num_chunks, 1);
  EXPECT_LE(plan->slice_rows * plan->num_slices - plan->capacity, plan->num_slices - 1)
      << "slices differ by at most one row's worth of padding each";
  ExpectPiecesCover(*plan, 40 * kMiB);
}

// Past 65535 / Hkv rows the gather grid would overflow: the batch is sliced instead of refused.
TEST(GemmPathPlanTest, CapacityPastTheGatherGridIsSliced) {
  const ModelShape s = Mha(64, 1, 64);
  const auto plan = PlanGemmPath(s, 4096, 64, SIZE_MAX);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_slices, 3);  // 2047 rows fit the grid: 3 slices of 1366
  EXPECT_EQ(plan->slice_rows, 1366);
  ExpectPiecesCover(*plan, SIZE_MAX);
}

TEST(GemmPathPlanTest, BudgetBelowOnePieceIsResourceExhaustedNamingTheSizes) {
  const auto plan = PlanGemmPath(Llama8b(4096), 8, 4096, kGemmPathCublasWorkspaceBytes);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("max_workspace_bytes = 33554432"), std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find("one batch row by 64 tokens needs"), std::string::npos)
      << plan.status().message();
}

TEST(GemmPathPlanTest, ChunkedWorkspacePiecesAreAlignedDisjointAndSized) {
  const ModelShape s = Llama8b(32768);
  auto plan = PlanGemmPath(s, 32, 32768, 256 * kMiB);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GT(plan->num_chunks, 1);
  ASSERT_EQ(plan->num_slices, 1);
  const std::size_t c = plan->chunk_tokens;
  const std::size_t kv = std::size_t{32} * 8 * c * 128 * 2;  // one of K, V
  const std::size_t rows = 32 * 32;
  EXPECT_EQ(plan->kv_workspace_bytes(), 2 * std::size_t{32} * 8 * plan->num_chunks * c * 128 * 2);
  std::vector<std::pair<std::size_t, std::size_t>> pieces = {
      {plan->cublas_offset, kGemmPathCublasWorkspaceBytes},
      {plan->k_offset, kv},
      {plan->v_offset, kv},
      {plan->scores_offset, rows * c * 4},
      {plan->probs_offset, rows * c * 2},
      {plan->row_max_offset, rows * 4},
      {plan->row_sum_offset, rows * 4},
      {plan->acc_offset, rows * 128 * 4},
      {plan->chunk_max_offset, rows * 4},
      {plan->chunk_sum_offset, rows * 4},
      {plan->chunk_acc_offset, rows * 128 * 4},
      {plan->overflow_offset, 4}};
  std::sort(pieces.begin(), pieces.end());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].first % 256, 0u) << i;
    const std::size_t end = pieces[i].first + pieces[i].second;
    EXPECT_LE(end, plan->workspace_bytes) << i;
    if (i + 1 < pieces.size()) {
      EXPECT_LE(end, pieces[i + 1].first) << i;
    }
  }
  EXPECT_LE(plan->workspace_bytes, 256 * kMiB);
}

// The table's entry plans within request.max_workspace_bytes (0: the default budget).
TEST(GemmPathPlanTest, TablePlanKeepsToTheRequestedBudget) {
  const ModelShape s = Mha(128, 1, 32768);
  const DecodeVariant* gemm = FindDecodeVariant(kGemmVariantName).value();
  DecodePlanRequest request{s, 16, 20000, DecodeStep::kAppendAndDecode, {-1, 132}};
  auto plan = gemm->plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->max_kv_length, 32768);
  EXPECT_LE(plan->workspace_bytes, kGemmPathDefaultMaxWorkspaceBytes);
  EXPECT_EQ(plan->workspace_bytes, plan->gemm.workspace_bytes);
  EXPECT_GT(plan->gemm.num_chunks, 1);
  request.max_workspace_bytes = 64 * kMiB;
  plan = gemm->plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_LE(plan->workspace_bytes, 64 * kMiB);
  request.max_workspace_bytes = 1 * kMiB;
  plan = gemm->plan(request);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("request.max_workspace_bytes"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace attnrt::kernels
