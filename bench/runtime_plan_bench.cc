// The host cost of planning one batch (issue 11: the CUDA executor's "plan" per piece, 25-40 us
// at B=128 on the H100 host): BatchPlanner::Plan (validation, one new token per request), the
// block rows the pack reads (FillBlockRows) and Settle after the step, over 1024 sequences of
// H32 Hkv8 D128 with 16-token blocks, each batch 128 distinct random sequences; and the same
// with every request crossing into a new block (sequences prefilled to one length cross their
// boundaries together); and the first decode batches after a prefill. CPU only.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kvcache/kvcache.h"
#include "runtime/batch_plan.h"

namespace attnrt::runtime {
namespace {

constexpr int kSequences = 1024, kContext = 512, kBatch = 128;

ModelShape PlanShape() {
  ModelShape s;
  s.num_layers = 1;
  s.num_q_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = 4096;
  return s;
}

// A table of `sequences` sequences of kContext tokens and batches over it, in random order.
struct PlanFixture {
  explicit PlanFixture(int sequences = kSequences)
      : allocator(sequences * (PlanShape().max_blocks_per_sequence() + 1)),
        ids(static_cast<std::size_t>(sequences)) {
    std::vector<kvcache::BlockCopy> copies;
    for (SequenceId id = 0; id < static_cast<SequenceId>(sequences); ++id) {
      if (!planner.Create(id).ok()) std::abort();
      const bool ok = planner.WithTable([&](kvcache::SequenceTable& t) {
        return t.Append(id, kvcache::SequenceTable::kAllLayers, kContext, &copies).ok();
      });
      if (!ok) std::abort();
    }
    std::iota(ids.begin(), ids.end(), SequenceId{0});
  }

  ModelShape shape = PlanShape();
  kvcache::BlockAllocator allocator;
  kvcache::SequenceTable table{shape, &allocator};
  BatchPlanner planner{&table, /*allow_device_memory=*/true, nullptr};
  std::vector<Half> dummy = std::vector<Half>(64);
  std::mt19937_64 rng{3};
  std::vector<SequenceId> ids;

  // A batch of kBatch requests of the sequences ids[first, first + kBatch).
  Batch BatchOf(int first) {
    Batch b;
    b.requests.resize(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      BatchRequest& r = b.requests[i];
      r.sequence_id = ids[first + i];
      r.memory = MemoryKind::kDevice;
      r.q = r.k = r.v = r.out = dummy.data();
    }
    return b;
  }
  Batch NextBatch() {
    std::shuffle(ids.begin(), ids.end(), rng);
    return BatchOf(0);
  }

  // The timed part: the executor's plan, block rows and settle for one batch.
  void PlanFillSettle(benchmark::State& state, const Batch& batch) {
    const std::size_t stride = static_cast<std::size_t>(shape.max_blocks_per_sequence());
    rows.resize(stride * kBatch);
    BatchPlan plan;  // fresh per batch, as the executor's BatchState
    planner.Plan(batch, &plan);
    planner.FillBlockRows(batch, plan.live, stride, rows.data(), &plan.statuses);
    planner.Settle(batch, &plan);
    if (plan.live.size() != kBatch) state.SkipWithError("a request was refused");
    benchmark::DoNotOptimize(rows.data());
  }
  std::vector<std::int32_t> rows;
};

// Random batches over a table of `sequences`, each planned, filled and settled.
void PlanFillSettleOver(benchmark::State& state, int sequences) {
  PlanFixture f(sequences);
  for (auto _ : state) {
    state.PauseTiming();
    Batch batch = f.NextBatch();
    state.ResumeTiming();
    f.PlanFillSettle(state, batch);
  }
  // Seconds per request (printed with an SI prefix).
  state.counters["time_per_request"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// 2000 batches: every sequence grows by ~250 tokens over the run, as in the host-path benchmark.
void BM_PlanFillSettle128(benchmark::State& state) { PlanFillSettleOver(state, kSequences); }
BENCHMARK(BM_PlanFillSettle128)->Iterations(2000)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

// As BM_PlanFillSettle128 over a larger table (the argument: its sequences), batches drawn from
// all of them: whether a plan's cost grows with the live sequences (the host-path bench's runs
// over ~10 k forked sequences planned a B=128 batch in ~49 us, 13-17 over 1,024; H200 host,
// 2026-11-29). 2-core VM: 33 us at 16,384 before the plan's prefetches and the allocator's
// huge pages, 12.5 after (5.7 at 1,024 either way).
void BM_PlanFillSettle128Over(benchmark::State& state) {
  PlanFillSettleOver(state, static_cast<int>(state.range(0)));
}
BENCHMARK(BM_PlanFillSettle128Over)->Arg(1024)->Arg(16384)->Iterations(2000)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

// Every request of every batch crosses into a new block: sequences at a multiple of the block
// size, each batch 128 of them not yet grown this round (a run's start after every sequence
// was prefilled to the same length; the sequences then cross boundaries together).
void BM_PlanAtBlockBoundary128(benchmark::State& state) {
  PlanFixture f;
  int next = kSequences;  // a new round of boundary crossings when it reaches kSequences
  for (auto _ : state) {
    state.PauseTiming();
    if (next + kBatch > kSequences) {
      // Grow every sequence to the next boundary (15 more tokens), then cross it in batches.
      const int bs = f.shape.block_size;
      std::vector<kvcache::BlockCopy> copies;
      for (SequenceId id = 0; id < kSequences; ++id) {
        const bool ok = f.planner.WithTable([&](kvcache::SequenceTable& t) {
          const int length = *t.Length(id, 0);
          const int to_boundary = (bs - length % bs) % bs;
          return to_boundary == 0 ||
                 t.Append(id, kvcache::SequenceTable::kAllLayers, to_boundary, &copies).ok();
        });
        if (!ok) std::abort();
      }
      std::shuffle(f.ids.begin(), f.ids.end(), f.rng);
      next = 0;
    }
    const Batch batch = f.BatchOf(next);
    next += kBatch;
    state.ResumeTiming();
    f.PlanFillSettle(state, batch);
  }
  state.counters["time_per_request"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PlanAtBlockBoundary128)->Iterations(400)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

// The first decode batches after a prefill: every sequence at 512 tokens (32 full blocks) takes
// its first decode token, crossing into a 33rd block; batches 2-8 of a fresh table (the first
// pays the process's own first touches), each of 128 sequences not planned before.
void BM_FirstDecodeAfterPrefill128(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    auto f = std::make_unique<PlanFixture>();
    f->PlanFillSettle(state, f->BatchOf(0));
    state.ResumeTiming();
    for (int first = kBatch; first < kSequences; first += kBatch) {
      state.PauseTiming();
      const Batch batch = f->BatchOf(first);
      state.ResumeTiming();
      f->PlanFillSettle(state, batch);
    }
    state.PauseTiming();
    f.reset();
    state.ResumeTiming();
  }
  state.counters["time_per_batch"] = benchmark::Counter(
      kSequences / kBatch - 1,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FirstDecodeAfterPrefill128)->Iterations(20)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace attnrt::runtime

BENCHMARK_MAIN();
