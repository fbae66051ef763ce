// GEMM-path planning on the host (no GPU needed): Tpad buckets, plan validation and workspace
// layout, host length checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <attnrt/config.h>
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

TEST(GemmPathPlanTest, HostLengthCheckNamesTheSlot) {
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

}  // namespace
}  // namespace attnrt::kernels
