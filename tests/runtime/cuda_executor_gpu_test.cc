// The CUDA executor (runtime/cuda_executor.cc) on a GPU: against the dense FP64 shadow, graph
// replay bit-identical to eager launches, capture-short/replay-long, host and device memory,
// injected launch failure and recovery, batches split past the largest bucket. Every test
// skips (with the reason) where no CUDA device is present, except the one that checks the
// factory's Unavailable answer there.
#include "runtime/cuda_executor.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "kernels/gemm_path.h"
#include "runtime/cuda_resources.h"
#include "tests/runtime/executor_harness.h"

namespace attnrt::runtime {
namespace {

using testing::MakeRequest;
using testing::MatchesExpected;
using testing::OwnedRequest;
using testing::RandomWorkload;
using testing::SubmitAndWait;

// The executor tests' small model with H 8, D 128 and a 1024-token context.
ModelShape TestShape() {
  ModelShape s = testing::SmallExecutorShape();
  s.num_q_heads = 8;
  s.head_dim = 128;
  s.max_context = 1024;
  return s;
}

// Every entry of the decode table (the cuBLAS GEMM path is one of them).
std::vector<std::string> AllPathNames() {
  std::vector<std::string> names;
  for (const kernels::DecodeVariant& v : kernels::DecodeVariants()) names.emplace_back(v.name);
  return names;
}

CudaExecutorOptions Options(LaunchMode mode = LaunchMode::kGraph) {
  CudaExecutorOptions o;
  o.shape = TestShape();
  o.num_blocks = 4096;
  o.mode = mode;
  o.paths = AllPathNames();
  return o;
}

std::unique_ptr<CudaExecutor> Make(const CudaExecutorOptions& o) {
  auto ex = CreateCudaExecutor(o);
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
  return ex.ok() ? std::move(ex).value() : nullptr;
}

class CudaExecutorGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the CUDA executor needs a GPU";
  }
};

void ExpectAllMatch(const testing::SyncResult& r, const std::vector<OwnedRequest>& reqs,
                    const std::string& where) {
  ASSERT_TRUE(r.submit.ok()) << where << ": " << r.submit.ToString();
  ASSERT_EQ(r.calls, 1) << where;
  ASSERT_EQ(r.statuses.size(), reqs.size()) << where;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(r.statuses[i].ok()) << where << " request " << i << ": "
                                    << r.statuses[i].ToString();
    EXPECT_TRUE(MatchesExpected(reqs[i])) << where << " request " << i;
  }
}

TEST(CudaExecutorNoGpuTest, FactoryAnswersUnavailableWithoutGpu) {
  if (CudaDeviceAvailable()) GTEST_SKIP() << "a CUDA device is present; this checks its absence";
  auto ex = CreateCudaExecutor(Options());
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kUnavailable) << ex.status().ToString();
}

// Random batches (sizes 1..70: several buckets, padding), every captured path, vs the shadow.
TEST_F(CudaExecutorGpuTest, EveryPathMatchesDenseReference) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->memory().num_graphs,
            static_cast<int>(ex->memory().graphs.size()) * ex->max_in_flight());  // one per buffer
  RandomWorkload w(*ex, 101);
  w.AddSequences(30, 300);
  for (const std::string& path : ex->paths()) {
    ASSERT_TRUE(ex->SelectPath(path).ok());
    for (int step = 0; step < 12; ++step) {
      std::vector<OwnedRequest> reqs = w.MakeBatch(w.rng().NextInt(1, 70));
      ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs)), reqs,
                     path + " step " + std::to_string(step));
    }
  }
  EXPECT_EQ(ex->stats().failed_batches, 0);
}

// Same workload through a graph executor and an eager one: every output and LSE bit-identical,
// across batches of changing size, composition, layers and growing lengths.
TEST_F(CudaExecutorGpuTest, GraphReplayIsBitIdenticalToEager) {
  for (const std::string& path : AllPathNames()) {
    CudaExecutorOptions og = Options(LaunchMode::kGraph), oe = Options(LaunchMode::kEager);
    og.paths = oe.paths = {path};
    auto graph = Make(og);
    auto eager = Make(oe);
    ASSERT_TRUE(graph && eager);
    EXPECT_GT(graph->memory().num_graphs, 0);
    EXPECT_EQ(eager->memory().num_graphs, 0);
    RandomWorkload wg(*graph, 202), we(*eager, 202);
    wg.AddSequences(20, 200);
    we.AddSequences(20, 200);
    for (int step = 0; step < 30; ++step) {
      const int size = wg.rng().NextInt(1, 40);
      ASSERT_EQ(size, we.rng().NextInt(1, 40));
      std::vector<OwnedRequest> rg = wg.MakeBatch(size), re = we.MakeBatch(size);
      const testing::SyncResult a = SubmitAndWait(*graph, RandomWorkload::ToBatch(rg));
      const testing::SyncResult b = SubmitAndWait(*eager, RandomWorkload::ToBatch(re));
      ExpectAllMatch(a, rg, path + " graph step " + std::to_string(step));
      ExpectAllMatch(b, re, path + " eager step " + std::to_string(step));
      for (std::size_t i = 0; i < rg.size(); ++i) {
        ASSERT_EQ(rg[i].id, re[i].id);
        ASSERT_EQ(0, std::memcmp(rg[i].out.data(), re[i].out.data(), rg[i].out.size() * 2))
            << path << " step " << step << " request " << i << ": out differs";
        ASSERT_EQ(0, std::memcmp(rg[i].lse.data(), re[i].lse.data(), rg[i].lse.size() * 4))
            << path << " step " << step << " request " << i << ": lse differs";
      }
    }
  }
}

// Graphs are captured at start-up, when no sequence exists (every row length 0); batches then
// run at lengths up to max_context with no re-capture.
TEST_F(CudaExecutorGpuTest, CapturedShortReplaysLong) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  const int graphs = ex->memory().num_graphs;
  const double capture_ms = ex->memory().capture_ms;
  RandomWorkload w(*ex, 303);
  ASSERT_TRUE(ex->CreateSequence(1).ok());
  ASSERT_TRUE(ex->CreateSequence(2).ok());
  w.shadow().Create(1);
  w.shadow().Create(2);
  w.Prefill(1, 0, 3);
  w.Prefill(2, 1, 990);  // up to 1022 of max_context 1024 over the steps below
  const int steps = 32 / static_cast<int>(ex->paths().size());
  for (const std::string& path : ex->paths()) {
    ASSERT_TRUE(ex->SelectPath(path).ok());
    for (int step = 0; step < steps; ++step) {
      std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 1, 0, w.rng()),
                                        MakeRequest(ex->shape(), 2, 1, w.rng())};
      w.shadow().Expect(reqs[0]);
      w.shadow().Expect(reqs[1]);
      ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs)), reqs,
                     path + " step " + std::to_string(step));
    }
  }
  EXPECT_EQ(*ex->SequenceLength(2, 1), 990 + steps * static_cast<int>(ex->paths().size()));
  EXPECT_EQ(ex->memory().num_graphs, graphs);
  EXPECT_EQ(ex->memory().capture_ms, capture_ms);
}

// Past kSplitKvShortContext the split-KV variants plan two context classes: a piece whose rows
// are all short runs the short class's path, one with a long row the other; both match the
// reference, and both paths were captured at start-up.
TEST_F(CudaExecutorGpuTest, SplitKvContextClassesEachRunTheirPath) {
  CudaExecutorOptions o = Options();
  o.shape.max_context = 2 * kernels::kSplitKvShortContext;
  o.shape.num_layers = 1;
  o.paths = {"split_kv", "split_kv_simt"};
  o.buckets = {1, 2, 4};
  o.record_timings = true;
  auto ex = Make(o);
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 505);
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(ex->CreateSequence(id).ok());
    w.shadow().Create(id);
  }
  w.Prefill(1, 0, 40);
  w.Prefill(2, 0, kernels::kSplitKvShortContext - 3);  // crosses into the long class below
  w.Prefill(3, 0, kernels::kSplitKvShortContext + 700);
  for (const std::string& path : {std::string("split_kv"), std::string("split_kv_simt")}) {
    ASSERT_TRUE(ex->SelectPath(path).ok());
    (void)ex->TakeTimings();
    for (int step = 0; step < 6; ++step) {
      // Alternately the short rows alone and all three.
      std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 1, 0, w.rng()),
                                        MakeRequest(ex->shape(), 2, 0, w.rng())};
      if (step % 2 == 1) reqs.push_back(MakeRequest(ex->shape(), 3, 0, w.rng()));
      for (OwnedRequest& r : reqs) w.shadow().Expect(r);
      ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs)), reqs,
                     path + " step " + std::to_string(step));
    }
    const std::vector<PieceTimings> t = ex->TakeTimings();
    ASSERT_EQ(t.size(), 6u);
    for (int step = 0; step < 6; ++step) {
      // Row 2 reaches kSplitKvShortContext + 1 tokens at its fourth step (of either path).
      const bool long_row = step % 2 == 1 || (path == "split_kv_simt" || step >= 3);
      EXPECT_EQ(t[step].path_max_kv_length,
                long_row ? o.shape.max_context : kernels::kSplitKvShortContext)
          << path << " step " << step;
      // Every piece here is a whole batch, so the completion thread finished one (Settle, then
      // the done callback) before each piece after the executor's first.
      EXPECT_GE(t[step].previous_settle_us, 0.0);
      if (path != "split_kv" || step > 0) {
        EXPECT_GT(t[step].previous_settle_us + t[step].previous_done_callback_us, 0.0)
            << path << " step " << step;
      }
    }
  }
}

// Device-memory requests: q/k/v on the device written on another stream (the batch waits on
// the caller's event), out/lse scattered to device pointers; mixed with host requests in one
// batch, and device-only batches.
TEST_F(CudaExecutorGpuTest, DeviceAndHostMemoryInTheSameGraphs) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 404);
  w.AddSequences(12, 150);
  auto producer = Stream::Create();
  auto ready = Event::Create(false);
  ASSERT_TRUE(producer.ok() && ready.ok());
  const std::size_t q_bytes = static_cast<std::size_t>(ex->shape().num_q_heads) *
                              ex->shape().head_dim * sizeof(Half);
  const std::size_t kv_bytes = ex->shape().kv_token_elems() * sizeof(Half);
  const std::size_t lse_bytes = ex->shape().num_q_heads * sizeof(float);
  for (int step = 0; step < 16; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(w.rng().NextInt(1, 20));
    const bool all_device = step % 2 == 0;
    std::vector<DeviceBuffer> bufs;
    Batch batch = RandomWorkload::ToBatch(reqs);
    std::vector<int> device_index(reqs.size(), -1);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (!all_device && i % 3 == 1) continue;  // host request
      device_index[i] = static_cast<int>(bufs.size());
      for (std::size_t bytes : {q_bytes, kv_bytes, kv_bytes, q_bytes, lse_bytes}) {
        auto b = DeviceBuffer::Create(bytes);
        ASSERT_TRUE(b.ok());
        bufs.push_back(std::move(b).value());
      }
      DeviceBuffer* d = &bufs[device_index[i]];
      ASSERT_EQ(cudaMemcpyAsync(d[0].data(), reqs[i].q.data(), q_bytes, cudaMemcpyHostToDevice,
                                producer->get()), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(d[1].data(), reqs[i].k.data(), kv_bytes, cudaMemcpyHostToDevice,
                                producer->get()), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(d[2].data(), reqs[i].v.data(), kv_bytes, cudaMemcpyHostToDevice,
                                producer->get()), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(d[3].data(), 0xff, q_bytes, producer->get()), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(d[4].data(), 0xff, lse_bytes, producer->get()), cudaSuccess);
      BatchRequest& r = batch.requests[i];
      r.memory = MemoryKind::kDevice;
      r.q = d[0].as<Half>();
      r.k = d[1].as<Half>();
      r.v = d[2].as<Half>();
      r.out = d[3].as<Half>();
      r.lse = d[4].as<float>();
    }
    ASSERT_EQ(cudaEventRecord(ready->get(), producer->get()), cudaSuccess);
    batch.ready_event = ready->get();
    testing::SyncResult r = SubmitAndWait(*ex, std::move(batch));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
      if (device_index[i] >= 0) {
        EXPECT_TRUE(testing::IsNaN(reqs[i].out[0])) << "device request wrote host out";
        const DeviceBuffer* d = &bufs[device_index[i]];
        ASSERT_EQ(cudaMemcpy(reqs[i].out.data(), d[3].data(), q_bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(reqs[i].lse.data(), d[4].data(), lse_bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
      }
      EXPECT_TRUE(MatchesExpected(reqs[i]))
          << "step " << step << " request " << i << (device_index[i] >= 0 ? " (device)" : " (host)");
    }
  }
}

// A request staged in one chunk of staging memory: [q][k][v][out][lse], out and lse poisoned.
struct StagedChunk {
  std::size_t q_bytes, kv_bytes, lse_bytes;
  explicit StagedChunk(const ModelShape& shape)
      : q_bytes(static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim * sizeof(Half)),
        kv_bytes(shape.kv_token_elems() * sizeof(Half)),
        lse_bytes(shape.num_q_heads * sizeof(float)) {}
  std::size_t bytes() const { return 2 * q_bytes + 2 * kv_bytes + lse_bytes; }
  // Copies `req`'s q/k/v into chunk `c` (host memory, or device memory with `on_device`), poisons
  // its out and lse, and points `r` (kDevice) at it.
  void Stage(char* c, const OwnedRequest& req, BatchRequest* r, bool on_device = false) const {
    Copy(c, req.q.data(), q_bytes, on_device);
    Copy(c + q_bytes, req.k.data(), kv_bytes, on_device);
    Copy(c + q_bytes + kv_bytes, req.v.data(), kv_bytes, on_device);
    const std::vector<unsigned char> poison(q_bytes + lse_bytes, 0xff);  // out, lse: NaN
    Copy(c + q_bytes + 2 * kv_bytes, poison.data(), poison.size(), on_device);
    r->memory = MemoryKind::kDevice;
    r->q = reinterpret_cast<const Half*>(c);
    r->k = reinterpret_cast<const Half*>(c + q_bytes);
    r->v = reinterpret_cast<const Half*>(c + q_bytes + kv_bytes);
    r->out = reinterpret_cast<Half*>(c + q_bytes + 2 * kv_bytes);
    r->lse = reinterpret_cast<float*>(c + 2 * q_bytes + 2 * kv_bytes);
  }
  // The staged out/lse of chunk `c` into `req` (whose own out must be untouched: NaN).
  void ReadBack(const char* c, OwnedRequest* req, bool on_device = false) const {
    EXPECT_TRUE(testing::IsNaN(req->out[0])) << "a staged request wrote the host out";
    Copy(req->out.data(), c + q_bytes + 2 * kv_bytes, q_bytes, on_device);
    Copy(req->lse.data(), c + 2 * q_bytes + 2 * kv_bytes, lse_bytes, on_device);
  }

 private:
  static void Copy(void* dst, const void* src, std::size_t bytes, bool on_device) {
    if (on_device) {
      ASSERT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), cudaSuccess);
    } else {
      std::memcpy(dst, src, bytes);
    }
  }
};

// Requests staged in the executor's staging memory (pinned, mapped) run as kDevice in place:
// the graph's gather reads q/k/v from host memory and its scatter writes out/lse there; every
// other batch all staged (the device-memory graph), the rest mixed with ordinary host requests
// (the general graph); some batches' chunks 4-byte aligned only (the gather's element-wise
// fallback).
TEST_F(CudaExecutorGpuTest, StagingMemoryRequestsRunInPlace) {
  CudaExecutorOptions o = Options();
  o.offer_staging_memory = true;
  o.record_timings = true;
  o.kernel_copy_max_bytes = 0;  // no bucket packs staged requests (see the next test)
  auto ex = Make(o);
  ASSERT_NE(ex, nullptr);
  StagingMemory* staging = ex->staging_memory();
  ASSERT_NE(staging, nullptr);
  RandomWorkload w(*ex, 606);
  w.AddSequences(12, 150);
  const StagedChunk layout(ex->shape());
  const std::size_t stride = layout.bytes();
  for (int step = 0; step < 8; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(w.rng().NextInt(1, 40));
    const bool all_staged = step % 2 == 0;
    const std::size_t shift = step % 4 == 1 ? 4 : 0;  // lse stays float-aligned
    auto* allocation = static_cast<char*>(staging->Allocate(stride * reqs.size() + shift));
    ASSERT_NE(allocation, nullptr);
    char* base = allocation + shift;
    Batch batch = RandomWorkload::ToBatch(reqs);
    std::vector<char*> chunk(reqs.size(), nullptr);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (!all_staged && i % 4 == 3) continue;  // an ordinary host request
      chunk[i] = base + i * stride;
      layout.Stage(chunk[i], reqs[i], &batch.requests[i]);
    }
    testing::SyncResult r = SubmitAndWait(*ex, std::move(batch));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
      if (chunk[i] != nullptr) layout.ReadBack(chunk[i], &reqs[i]);
      EXPECT_TRUE(MatchesExpected(reqs[i]))
          << "step " << step << " request " << i << (chunk[i] ? " (staged)" : " (host)");
    }
    // Staged requests alone run in place (gather/scatter); beside host-memory requests, which
    // need the copies anyway, they take the host path with them (one graph, not both paths).
    const bool any_host = std::count(chunk.begin(), chunk.end(), nullptr) > 0;
    for (const PieceTimings& t : ex->TakeTimings()) {
      EXPECT_EQ(t.host_requests, any_host ? t.requests : 0) << "step " << step;
    }
    staging->Free(allocation);
  }
}

// busy_gather_*: a piece of staged requests launched while batches are in flight takes the
// general graph (gather, step, scatter) when it has few enough rows and a long enough row; one
// launched into an idle executor, and every piece with busy_gather_max_rows 0, reads and writes
// in place. Results match either way.
TEST_F(CudaExecutorGpuTest, StagedPiecesWhileBusyGatherUnlessInPlaceAlways) {
  for (bool only_when_idle : {true, false}) {
    SCOPED_TRACE(only_when_idle ? "in place only when idle" : "in place always");
    CudaExecutorOptions o = Options();
    o.offer_staging_memory = true;
    o.record_timings = true;
    o.kernel_copy_max_bytes = 0;  // no bucket packs staged requests
    o.busy_gather_max_rows = only_when_idle ? 1024 : 0;  // every busy piece, or none
    o.busy_gather_min_kv_length = only_when_idle ? 1 : 1 << 20;
    auto ex = Make(o);
    ASSERT_NE(ex, nullptr);
    ASSERT_TRUE(ex->SelectPath("split_kv").ok());  // a path that reads rows in place
    StagingMemory* staging = ex->staging_memory();
    ASSERT_NE(staging, nullptr);
    RandomWorkload w(*ex, only_when_idle ? 612 : 613);
    w.AddSequences(40, 400);
    const StagedChunk layout(ex->shape());
    constexpr int kBatches = 12;
    std::vector<std::vector<OwnedRequest>> batches;
    std::vector<char*> bases;
    std::vector<Batch> staged;
    std::vector<std::vector<Status>> statuses(kBatches);
    for (int b = 0; b < kBatches; ++b) {  // every batch staged first: then submitted back to back
      batches.push_back(w.MakeBatch(w.rng().NextInt(20, 64)));
      auto* base = static_cast<char*>(staging->Allocate(layout.bytes() * batches.back().size()));
      ASSERT_NE(base, nullptr);
      bases.push_back(base);
      staged.push_back(RandomWorkload::ToBatch(batches.back()));
      for (std::size_t i = 0; i < batches.back().size(); ++i) {
        layout.Stage(base + i * layout.bytes(), batches.back()[i], &staged.back().requests[i]);
      }
    }
    for (int b = 0; b < kBatches; ++b) {
      ASSERT_TRUE(ex->Submit(std::move(staged[b]),
                             [&, b](std::vector<Status> st) { statuses[b] = std::move(st); })
                      .ok());
    }
    ex->Wait();
    for (int b = 0; b < kBatches; ++b) {
      for (std::size_t i = 0; i < batches[b].size(); ++i) {
        ASSERT_TRUE(statuses[b][i].ok()) << statuses[b][i].ToString();
        layout.ReadBack(bases[b] + i * layout.bytes(), &batches[b][i]);
        EXPECT_TRUE(MatchesExpected(batches[b][i])) << "batch " << b << " request " << i;
      }
      staging->Free(bases[b]);
    }
    const std::vector<PieceTimings> t = ex->TakeTimings();
    ASSERT_EQ(static_cast<int>(t.size()), kBatches);
    EXPECT_TRUE(t[0].in_place) << "the first piece, launched into an idle executor";
    const auto gathered = std::count_if(t.begin(), t.end(),
                                        [](const PieceTimings& p) { return !p.in_place; });
    if (only_when_idle) {
      EXPECT_GT(gathered, 0) << "no piece launched behind another took the general graph";
    } else {
      EXPECT_EQ(gathered, 0);
    }
    EXPECT_EQ(ex->stats().failed_batches, 0);
  }
}

// Device-memory pieces: staged requests in pieces of 33-128 rows (buckets 64 and 128) on every
// path, read and written in place on the split-KV paths, gathered and scattered in row chunks
// of 16, 32 or 64 rows or none on the others (device_io_chunk_rows), padding rows in the last
// chunks. The memory report says how many chunks each bucket's device-memory graph has.
class CudaExecutorChunkTest : public CudaExecutorGpuTest,
                              public ::testing::WithParamInterface<int> {};

TEST_P(CudaExecutorChunkTest, StagedPiecesInRowChunksMatch) {
  const int rows = GetParam();
  CudaExecutorOptions o = Options();
  o.offer_staging_memory = true;
  o.record_timings = true;
  o.device_io_chunk_rows = rows;
  auto ex = Make(o);
  ASSERT_NE(ex, nullptr);
  for (const BucketGraphReport& g : ex->memory().graphs) {
    // The split-KV paths read requests in place: nothing to overlap, one chunk.
    const bool in_place = g.path.starts_with("split_kv");
    const int expected = rows > 0 && g.bucket >= 2 * rows && !in_place ? g.bucket / rows : 1;
    EXPECT_EQ(g.device_io_chunks, expected) << "bucket " << g.bucket << " path " << g.path;
  }
  StagingMemory* staging = ex->staging_memory();
  ASSERT_NE(staging, nullptr);
  RandomWorkload w(*ex, 608 + rows);
  w.AddSequences(50, 300);  // 150 (sequence, layer) rows
  const StagedChunk layout(ex->shape());
  for (const std::string& path : ex->paths()) {
    ASSERT_TRUE(ex->SelectPath(path).ok());
    for (int step = 0; step < 3; ++step) {
      std::vector<OwnedRequest> reqs = w.MakeBatch(step == 0 ? 128 : w.rng().NextInt(33, 127));
      auto* base = static_cast<char*>(staging->Allocate(layout.bytes() * reqs.size()));
      ASSERT_NE(base, nullptr);
      Batch batch = RandomWorkload::ToBatch(reqs);
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        layout.Stage(base + i * layout.bytes(), reqs[i], &batch.requests[i]);
      }
      testing::SyncResult r = SubmitAndWait(*ex, std::move(batch));
      ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(r.statuses[i].ok()) << r.statuses[i].ToString();
        layout.ReadBack(base + i * layout.bytes(), &reqs[i]);
        EXPECT_TRUE(MatchesExpected(reqs[i]))
            << path << " step " << step << " request " << i << " of " << reqs.size();
      }
      for (const PieceTimings& t : ex->TakeTimings()) {
        EXPECT_EQ(t.host_requests, 0) << "the piece took the host-memory graph";
      }
      staging->Free(base);
    }
  }
  EXPECT_EQ(ex->stats().failed_batches, 0);
}

INSTANTIATE_TEST_SUITE_P(ChunkRows, CudaExecutorChunkTest, ::testing::Values(0, 16, 32, 64),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "Rows" + std::to_string(p.param);
                         });

// In buckets small enough for copy kernels, a staged request on a path that gathers (simple,
// GEMM) is packed and takes the host-memory graph (faster than the gather kernel there); on a
// path that reads requests in place (split-KV: no kernel but the step's), or with
// kernel_copy_max_bytes 0, it runs in place. Either way its output lands in its staged out/lse.
TEST_F(CudaExecutorGpuTest, SmallBucketsPackStagedRequestsWhereThePathGathers) {
  for (const std::size_t kernel_copy_max_bytes : {std::size_t{64} << 10, std::size_t{0}}) {
    CudaExecutorOptions o = Options();
    o.offer_staging_memory = true;
    o.record_timings = true;
    o.kernel_copy_max_bytes = kernel_copy_max_bytes;
    auto ex = Make(o);
    ASSERT_NE(ex, nullptr);
    StagingMemory* staging = ex->staging_memory();
    ASSERT_NE(staging, nullptr);
    RandomWorkload w(*ex, 607);
    w.AddSequences(3, 40);
    const StagedChunk layout(ex->shape());
    for (const std::string& path : ex->paths()) {
      SCOPED_TRACE(path + ", kernel_copy_max_bytes " + std::to_string(kernel_copy_max_bytes));
      ASSERT_TRUE(ex->SelectPath(path).ok());
      const StatusOr<const kernels::DecodeVariant*> variant = kernels::FindDecodeVariant(path);
      const bool in_place = variant.ok() && (*variant)->reads_rows_in_place;
      const int packed = kernel_copy_max_bytes > 0 && !in_place ? 1 : 0;
      for (int step = 0; step < 3; ++step) {
        std::vector<OwnedRequest> reqs = w.MakeBatch(1);
        auto* c = static_cast<char*>(staging->Allocate(layout.bytes()));
        ASSERT_NE(c, nullptr);
        Batch batch = RandomWorkload::ToBatch(reqs);
        layout.Stage(c, reqs[0], &batch.requests[0]);
        testing::SyncResult result = SubmitAndWait(*ex, std::move(batch));
        ASSERT_TRUE(result.submit.ok()) << result.submit.ToString();
        ASSERT_TRUE(result.statuses[0].ok()) << result.statuses[0].ToString();
        layout.ReadBack(c, &reqs[0]);
        EXPECT_TRUE(MatchesExpected(reqs[0])) << "step " << step;
        const std::vector<PieceTimings> timings = ex->TakeTimings();
        ASSERT_EQ(timings.size(), 1u);
        EXPECT_EQ(timings[0].host_requests, packed) << "step " << step;
        EXPECT_EQ(timings[0].in_place, in_place && packed == 0) << "step " << step;
        staging->Free(c);
      }
    }
  }
}

TEST_F(CudaExecutorGpuTest, HostPointerInDeviceModeFailsNamingTheField) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 505);
  w.AddSequences(2, 10);
  std::vector<OwnedRequest> reqs = w.MakeBatch(2);
  Batch batch = RandomWorkload::ToBatch(reqs);
  batch.requests[0].memory = MemoryKind::kDevice;  // pointers are host memory
  const int len = *ex->SequenceLength(reqs[0].id, reqs[0].layer);
  testing::SyncResult r = SubmitAndWait(*ex, batch);
  ASSERT_TRUE(r.submit.ok());
  EXPECT_EQ(r.statuses[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.statuses[0].message().find("q ("), std::string::npos) << r.statuses[0].ToString();
  EXPECT_EQ(*ex->SequenceLength(reqs[0].id, reqs[0].layer), len);
  ASSERT_TRUE(r.statuses[1].ok());
  EXPECT_TRUE(MatchesExpected(reqs[1]));
}

// kDevice requests lying in one cudaMalloc allocation: the first batch finds the allocation
// (one driver lookup per pointer), later ones at other offsets in it are checked by the known
// range and still match the reference; a host pointer passed as kDevice after that still fails
// naming its field, and leaves the other request of its batch untouched.
TEST_F(CudaExecutorGpuTest, DeviceRequestsInAKnownAllocationSkipTheDriverHostPointersStillFail) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  ASSERT_EQ(ex->KnownDeviceAllocationsForTesting(), 0u);
  RandomWorkload w(*ex, 515);
  w.AddSequences(4, 12);
  const StagedChunk chunk(ex->shape());
  const std::size_t slot = (chunk.bytes() + 255) / 256 * 256;
  auto arena = DeviceBuffer::Create(6 * slot);
  ASSERT_TRUE(arena.ok());
  char* base = arena->as<char>();
  for (int step = 0; step < 3; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(2);
    Batch batch = RandomWorkload::ToBatch(reqs);
    for (int i = 0; i < 2; ++i) {
      chunk.Stage(base + (2 * step + i) * slot, reqs[i], &batch.requests[i], /*on_device=*/true);
    }
    if (step == 2) batch.requests[0].q = reqs[0].q.data();  // a host pointer as kDevice
    const int len0 = *ex->SequenceLength(reqs[0].id, reqs[0].layer);
    testing::SyncResult r = SubmitAndWait(*ex, std::move(batch));
    ASSERT_TRUE(r.submit.ok()) << r.submit.ToString();
    for (int i = 0; i < 2; ++i) {
      if (step == 2 && i == 0) {
        EXPECT_EQ(r.statuses[0].code(), StatusCode::kInvalidArgument);
        EXPECT_NE(r.statuses[0].message().find("q ("), std::string::npos)
            << r.statuses[0].ToString();
        EXPECT_EQ(*ex->SequenceLength(reqs[0].id, reqs[0].layer), len0);
        continue;
      }
      ASSERT_TRUE(r.statuses[i].ok()) << "step " << step << ": " << r.statuses[i].ToString();
      chunk.ReadBack(base + (2 * step + i) * slot, &reqs[i], /*on_device=*/true);
      EXPECT_TRUE(MatchesExpected(reqs[i])) << "step " << step << " request " << i;
    }
    EXPECT_EQ(ex->KnownDeviceAllocationsForTesting(), 1u) << "step " << step;
  }
}

// An injected launch failure (a real CUDA error) fails that batch's requests with the Status;
// the executor then runs later batches correctly, in both modes.
TEST_F(CudaExecutorGpuTest, InjectedLaunchFailureFailsTheBatchAndRecovers) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    auto ex = Make(Options(mode));
    ASSERT_NE(ex, nullptr);
    RandomWorkload w(*ex, 606);
    w.AddSequences(8, 60);
    std::vector<OwnedRequest> ok1 = w.MakeBatch(5);
    ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(ok1)), ok1, "before");

    ex->InjectLaunchFailuresForTesting(1);
    RandomWorkload doomed(*ex, 607, /*first_id=*/10000);  // its own sequences: their failed token stays undefined
    doomed.AddSequences(3, 20);
    std::vector<OwnedRequest> bad = doomed.MakeBatch(3);
    testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(bad));
    ASSERT_TRUE(r.submit.ok());
    ASSERT_EQ(r.calls, 1);
    for (const Status& s : r.statuses) {
      EXPECT_EQ(s.code(), StatusCode::kInternal);
      EXPECT_NE(s.message().find("cudaError"), std::string::npos) << s.ToString();
    }
    EXPECT_EQ(ex->stats().failed_batches, 1);

    for (int step = 0; step < 5; ++step) {
      std::vector<OwnedRequest> ok2 = w.MakeBatch(w.rng().NextInt(1, 16));
      ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(ok2)), ok2,
                     "after, step " + std::to_string(step));
    }
    EXPECT_EQ(ex->stats().failed_batches, 1);
  }
}

TEST_F(CudaExecutorGpuTest, FailedBatchLosesItsTokensUntilTheSequenceIsFreed) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    auto ex = Make(Options(mode));
    ASSERT_NE(ex, nullptr);
    testing::ExpectLostTokenContract(*ex, [&] { ex->InjectLaunchFailuresForTesting(1); });
  }
}

// The fault points of runtime/fault_injection.h, as the CPU executor's tests use them
// (tests/runtime/fault_injection_test.cc): a failed block allocation fails its request alone; a
// failed copy-on-write copy fails the batch and loses the copied block; a piece failing after
// it ran keeps the lost-token contract; every time the executor keeps serving.
TEST_F(CudaExecutorGpuTest, FaultPointBlockAllocationFailsOnlyThatRequest) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 808);
  testing::BlockAllocationFault fault;
  ASSERT_NO_FATAL_FAILURE(testing::RunBlockAllocationFault(*ex, ex->faults(), w, &fault));
  const std::int64_t in_use = fault.blocks_in_use_before;

  std::vector<OwnedRequest> retry = {MakeRequest(ex->shape(), 1, 0, w.rng())};
  w.shadow().Expect(retry[0]);
  ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(retry)), retry, "retry");
  EXPECT_EQ(ex->stats().kv_blocks_in_use, in_use + 2);
}

TEST_F(CudaExecutorGpuTest, FaultPointCopyFailsTheBatchAndLosesTheCopiedBlock) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    auto ex = Make(Options(mode));
    ASSERT_NE(ex, nullptr);
    RandomWorkload w(*ex, 809);
    ASSERT_TRUE(ex->CreateSequence(1).ok());
    w.shadow().Create(1);
    for (int l = 0; l < 3; ++l) w.Prefill(1, l, 10);  // one shared, partly filled block
    ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
    w.shadow().Fork(1, 2);
    ASSERT_TRUE(ex->CreateSequence(3).ok());
    w.shadow().Create(3);
    w.Prefill(3, 0, 7);
    // The child's first write copies the shared block: the copy fails, so the whole batch
    // (the bystander included) fails with the injected error.
    std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), 2, 0, w.rng()),
                                      MakeRequest(ex->shape(), 3, 0, w.rng())};
    ex->faults().copy.Arm(1);
    testing::SyncResult r = SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs));
    ASSERT_TRUE(r.submit.ok());
    ASSERT_EQ(r.statuses.size(), 2u);
    for (const Status& s : r.statuses) {
      EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
      EXPECT_NE(s.message().find("FaultInjection::copy"), std::string::npos) << s.ToString();
    }
    EXPECT_EQ(ex->faults().copy.injected(), 1);
    // The child's copied block is lost on every layer: its later requests fail saying so.
    for (int l = 0; l < 3; ++l) {
      std::vector<OwnedRequest> after = {MakeRequest(ex->shape(), 2, l, w.rng())};
      testing::SyncResult a = SubmitAndWait(*ex, RandomWorkload::ToBatch(after));
      ASSERT_TRUE(a.submit.ok());
      EXPECT_EQ(a.statuses[0].code(), StatusCode::kFailedPrecondition)
          << "layer " << l << ": " << a.statuses[0].ToString();
    }
    // The parent is untouched and runs; the bystander's failed token is its own loss, so a
    // fresh sequence stands in for it; the executor keeps serving.
    std::vector<OwnedRequest> parent;
    for (int l = 0; l < 3; ++l) {
      parent.push_back(MakeRequest(ex->shape(), 1, l, w.rng()));
      w.shadow().Expect(parent.back());
    }
    ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(parent)), parent, "parent");
    ASSERT_TRUE(ex->FreeSequence(2).ok());
    ASSERT_TRUE(ex->ForkSequence(1, 2).ok());
    w.shadow().Free(2);
    w.shadow().Fork(1, 2);
    std::vector<OwnedRequest> child = {MakeRequest(ex->shape(), 2, 1, w.rng())};
    w.shadow().Expect(child[0]);
    ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(child)), child, "fresh child");
  }
}

TEST_F(CudaExecutorGpuTest, FaultPointBatchKeepsTheLostTokenContract) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    auto ex = Make(Options(mode));
    ASSERT_NE(ex, nullptr);
    testing::ExpectLostTokenContract(*ex, [&] { ex->faults().batch.Arm(1); });
    EXPECT_EQ(ex->faults().batch.injected(), 1);
  }
}

TEST_F(CudaExecutorGpuTest, ScopedFaultInjectionReachesANewExecutor) {
  ScopedFaultInjectionForTesting scoped;
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(&ex->faults(), &scoped.faults());
  CudaExecutorOptions own = Options();
  own.faults = std::make_shared<FaultInjection>();
  auto given = Make(own);
  ASSERT_NE(given, nullptr);
  EXPECT_EQ(&given->faults(), own.faults.get());
}

// 300 requests: one piece of 256 and one of 44 (bucket 64), one callback with 300 statuses.
TEST_F(CudaExecutorGpuTest, BatchLargerThanTheLargestBucketIsSplit) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 707);
  w.AddSequences(110, 40);
  for (int step = 0; step < 2; ++step) {
    std::vector<OwnedRequest> reqs = w.MakeBatch(step == 0 ? 300 : 513);
    ASSERT_EQ(reqs.size(), step == 0 ? 300u : 330u);
    ExpectAllMatch(SubmitAndWait(*ex, RandomWorkload::ToBatch(reqs)), reqs,
                   "split step " + std::to_string(step));
  }
}

// Run completes the batch on the calling thread (the done callback of Submit never runs
// elsewhere for it): one request, a few, and more than the largest bucket (several pieces one
// after another), after a Submit still in flight, which it waits for; results match.
// Batches in parts (SubmitPart), on both launch modes; and a sequence call made while a batch
// is open waits for the Submit that closes it.
TEST_F(CudaExecutorGpuTest, BatchesInPartsMatchTheReference) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    CudaExecutorOptions o = Options();
    o.mode = mode;
    o.max_batch_size = 32;
    auto ex = Make(o);
    ASSERT_NE(ex, nullptr);
    testing::ExpectPartsMatchTheReference(*ex, o.max_batch_size);
  }
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  testing::ExpectSequenceCallsWaitForAnOpenBatch(*ex);
}

TEST_F(CudaExecutorGpuTest, RunCompletesOnTheCallingThreadAndMatches) {
  for (LaunchMode mode : {LaunchMode::kGraph, LaunchMode::kEager}) {
    CudaExecutorOptions o = Options();
    o.mode = mode;
    auto ex = Make(o);
    ASSERT_NE(ex, nullptr);
    RandomWorkload w(*ex, 909);
    w.AddSequences(110, 40);
    std::vector<OwnedRequest> before = w.MakeBatch(20);
    testing::SyncResult submitted;
    std::promise<void> fired;
    submitted.submit = ex->Submit(RandomWorkload::ToBatch(before), [&](std::vector<Status> st) {
      submitted.statuses = std::move(st);
      ++submitted.calls;
      fired.set_value();
    });
    for (int n : {1, 7, 300}) {
      std::vector<OwnedRequest> reqs = w.MakeBatch(n);
      StatusOr<std::vector<Status>> st = ex->Run(RandomWorkload::ToBatch(reqs));
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      testing::SyncResult r;
      r.statuses = std::move(*st);
      r.calls = 1;
      ExpectAllMatch(r, reqs, std::string(mode == LaunchMode::kGraph ? "graph" : "eager") +
                                  " run of " + std::to_string(n));
    }
    fired.get_future().wait();
    ExpectAllMatch(submitted, before, "submitted before the runs");
    StatusOr<std::vector<Status>> empty = ex->Run(Batch{});
    ASSERT_FALSE(empty.ok());
    EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
    ex->Wait();
    EXPECT_EQ(ex->stats().batches, 4);
  }
}

// Run's pieces of the smallest bucket take the solo graph (no compute-order events; awaited by
// a stream sync, so later computes must not need their `computed` record): runs of one
// request alternate with pipelined Submits of several batches on the same sequences, for more
// rounds than there are buffers, so every buffer's solo and ordered graphs follow each other;
// every result matches the per-sequence reference in order, and exactly the runs of one were
// solo.
TEST_F(CudaExecutorGpuTest, SoloRunsBetweenPipelinedBatchesKeepTheOrder) {
  CudaExecutorOptions o = Options();
  o.record_timings = true;
  auto ex = Make(o);
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 919);
  w.AddSequences(4, 30);  // few sequences: every batch appends to the ones the runs read
  std::vector<std::vector<OwnedRequest>> submitted;
  std::vector<std::vector<Status>> statuses(40);
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<OwnedRequest> one = w.MakeBatch(1);
    StatusOr<std::vector<Status>> st = ex->Run(RandomWorkload::ToBatch(one));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(st->size(), 1u);
    ASSERT_TRUE((*st)[0].ok()) << (*st)[0].ToString();
    EXPECT_TRUE(MatchesExpected(one[0])) << "run of round " << round;
    for (int k = 0; k < 3; ++k) {  // three batches in flight when the next Run waits for them
      const int b = static_cast<int>(submitted.size());
      submitted.push_back(w.MakeBatch(w.rng().NextInt(2, 4)));
      ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(submitted.back()),
                             [&, b](std::vector<Status> r) { statuses[b] = std::move(r); })
                      .ok());
    }
  }
  ex->Wait();
  for (std::size_t b = 0; b < submitted.size(); ++b) {
    ASSERT_EQ(statuses[b].size(), submitted[b].size());
    for (std::size_t i = 0; i < submitted[b].size(); ++i) {
      ASSERT_TRUE(statuses[b][i].ok()) << statuses[b][i].ToString();
      EXPECT_TRUE(MatchesExpected(submitted[b][i])) << "batch " << b << " request " << i;
    }
  }
  int solo = 0, solo_of_one = 0;
  for (const PieceTimings& t : ex->TakeTimings()) {
    solo += t.solo;
    solo_of_one += t.solo && t.requests == 1;
  }
  EXPECT_EQ(solo, kRounds);
  EXPECT_EQ(solo_of_one, kRounds);
}

// A batch of one submitted while the executor is idle launches inline on the solo graph, which
// records no `computed`: the batches submitted right behind it (the first on the same (sequence,
// layer), then two more, so every buffer follows a solo piece in turn) must still compute after
// it (WaitForUnorderedSolo). Every result matches the per-sequence reference, and every round's
// first batch was solo.
TEST_F(CudaExecutorGpuTest, SoloSubmitWhenIdleOrdersTheBatchesBehindIt) {
  CudaExecutorOptions o = Options();
  o.record_timings = true;
  auto ex = Make(o);
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 929);
  w.AddSequences(4, 600);  // long rows: the solo step still runs when the next one launches
  constexpr int kRounds = 12;
  std::vector<std::vector<OwnedRequest>> batches;
  std::vector<std::vector<Status>> statuses(kRounds * 4);
  auto submit = [&](std::vector<OwnedRequest> reqs) {
    const int b = static_cast<int>(batches.size());
    batches.push_back(std::move(reqs));
    ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(batches.back()),
                           [&, b](std::vector<Status> r) { statuses[b] = std::move(r); })
                    .ok());
  };
  for (int round = 0; round < kRounds; ++round) {
    // Made (and their references computed) first, so the four Submits follow each other at
    // once, while the solo step runs.
    std::vector<OwnedRequest> one = w.MakeBatch(1);
    std::vector<OwnedRequest> same = {MakeRequest(ex->shape(), one[0].id, one[0].layer, w.rng())};
    w.shadow().Expect(same[0]);
    std::vector<OwnedRequest> third = w.MakeBatch(w.rng().NextInt(2, 4));
    std::vector<OwnedRequest> fourth = w.MakeBatch(w.rng().NextInt(2, 4));
    ex->Wait();  // idle: the next batch launches inline
    submit(std::move(one));
    submit(std::move(same));
    submit(std::move(third));
    submit(std::move(fourth));
  }
  ex->Wait();
  for (std::size_t b = 0; b < batches.size(); ++b) {
    ASSERT_EQ(statuses[b].size(), batches[b].size()) << "batch " << b;
    for (std::size_t i = 0; i < batches[b].size(); ++i) {
      ASSERT_TRUE(statuses[b][i].ok()) << statuses[b][i].ToString();
      EXPECT_TRUE(MatchesExpected(batches[b][i])) << "batch " << b << " request " << i;
    }
  }
  // Each round's first batch was solo; the one behind it too only if the first had completed
  // before its Submit (a stalled host), which leaves the order nothing to test there.
  int solo = 0;
  for (const PieceTimings& t : ex->TakeTimings()) solo += t.solo;
  EXPECT_GE(solo, kRounds);
  EXPECT_LE(solo, 2 * kRounds);
}

// Batches submitted back to back (more than the pipeline buffers) without waiting, including forks with
// copy-on-write in between: per-sequence order holds and every result matches.
TEST_F(CudaExecutorGpuTest, PipelinedBatchesAndForksMatch) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 808);
  w.AddSequences(6, 100);
  std::vector<std::vector<OwnedRequest>> batches;
  std::vector<std::vector<Status>> statuses(24);
  std::vector<std::thread::id> threads(24);
  SequenceId next_child = 500;
  for (int b = 0; b < 24; ++b) {
    if (b % 8 == 4) {  // fork a sequence mid-stream; its next write copies the shared block
      const SequenceId parent = w.ids()[b % w.ids().size()];
      ASSERT_TRUE(ex->ForkSequence(parent, next_child).ok());
      w.shadow().Fork(parent, next_child);
      std::vector<OwnedRequest> reqs = {MakeRequest(ex->shape(), next_child, 0, w.rng()),
                                        MakeRequest(ex->shape(), parent, 0, w.rng())};
      w.shadow().Expect(reqs[0]);
      w.shadow().Expect(reqs[1]);
      batches.push_back(std::move(reqs));
      ++next_child;
    } else {
      batches.push_back(w.MakeBatch(w.rng().NextInt(1, 12)));
    }
    ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(batches.back()),
                           [&, b](std::vector<Status> st) {
                             statuses[b] = std::move(st);
                             threads[b] = std::this_thread::get_id();
                           })
                    .ok());
  }
  ex->Wait();
  for (int b = 0; b < 24; ++b) {
    EXPECT_NE(threads[b], std::this_thread::get_id());
    for (std::size_t i = 0; i < batches[b].size(); ++i) {
      ASSERT_TRUE(statuses[b][i].ok()) << statuses[b][i].ToString();
      EXPECT_TRUE(MatchesExpected(batches[b][i])) << "batch " << b << " request " << i;
    }
  }
}

// Submit returns once a batch is planned: with another batch in flight, the launcher packs and
// launches it later. A sequence freed right after Submit returns must still be read by that
// batch (the free waits for the launch; its blocks are then reused by the next prefill, which
// drains the stream first), and every result matches.
TEST_F(CudaExecutorGpuTest, SequenceCallsRightAfterSubmitKeepQueuedBatches) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  RandomWorkload w(*ex, 909);
  w.AddSequences(10, 200);
  constexpr int kRounds = 16;
  std::vector<std::vector<OwnedRequest>> batches;
  batches.reserve(2 * kRounds);
  std::vector<std::vector<Status>> statuses(2 * kRounds);
  auto submit = [&](int b) {
    ASSERT_TRUE(ex->Submit(RandomWorkload::ToBatch(batches[b]),
                           [&, b](std::vector<Status> st) { statuses[b] = std::move(st); })
                    .ok());
  };
  for (int round = 0; round < kRounds; ++round) {
    const SequenceId victim = 1000 + round;
    ASSERT_TRUE(ex->CreateSequence(victim).ok());
    w.shadow().Create(victim);
    for (int l = 0; l < ex->shape().num_layers; ++l) w.Prefill(victim, l, 1 + 37 * round % 300);
    // One batch to keep the GPU busy, then the victim's: handed to the launcher.
    batches.push_back(w.MakeBatch(w.rng().NextInt(4, 16)));
    submit(static_cast<int>(batches.size()) - 1);
    batches.push_back(w.MakeBatch(w.rng().NextInt(1, 6)));
    for (int l = 0; l < ex->shape().num_layers; ++l) {
      batches.back().push_back(MakeRequest(ex->shape(), victim, l, w.rng()));
      w.shadow().Expect(batches.back().back());
    }
    submit(static_cast<int>(batches.size()) - 1);
    const Status freed = ex->FreeSequence(victim);
    ASSERT_TRUE(freed.ok()) << freed.ToString();
    w.shadow().Free(victim);
  }
  ex->Wait();
  for (std::size_t b = 0; b < batches.size(); ++b) {
    ASSERT_EQ(statuses[b].size(), batches[b].size()) << "batch " << b;
    for (std::size_t i = 0; i < batches[b].size(); ++i) {
      ASSERT_TRUE(statuses[b][i].ok()) << "batch " << b << " request " << i << ": "
                                       << statuses[b][i].ToString();
      EXPECT_TRUE(MatchesExpected(batches[b][i])) << "batch " << b << " request " << i;
    }
  }
  EXPECT_EQ(ex->stats().sequences, 10);
  EXPECT_EQ(ex->stats().failed_batches, 0);
}

TEST_F(CudaExecutorGpuTest, MemoryReportCoversEveryBucket) {
  auto ex = Make(Options());
  ASSERT_NE(ex, nullptr);
  const CudaExecutorMemory& m = ex->memory();
  const std::size_t gemm_tpads = kernels::GemmPathTpadBuckets(ex->shape()).size();
  EXPECT_EQ(m.graphs.size(), ex->buckets().size() * (ex->paths().size() - 1 + gemm_tpads));
  EXPECT_GT(m.kv_cache_bytes, 0u);
  EXPECT_GT(m.buffer_device_bytes, 0u);
  EXPECT_GT(m.pinned_bytes, 0u);
  EXPECT_GE(m.total_device_bytes, m.kv_cache_bytes + m.buffer_device_bytes + m.workspace_bytes);
  EXPECT_EQ(m.graphs.front().bucket, ex->buckets().back()) << "largest bucket captured first";
  std::printf("%s", m.ToString().c_str());
  const Status nope = ex->SelectPath("nope");
  EXPECT_EQ(nope.code(), StatusCode::kNotFound);
  for (const std::string& path : ex->paths()) {
    EXPECT_NE(nope.ToString().find(path), std::string::npos) << "lists the paths: "
                                                              << nope.ToString();
  }
  CudaExecutorOptions o = Options();
  o.paths = {"gemm", "gemm"};
  EXPECT_EQ(CreateCudaExecutor(o).status().code(), StatusCode::kInvalidArgument);
  o.paths = {"no_such_path"};
  EXPECT_EQ(CreateCudaExecutor(o).status().code(), StatusCode::kNotFound);
  o.paths = {"gemm"};
  o.num_buffers = 1;
  EXPECT_EQ(CreateCudaExecutor(o).status().code(), StatusCode::kInvalidArgument);
  o.num_buffers = 2;
  o.device_io_chunk_rows = -1;
  const Status chunks = CreateCudaExecutor(o).status();
  EXPECT_EQ(chunks.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(chunks.ToString().find("device_io_chunk_rows"), std::string::npos)
      << chunks.ToString();
  o.device_io_chunk_rows = 0;
  for (auto field : {&CudaExecutorOptions::busy_gather_max_rows,
                     &CudaExecutorOptions::busy_gather_min_kv_length}) {
    CudaExecutorOptions bad = o;
    bad.*field = -1;
    const Status s = CreateCudaExecutor(bad).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.ToString().find(field == &CudaExecutorOptions::busy_gather_max_rows
                                    ? "busy_gather_max_rows"
                                    : "busy_gather_min_kv_length"),
              std::string::npos)
        << s.ToString();
  }
}

}  // namespace
}  // namespace attnrt::runtime
