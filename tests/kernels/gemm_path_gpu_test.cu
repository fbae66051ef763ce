// The cuBLAS GEMM path (kernels/gemm_path.h) and its baselines against the CPU reference: fresh
// N(0,1) inputs, poisoned outputs, GQA groups 1/2/4/8, head dims 64/128/256, mixed lengths with
// length 1 and padded rows, graph capture then replay with longer lengths, overflow handling;
// and long contexts (tests named LongContext*): runs cut into context chunks and batch slices
// within a workspace budget, up to max_context 32768 at the largest batch bucket, lengths on
// every side of a chunk boundary, the issue-12 batches, capture/replay across chunks.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <attnrt/config.h>
#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/gemm_baselines.h"
#include "kernels/gemm_path.h"
#include "tests/support/decode_checks.h"
#include "tests/support/gemm_device_batch.h"
#include "tests/support/paged_batch.h"

namespace attnrt::kernels {
namespace {

using testing::DeviceBatch;
using testing::DeviceBytes;
using testing::kLseTol;
using testing::kMaxAbs;
using testing::kRelL2;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::PagedBatchOptions;

// Threads that draw a long-context batch's K/V (a fixed count, so a seed gives the same numbers
// on every machine) and that share the FP64 reference's rows.
constexpr int kFillThreads = 16;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// ReferenceDecode (FP64) with the live batch rows spread over threads: each thread sees only its
// rows' lengths (the others read as padding), and each row writes only its own outputs.
// Long-context batches need billions of multiply-adds.
void ParallelReferenceDecode(PagedBatch& host, std::vector<Half>& out, std::vector<float>& lse,
                             std::vector<float>& out_f32) {
  const int threads = static_cast<int>(
      std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 32u));
  std::vector<int> order(host.capacity);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return host.kv_lengths[a] > host.kv_lengths[b]; });
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::vector<std::int32_t> lengths(host.capacity, 0);
      for (std::size_t i = w; i < order.size(); i += threads) {
        lengths[order[i]] = host.kv_lengths[order[i]];
      }
      DecodeBatchView view = host.view();
      view.kv_lengths = lengths.data();
      view.out = out.data();
      view.lse = lse.data();
      ReferenceDecode(view, host.pools(), ReferencePrecision::kFloat64, out_f32.data());
    });
  }
  for (std::thread& t : workers) t.join();
}

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
  // The long-context cases' shape: one layer (half the pools of Shape's two), so that the plan,
  // the pools and the batch all agree on it.
  static ModelShape LongShape(int head_dim, int group, int kv_heads, int block_size,
                              int max_context) {
    ModelShape s = Shape(head_dim, group, kv_heads, block_size, max_context);
    s.num_layers = 1;
    return s;
  }

  // Host batch with the new token already appended (the GEMM path runs after the append).
  static PagedBatch MakeAppended(const ModelShape& shape, const std::vector<int>& lengths,
                                 int capacity, std::uint64_t seed, float q_scale = 1.0f,
                                 int fill_threads = 1) {
    PagedBatchOptions o;
    o.seed = seed;
    o.capacity = capacity;
    o.q_scale = q_scale;
    o.fill_threads = fill_threads;
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
    ParallelReferenceDecode(host, ref_out, ref_lse, ref_f32);

    const std::vector<Half> got = dev.DownloadOut();
    const std::vector<float> got_lse = dev.DownloadLse();
    testing::ExpectOutputMatchesReference(host, got, got_lse, ref_f32, ref_lse, what);
  }

  // Long-context batches (a LongShape: one layer), K/V drawn on kFillThreads threads.
  static PagedBatch MakeLong(const ModelShape& shape, const std::vector<int>& lengths,
                             int capacity, std::uint64_t seed) {
    return MakeAppended(shape, lengths, capacity, seed, 1.0f, kFillThreads);
  }

  // Runs `plan` eagerly on a workspace filled with 0xFF (NaN in every FP16 and FP32 buffer: no
  // stale chunk state, weight or pad row may reach a live output) and checks every live row
  // against the reference and that no row overflowed.
  void RunAndExpectMatch(const GemmPathPlan& plan, PagedBatch& host, DeviceBatch& dev,
                         const std::string& what) {
    SCOPED_TRACE(what + ": " + std::to_string(plan.num_slices) + " slices of " +
                 std::to_string(plan.slice_rows) + " rows, " + std::to_string(plan.num_chunks) +
                 " chunks of " + std::to_string(plan.chunk_tokens) + " tokens, workspace " +
                 std::to_string(plan.workspace_bytes) + " bytes");
    DeviceBytes ws(plan.workspace_bytes);
    ASSERT_EQ(cudaMemset(ws.data(), 0xFF, ws.bytes()), cudaSuccess);
    const Status st = RunGemmPath(plan, host.shape, dev.batch_view, dev.pools_view,
                                  ws.workspace(), cublas_, stream_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectMatchesReference(host, dev, what);
    auto overflow = ReadGemmPathOverflowCount(plan, ws.workspace(), stream_);
    ASSERT_TRUE(overflow.ok()) << overflow.status().ToString();
    EXPECT_EQ(*overflow, 0);
  }

  // Lengths on every side of the plan's chunk boundaries (clipped to `longest`): 1, C-1, C, C+1,
  // 2C-1, 2C, 2C+1, one token into the last chunk, the last chunk's first boundary, `longest`.
  static std::vector<int> BoundaryLengths(const GemmPathPlan& plan, int longest) {
    const int c = plan.chunk_tokens;
    const int last = (plan.num_chunks - 1) * c;
    std::vector<int> lengths = {longest, 1,         c - 1,    c,       c + 1, 2 * c - 1,
                                2 * c,   2 * c + 1, last + 1, last,    longest - 1};
    for (int& len : lengths) len = std::clamp(len, 1, longest);
    return lengths;
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
  // Length 1, block-boundary lengths, a long one, and two padded rows (0 and capacity tail).
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

// Every head dim by every group size, named D<d>_G<g>: the sweeps' cases.
const auto kEveryHeadDimAndGroup = ::testing::Values(
    SweepCase{64, 1}, SweepCase{64, 2}, SweepCase{64, 4}, SweepCase{64, 8}, SweepCase{128, 1},
    SweepCase{128, 2}, SweepCase{128, 4}, SweepCase{128, 8}, SweepCase{256, 1}, SweepCase{256, 2},
    SweepCase{256, 4}, SweepCase{256, 8});
std::string SweepName(const ::testing::TestParamInfo<SweepCase>& info) {
  return "D" + std::to_string(info.param.head_dim) + "_G" + std::to_string(info.param.group);
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimByGroup, GemmPathSweepTest,
    kEveryHeadDimAndGroup, SweepName);

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
// into any live row (V's pad rows are zeroed by the gather; K's pad scores are masked).
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

// A live row longer than the plan's Tpad: NaN out/lse for it alone, counted; others correct.
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
  // The other rows: compare against the reference with row 1 treated as padding.
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

// ---- long contexts: chunks and slices within the workspace budget ---------------------------

// Issue 12: 7 sequences at T=12345 (H32 Hkv32 D128, bucket 8) needed 1.68 GB at Tpad 12416 and
// failed with ResourceExhausted under the executor's 1 GiB budget; now two chunks.
TEST_F(GemmPathGpuTest, LongContextIssueSevenSequencesAtT12345Bucket8) {
  const ModelShape shape = LongShape(128, 1, 32, 16, 12416);
  PagedBatch host = MakeLong(shape, std::vector<int>(7, 12345), 8, 12345);
  DeviceBatch dev(host);
  auto tpad = ChooseGemmPathTpad(shape, 12345);
  ASSERT_TRUE(tpad.ok());
  EXPECT_EQ(*tpad, 12416);
  auto plan = PlanGemmPath(shape, 8, *tpad);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_LE(plan->workspace_bytes, kGemmPathDefaultMaxWorkspaceBytes);
  EXPECT_GT(plan->num_chunks, 1);
  RunAndExpectMatch(*plan, host, dev, "7 x 12345, bucket 8");
}

// The same at T=20000, bucket 16 (12 live sequences and 4 padded rows), max_context 32768.
TEST_F(GemmPathGpuTest, LongContextIssueSequencesAtT20000Bucket16) {
  const ModelShape shape = LongShape(128, 1, 32, 16, 32768);
  PagedBatch host = MakeLong(shape, std::vector<int>(12, 20000), 16, 20000);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 16, *ChooseGemmPathTpad(shape, 20000));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->t_pad, 32768);
  EXPECT_LE(plan->workspace_bytes, kGemmPathDefaultMaxWorkspaceBytes);
  EXPECT_GT(plan->num_chunks, 1);
  RunAndExpectMatch(*plan, host, dev, "12 x 20000, bucket 16");
}

// max_context 32768 at the largest batch bucket (256), every head dim and group size, under the
// default budget (which cuts every one of these into chunks): lengths on every side of a chunk
// boundary, 32768 itself, short and padded rows.
class GemmPathLongContextSweepTest : public GemmPathGpuTest,
                                     public ::testing::WithParamInterface<SweepCase> {};

TEST_P(GemmPathLongContextSweepTest, LongContextMixedLengthsAtTheLargestBucket) {
  const SweepCase c = GetParam();
  constexpr int kMaxContext = 32768;
  constexpr int kCapacity = 256;
  const ModelShape shape =
      LongShape(c.head_dim, c.group, /*kv_heads=*/2, /*block_size=*/16, kMaxContext);
  auto plan = PlanGemmPath(shape, kCapacity, *ChooseGemmPathTpad(shape, kMaxContext));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GE(plan->num_chunks, 3) << "the case is meant to cross several chunk boundaries";
  std::vector<int> lengths = BoundaryLengths(*plan, kMaxContext);
  lengths.push_back(0);
  testing::NormalRng rng(4000 + c.head_dim + c.group);
  while (static_cast<int>(lengths.size()) < kCapacity - 3) {
    const int r = rng.NextInt(0, 15);
    lengths.push_back(r < 3 ? 0 : r == 15 ? rng.NextInt(1, kMaxContext) : rng.NextInt(1, 600));
  }
  // The last three rows stay padding (the capacity tail).
  PagedBatch host = MakeLong(shape, lengths, kCapacity, 5000 + c.head_dim * 10 + c.group);
  DeviceBatch dev(host);
  RunAndExpectMatch(*plan, host, dev,
                    "D=" + std::to_string(c.head_dim) + " G=" + std::to_string(c.group));
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimByGroup, GemmPathLongContextSweepTest,
    kEveryHeadDimAndGroup, SweepName);

// A small budget: the whole batch in dozens of chunks, every merge of the running state used.
TEST_F(GemmPathGpuTest, LongContextSmallBudgetManyChunks) {
  const ModelShape shape = LongShape(128, 4, 2, 16, 32768);
  auto plan = PlanGemmPath(shape, 16, 32768, kGemmPathCublasWorkspaceBytes + 16 * kMiB);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_slices, 1);
  EXPECT_GE(plan->num_chunks, 16);
  std::vector<int> lengths = BoundaryLengths(*plan, 32768);
  lengths.push_back(0);
  lengths.push_back(plan->chunk_tokens * (plan->num_chunks / 2) + 17);
  PagedBatch host = MakeLong(shape, lengths, 16, 616);
  DeviceBatch dev(host);
  RunAndExpectMatch(*plan, host, dev, "small budget");
}

// A budget below one Tpad quantum of the whole batch: equal batch slices, each in chunks of one
// quantum; an odd capacity and block size 8.
TEST_F(GemmPathGpuTest, LongContextBudgetBelowOneQuantumSlicesTheBatch) {
  const ModelShape shape = LongShape(64, 2, 2, 8, 2048);
  constexpr int kCapacity = 37;
  const auto one_quantum = PlanGemmPath(shape, kCapacity, kGemmPathTpadQuantum, SIZE_MAX);
  ASSERT_TRUE(one_quantum.ok());
  auto plan = PlanGemmPath(shape, kCapacity, 2048, one_quantum->workspace_bytes - 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_GE(plan->num_slices, 2);
  EXPECT_GE(plan->num_chunks, 16);
  std::vector<int> lengths = BoundaryLengths(*plan, 2048);
  testing::NormalRng rng(37);
  while (static_cast<int>(lengths.size()) < kCapacity) {
    lengths.push_back(rng.NextInt(0, 4) == 0 ? 0 : rng.NextInt(1, 2048));
  }
  PagedBatch host = MakeLong(shape, lengths, kCapacity, 3737);
  DeviceBatch dev(host);
  RunAndExpectMatch(*plan, host, dev, "sliced");
}

// One graph captured while every length sat in chunk 0, replayed with lengths reaching every
// chunk, then with lengths on the boundaries: the graph holds every piece whatever the lengths.
TEST_F(GemmPathGpuTest, LongContextGraphCaptureThenReplayWithDifferentLengths) {
  const ModelShape shape = Shape(128, 2, 4, 16, 16384);  // two layers: random layers per row
  auto plan = PlanGemmPath(shape, 8, 16384, kGemmPathCublasWorkspaceBytes + 64 * kMiB);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GE(plan->num_chunks, 3);
  const int c = plan->chunk_tokens;
  const std::vector<int> history = {16384, 3, 9000, 0, c + 1, 2 * c, 1, 16000};
  PagedBatch host = MakeAppended(shape, history, 8, 8088, 1.0f, kFillThreads);
  DeviceBatch dev(host);
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_EQ(cudaMemset(ws.data(), 0xFF, ws.bytes()), cudaSuccess);

  // Every length a prefix of the row's history (all its tokens valid), padding kept padding.
  auto set_lengths = [&](const std::vector<int>& want) {
    std::vector<std::int32_t> lens(want.size());
    for (std::size_t i = 0; i < want.size(); ++i) lens[i] = std::min(want[i], history[i]);
    testing::CopyToDevice<std::int32_t>(dev.kv_lengths, lens);
    host.kv_lengths = lens;
  };
  set_lengths({100, 1, 500, 0, 40, c - 1, 1, 64});  // all in chunk 0

  ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                          stream_).ok());  // eager first: cuBLAS picks and loads its kernels
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "eager, chunk 0 only");
  dev.Poison();

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view,
                                      ws.workspace(), cublas_, stream_);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> graph_guard(graph, cudaGraphDestroy);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> exec_guard(
      exec, cudaGraphExecDestroy);

  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "replay 1 (chunk 0 only)");

  testing::FillNormal(host.q, 4242);
  testing::CopyToDevice<Half>(dev.q, host.q);
  set_lengths(history);
  dev.Poison();
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "replay 2 (every chunk, new q)");

  set_lengths({c, c + 1, 2 * c - 1, 0, c + 1, 2 * c, 1, (plan->num_chunks - 1) * c + 1});
  dev.Poison();
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectMatchesReference(host, dev, "replay 3 (boundaries)");
  auto overflow = ReadGemmPathOverflowCount(*plan, ws.workspace(), stream_);
  ASSERT_TRUE(overflow.ok());
  EXPECT_EQ(*overflow, 0);
}

// Rows past Tpad in a plan of several slices and chunks: NaN and counted once each (in their
// own slice's finalize), every other row right.
TEST_F(GemmPathGpuTest, LongContextLengthPastTpadIsNaNAndCountedWhenSliced) {
  const ModelShape shape = Shape(64, 2, 2, 16, 1024);
  constexpr int kCapacity = 9;
  const std::vector<int> lengths = {40, 300, 0, 256, 1, 257, 129, 1000, 255};
  const auto one_quantum = PlanGemmPath(shape, kCapacity, kGemmPathTpadQuantum, SIZE_MAX);
  auto plan = PlanGemmPath(shape, kCapacity, 256, one_quantum->workspace_bytes - 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GE(plan->num_slices, 2);
  ASSERT_GE(plan->num_chunks, 2);
  PagedBatch host = MakeAppended(shape, lengths, kCapacity, 256);
  DeviceBatch dev(host);
  DeviceBytes ws(plan->workspace_bytes);
  ASSERT_EQ(cudaMemset(ws.data(), 0xFF, ws.bytes()), cudaSuccess);
  ASSERT_TRUE(RunGemmPath(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                          stream_).ok());
  auto overflow = ReadGemmPathOverflowCount(*plan, ws.workspace(), stream_);
  ASSERT_TRUE(overflow.ok());
  EXPECT_EQ(*overflow, 3);  // 300, 257, 1000

  const std::vector<Half> got = dev.DownloadOut();
  const std::vector<float> got_lse = dev.DownloadLse();
  const int h = shape.num_q_heads;
  const int d = shape.head_dim;
  std::vector<Half> masked = got;
  for (int row : {1, 5, 7}) {
    for (int j = 0; j < h * d; ++j) ASSERT_TRUE(testing::IsNaN(got[row * h * d + j])) << row;
    for (int j = 0; j < h; ++j) ASSERT_TRUE(std::isnan(got_lse[row * h + j])) << row;
    host.kv_lengths[row] = 0;  // the reference skips it
    for (int j = 0; j < h * d; ++j) masked[row * h * d + j] = testing::kHalfNaN;
  }
  std::vector<float> ref_f32(host.out.size(), NAN);
  std::vector<Half> ref_out(host.out.size());
  std::vector<float> ref_lse(host.lse.size(), NAN);
  ParallelReferenceDecode(host, ref_out, ref_lse, ref_f32);
  const testing::OutputError e = testing::CompareOutput(host, masked, ref_f32);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LE(e.max_abs, kMaxAbs);
  EXPECT_LE(e.rel_l2, kRelL2);
  EXPECT_LE(testing::MaxLseError(host, got_lse, ref_lse), kLseTol);
}

// The baselines run one piece; a plan of several is refused before anything is enqueued.
TEST_F(GemmPathGpuTest, BaselinesRefuseAPlanOfSeveralPieces) {
  const ModelShape shape = Shape(64, 2, 2, 16, 4096);
  PagedBatch host = MakeAppended(shape, {10, 4096}, 2, 9);
  DeviceBatch dev(host);
  auto plan = PlanGemmPath(shape, 2, 4096, kGemmPathCublasWorkspaceBytes + kMiB);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GT(plan->pieces(), 1);
  DeviceBytes ws(plan->workspace_bytes);
  const Status iterative = RunGemmIterative(*plan, shape, dev.batch_view, dev.pools_view,
                                            host.kv_lengths, ws.workspace(), cublas_, stream_);
  EXPECT_EQ(iterative.code(), StatusCode::kFailedPrecondition) << iterative.ToString();
  EXPECT_NE(iterative.message().find("chunks"), std::string::npos) << iterative.ToString();
  EXPECT_EQ(RunGemmBigGemm(*plan, shape, dev.batch_view, dev.pools_view, ws.workspace(), cublas_,
                           stream_).code(),
            StatusCode::kFailedPrecondition);
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
  // The gather put row 1 / kv head 1 / token 7 where the pools have it.
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
