// The cuBLAS GEMM path (kernels/gemm_path.h) and its baselines against the CPU reference: fresh
// N(0,1) inputs, poisoned outputs, GQA groups 1/2/4/8, head dims 64/128/256, mixed lengths with
// length 1 and padded slots, graph capture then replay with longer lengths, overflow handling.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/gemm_baselines.h"
#include "kernels/gemm_path.h"
#include "tests/support/gemm_device_batch.h"
#include "tests/support/paged_batch.h"

namespace attnrt::kernels {
namespace {

using testing::DeviceBatch;
using testing::DeviceBytes;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::PagedBatchOptions;

constexpr double kMaxAbs = 2e-3;
constexpr double kRelL2 = 1e-3;
constexpr double kLseTol = 1e-3;

class GemmPathGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the GEMM path needs a GPU";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  static ModelShape Shape(int head_dim, int group, int kv_heads, int block_size, int max_context) {
    ModelShape s;
    s.num_layers = 2;
    s.num_kv_heads = kv_heads;
    s.num_q_heads = kv_heads * group;
    s.head_dim = head_dim;
    s.block_size = block_size;
    s.max_context = max_context;
    return s;
  }

  // Host batch with the new token already appended (the GEMM path runs after the append).
  static PagedBatch MakeAppended(const ModelShape& shape, const std::vector<int>& lengths,
                                 int capacity, std::uint64_t seed, float q_scale = 1.0f) {
    PagedBatchOptions o;
    o.seed = seed;
    o.capacity = capacity;
    o.q_scale = q_scale;
    PagedBatch b = MakePagedBatch(shape, lengths, o);
    ReferenceAppendKv(b.view(), b.pools());
    return b;
  }

  // Expects the device output of `dev` to match the FP64 reference of `host` (same lengths).
  static void ExpectMatchesReference(PagedBatch& host, const DeviceBatch& dev,
                                     const std::string& what) {
    std::vector<float> ref_f32(host.out.size(), NAN);
    std::vector<Half> ref_out(host.out.size());
    std::vector<float> ref_lse(host.lse.size(), NAN);
    DecodeBatchView ref_view = host.view();
    ref_view.out = ref_out.data();
    ref_view.lse = ref_lse.data();
    ReferenceDecode(ref_view, host.pools(), ReferencePrecision::kFloat64, ref_f32.data());

    const std::vector<Half> got = dev.DownloadOut();
    const std::vector<float> got_lse = dev.DownloadLse();
    const testing::OutputError e = testing::CompareOutput(host, got, ref_f32);
    EXPECT_EQ(e.non_finite, 0) << what;
    EXPECT_LE(e.max_abs, kMaxAbs) << what;
    EXPECT_LE(e.rel_l2, kRelL2) << what;
    EXPECT_LE(testing::MaxLseError(host, got_lse, ref_lse), kLseTol) << what;
    EXPECT_TRUE(testing::PaddedRowsUntouched(host, got, got_lse)) << what;
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

struct SweepCase {
  int head_dim;
  int group;
};

class GemmPathSweepTest : public GemmPathGpuTest,
                          public ::testing::WithParamInterface<SweepCase> {};

TEST_P(GemmPathSweepTest, MatchesReferenceWithMixedLengthsAndPadding) {
  const SweepCase c = GetParam();
  const ModelShape shape = Shape(c.head_dim, c.group, /*kv_heads=*/2, /*block_size=*/16, 512);
  // Length 1, block-boundary lengths, a long one, and two padded slots (0 and capacity tail).
  const std::vector<int> lengths = {1, 37, 0, 200, 16, 129, 333};
  const int capacity = 9;
  PagedBatch host = MakeAppended(shape, lengths, capacity, 1000 + c.head_dim * 10 + c.group);
  DeviceBatch dev(host);
  auto tpad = ChooseGemmPathTpad(shape, 333);
  ASSERT_TRUE(tpad.ok()) << tpad.status().ToString();
  EXPECT_EQ(*tpad, 512);
  auto plan = PlanGemmPath(shape, capacity, *tpad);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());
  const Status st = RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(),
                                cublas_, stream_);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "D=" + std::to_string(c.head_dim) + " G=" + std::to_string(c.group));
  auto overflow = ReadGemmPathOverflowCount(*plan, ws.workspace(), stream_);
  ASSERT_TRUE(overflow.ok());
  EXPECT_EQ(*overflow, 0);
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimByGroup, GemmPathSweepTest,
    ::testing::Values(SweepCase{64, 1}, SweepCase{64, 2}, SweepCase{64, 4}, SweepCase{64, 8},
                      SweepCase{128, 1}, SweepCase{128, 2}, SweepCase{128, 4}, SweepCase{128, 8},
                      SweepCase{256, 1}, SweepCase{256, 2}, SweepCase{256, 4}, SweepCase{256, 8}),
    [](const ::testing::TestParamInfo<SweepCase>& info) {
      return "D" + std::to_string(info.param.head_dim) + "_G" + std::to_string(info.param.group);
    });

TEST_F(GemmPathGpuTest, BlockSizesAndPeakySoftmax) {
  for (int block_size : {8, 32, 64}) {
    const ModelShape shape = Shape(128, 4, 2, block_size, 300);
    const std::vector<int> lengths = {300, 1, 65, 0, 131};
    // q ~ 20 N(0,1): one score dominates, so FP16 weight rounding is exercised at the extremes.
    PagedBatch host = MakeAppended(shape, lengths, 5, 77 + block_size, /*q_scale=*/20.0f);
    DeviceBatch dev(host);
    auto plan = PlanGemmPath(shape, 5, *ChooseGemmPathTpad(shape, 300));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->t_pad, 320);  // max_context rounded up to 64
    DeviceBytes ws(plan->workspace_bytes);
    ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());
    ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                            stream_).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectMatchesReference(host, dev, "block_size=" + std::to_string(block_size));
  }
}

// The workspace is NOT prepared: stale contents (here 0xFF = FP16 NaN everywhere) must not leak
// into any live slot (V's pad rows are zeroed by the gather; K's pad scores are masked).
TEST_F(GemmPathGpuTest, UnpreparedNaNWorkspaceDoesNotLeak) {
  const ModelShape shape = Shape(64, 2, 2, 16, 256);
  PagedBatch host = MakeAppended(shape, {5, 100, 0, 256}, 4, 4242);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 4, 256);
  ASSERT_TRUE(plan.ok());
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_EQ(cudaMemset(ws.data(), 0xFF, ws.bytes()), cudaSuccess);
  ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                          stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "NaN-filled workspace");
}

// Captured once with short lengths, replayed with fresh q and longer lengths (within Tpad):
// everything that varies lives in device buffers, so no re-capture is needed.
TEST_F(GemmPathGpuTest, GraphCaptureThenReplayWithLongerLengths) {
  const ModelShape shape = Shape(128, 4, 4, 16, 1024);
  const std::vector<int> long_lengths = {700, 3, 1024, 0, 257, 64};
  const std::vector<int> short_lengths = {100, 1, 500, 0, 40, 64};
  PagedBatch host = MakeAppended(shape, long_lengths, 6, 99);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 6, 1024);
  ASSERT_TRUE(plan.ok());
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());

  // Short lengths first (prefixes of the appended history: all valid tokens).
  std::vector<std::int32_t> lens(short_lengths.begin(), short_lengths.end());
  testing::CopyToDevice<std::int32_t>(dev.kv_lengths, lens);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);

  // One eager run first (cuBLAS picks and loads its kernels), as the executor's warm-up does.
  ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                          stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  host.kv_lengths = lens;
  ExpectMatchesReference(host, dev, "eager run (short lengths)");
  dev.Poison();

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view,
                                      ws.workspace(), cublas_, stream_);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> exec_guard(exec, cudaGraphExecDestroy);
  std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> graph_guard(graph, cudaGraphDestroy);

  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "replay 1 (short lengths)");

  // Fresh q, longer lengths, poisoned outputs; same graph.
  testing::FillNormal(host.q, 12345);
  testing::CopyToDevice<Half>(dev.q, host.q);
  lens.assign(long_lengths.begin(), long_lengths.end());
  testing::CopyToDevice<std::int32_t>(dev.kv_lengths, lens);
  dev.Poison();
  host.kv_lengths = lens;
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "replay 2 (longer lengths, new q)");
}

// A live slot longer than the plan's Tpad: NaN out/lse for it alone, counted; others correct.
TEST_F(GemmPathGpuTest, LengthPastTpadIsNaNAndCountedOthersUnaffected) {
  const ModelShape shape = Shape(64, 2, 2, 16, 512);
  PagedBatch host = MakeAppended(shape, {40, 300, 0, 128}, 4, 555);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 4, 128);
  ASSERT_TRUE(plan.ok());
  const Status host_check = CheckGemmPathLengths(*plan, host.kv_lengths);
  EXPECT_EQ(host_check.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(host_check.message().find("kv_lengths[1] = 300"), std::string::npos)
      << host_check.message();

  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());
  ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                          stream_).ok());
  auto overflow = ReadGemmPathOverflowCount(*plan, ws.workspace(), stream_);
  ASSERT_TRUE(overflow.ok());
  EXPECT_EQ(*overflow, 1);

  const std::vector<Half> got = dev.DownloadOut();
  const std::vector<float> got_lse = dev.DownloadLse();
  const int h = shape.num_q_heads;
  const int d = shape.head_dim;
  for (int j = 0; j < h * d; ++j) ASSERT_TRUE(testing::IsNaN(got[1 * h * d + j])) << j;
  for (int j = 0; j < h; ++j) ASSERT_TRUE(std::isnan(got_lse[1 * h + j])) << j;
  // The other slots: compare against the reference with slot 1 treated as padding.
  host.kv_lengths[1] = 0;
  std::vector<Half> masked = got;
  for (int j = 0; j < h * d; ++j) masked[1 * h * d + j] = testing::kHalfNaN;
  std::vector<float> ref_f32(host.out.size(), NAN);
  std::vector<Half> ref_out(host.out.size());
  DecodeBatchView ref_view = host.view();
  ref_view.out = ref_out.data();
  ref_view.lse = nullptr;
  ReferenceDecode(ref_view, host.pools(), ReferencePrecision::kFloat64, ref_f32.data());
  const testing::OutputError e = testing::CompareOutput(host, masked, ref_f32);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LE(e.max_abs, kMaxAbs);
  EXPECT_LE(e.rel_l2, kRelL2);
}

TEST_F(GemmPathGpuTest, RunRejectsViewsThatDisagreeWithThePlan) {
  const ModelShape shape = Shape(64, 2, 2, 16, 256);
  PagedBatch host = MakeAppended(shape, {10, 20}, 2, 8);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 2, 64);
  ASSERT_TRUE(plan.ok());
  DeviceBytes ws(plan->workspace_bytes);

  DecodeBatchView bad = dev.batch_view;
  bad.capacity = 3;
  const Status st =
      RunGemmPath(*plan, shape, bad, dev.pools_view, ws.workspace(), cublas_, stream_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch.capacity = 3"), std::string::npos) << st.message();

  DecodeWorkspace small = ws.workspace();
  small.bytes -= 1;
  const Status st_ws =
      RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, small, cublas_, stream_);
  EXPECT_EQ(st_ws.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st_ws.message().find("workspace.bytes"), std::string::npos) << st_ws.message();

  KvPoolView bad_pools = dev.pools_view;
  bad_pools.head_dim = 128;
  const Status st_pools =
      RunGemmPath(*plan, shape, dev.batch_view, bad_pools, ws.workspace(), cublas_, stream_);
  EXPECT_NE(st_pools.message().find("pools.head_dim = 128"), std::string::npos)
      << st_pools.message();

  bad = dev.batch_view;
  bad.q = nullptr;
  const Status st_q =
      RunGemmPath(*plan, shape, bad, dev.pools_view, ws.workspace(), cublas_, stream_);
  EXPECT_NE(st_q.message().find("batch.q is null"), std::string::npos) << st_q.message();

  // Nothing ran: the outputs still hold their poison.
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  for (Half x : dev.DownloadOut()) ASSERT_TRUE(testing::IsNaN(x));
}

// ---- baselines (same numerics; benchmark-only code still has to be right) -----------------

TEST_F(GemmPathGpuTest, IterativeAndPointerArrayBaselinesMatchReference) {
  const ModelShape shape = Shape(128, 4, 2, 16, 512);
  const std::vector<int> lengths = {1, 200, 0, 512, 77};
  PagedBatch host = MakeAppended(shape, lengths, 6, 31337);
  auto plan = PlanGemmPath(shape, 6, 512);
  ASSERT_TRUE(plan.ok());
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());
  for (GemmIterationGrain grain : {GemmIterationGrain::kQueryHead, GemmIterationGrain::kKvHead}) {
    DeviceBatch dev(host);
    const Status st = RunGemmIterative(*plan, shape, dev.batch_view, dev.pools_view,
                                       host.kv_lengths, ws.workspace(), cublas_, stream_, grain);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectMatchesReference(host, dev, grain == GemmIterationGrain::kQueryHead
                                          ? "iterative per query head"
                                          : "iterative per kv head");
  }
  {
    DeviceBatch dev(host);
    DeviceBytes arrays(GemmPointerArrayBytes(*plan));
    ASSERT_TRUE(PrepareGemmPointerArrays(*plan, dev.batch_view, ws.workspace(),
                                         arrays.workspace()).ok());
    const Status st = RunGemmPointerBatched(*plan, shape, dev.batch_view, dev.pools_view,
                                            ws.workspace(), arrays.workspace(), cublas_, stream_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectMatchesReference(host, dev, "pointer-array batched");
  }
}

// The big-GEMM bound computes no attention; check that its two GEMMs are the stacked products it
// claims (K_all * q_group0 and V_all^T * P_all) against a CPU product of the read-back operands.
TEST_F(GemmPathGpuTest, BigGemmBoundComputesTheStackedProducts) {
  const ModelShape shape = Shape(64, 2, 2, 16, 128);
  PagedBatch host = MakeAppended(shape, {128, 50, 0}, 3, 2024);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 3, 128);
  ASSERT_TRUE(plan.ok());
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_TRUE(PrepareGemmPathWorkspace(*plan, ws.workspace(), stream_).ok());
  ASSERT_TRUE(RunGemmBigGemm(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(),
                             cublas_, stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);

  const std::vector<char> bytes = testing::Download<char>(ws, plan->workspace_bytes);
  auto at = [&](std::size_t off) { return bytes.data() + off; };
  const int m_all = plan->batch_count() * plan->t_pad;
  const int g = shape.group_size();
  const int d = shape.head_dim;
  const Half* k_all = reinterpret_cast<const Half*>(at(plan->k_offset));
  const Half* v_all = reinterpret_cast<const Half*>(at(plan->v_offset));
  const float* scores = reinterpret_cast<const float*>(at(plan->scores_offset));
  const Half* probs = reinterpret_cast<const Half*>(at(plan->probs_offset));
  const float* acc = reinterpret_cast<const float*>(at(plan->acc_offset));
  // The gather put slot 1 / kv head 1 / token 7 where the pools have it.
  const std::int64_t src = host.TokenOffset(1, 7, 1);
  const std::int64_t dst = ((1 * shape.num_kv_heads + 1) * static_cast<std::int64_t>(plan->t_pad) + 7) * d;
  for (int j = 0; j < d; ++j) ASSERT_EQ(k_all[dst + j].bits, host.k_pool[src + j].bits) << j;

  double max_err = 0.0;
  for (int m = 0; m < m_all; ++m) {
    for (int gg = 0; gg < g; ++gg) {
      double dot = 0.0;
      for (int j = 0; j < d; ++j) {
        dot += HalfToFloat(k_all[static_cast<std::int64_t>(m) * d + j]) *
               HalfToFloat(host.q[gg * d + j]);
      }
      max_err = std::max(max_err, std::abs(dot * host.view().scale - scores[gg * static_cast<std::int64_t>(m_all) + m]));
    }
  }
  EXPECT_LE(max_err, 1e-3);
  max_err = 0.0;
  double max_ref = 0.0;
  for (int gg = 0; gg < g; ++gg) {
    for (int j = 0; j < d; ++j) {
      double sum = 0.0;
      for (int m = 0; m < m_all; ++m) {
        sum += HalfToFloat(v_all[static_cast<std::int64_t>(m) * d + j]) *
               HalfToFloat(probs[gg * static_cast<std::int64_t>(m_all) + m]);
      }
      max_ref = std::max(max_ref, std::abs(sum));
      max_err = std::max(max_err, std::abs(sum - acc[gg * d + j]));
    }
  }
  EXPECT_GT(max_ref, 0.0);
  EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref) * std::sqrt(static_cast<double>(m_all)));
}

}  // namespace
}  // namespace attnrt::kernels
