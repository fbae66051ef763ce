// Host cost of the paged KV cache's bookkeeping, in ns per operation: block allocate+release
// (a new run, and the block after a hint), sequence create+free, decode growth (AppendToken),
// fork+free of a 4096-token sequence, a beam-style fork + copy-on-write token + free, and
// MetadataBytes(). Counters report the metadata bytes, their ratio to the K+V bytes in use, and
// the free block count. The block layout under churn: bench/kvcache_layout_bench.cc.
// Shape: 32 layers, Hkv = 8, D = 128, block size 16 (2 MiB of K+V per block), max_context 4096.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

constexpr int kAll = SequenceTable::kAllLayers;

ModelShape BenchShape() {
  ModelShape s;
  s.num_layers = 32;
  s.num_q_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_context = 4096;
  return s;
}

void Check(const Status& s, benchmark::State& state) {
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
}

void ReportCounters(benchmark::State& state, const SequenceTable& table,
                    const BlockAllocator& allocator) {
  const double meta = static_cast<double>(table.MetadataBytes() + allocator.MetadataBytes());
  const double used = static_cast<double>(allocator.num_blocks() - allocator.num_free()) *
                      static_cast<double>(BlockBytes(table.shape()));
  state.counters["metadata_bytes"] = meta;
  state.counters["metadata_ratio"] = used > 0 ? meta / used : 0.0;
  state.counters["free_blocks"] = allocator.num_free();
}

void BM_AllocateRelease(benchmark::State& state) {
  BlockAllocator allocator(static_cast<std::int32_t>(state.range(0)));
  // Half the pool held, so the free stack is neither full nor empty.
  for (std::int64_t i = 0; i < state.range(0) / 2; ++i) (void)allocator.Allocate();
  for (auto _ : state) {
    StatusOr<BlockId> b = allocator.Allocate();
    benchmark::DoNotOptimize(b);
    Status s = allocator.Release(*b);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["free_blocks"] = allocator.num_free();
}
BENCHMARK(BM_AllocateRelease)->Arg(1024)->Arg(1 << 20);

// A table's growth: the block after its last one (BlockHint::after), released again (it merges
// back into the free run it came from). Half the pool held, as one table. With 1024 blocks the
// free run flips between two size classes (512 and 511 blocks: list moves, the worst case);
// with 1000 it stays in one (only its length tags change).
void BM_AllocateAfterRelease(benchmark::State& state) {
  BlockAllocator allocator(static_cast<std::int32_t>(state.range(0)));
  BlockId last = *allocator.Allocate();
  for (std::int64_t i = 1; i < state.range(0) / 2; ++i) last = *allocator.Allocate({.after = last});
  for (auto _ : state) {
    StatusOr<BlockId> b = allocator.Allocate({.after = last});
    benchmark::DoNotOptimize(b);
    Status s = allocator.Release(*b);
    benchmark::DoNotOptimize(s);
  }
  if (*allocator.Allocate({.after = last}) != last + 1) state.SkipWithError("hint not taken");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocateAfterRelease)->Arg(1000)->Arg(1024)->Arg(1 << 20);

void BM_CreateFree(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  BlockAllocator allocator(1024);
  SequenceTable table(shape, &allocator);
  // Other live sequences, so the hash map is not trivially small.
  for (SequenceId id = 0; id < static_cast<SequenceId>(state.range(0)); ++id) {
    Check(table.Create(id + 1'000'000), state);
  }
  SequenceId id = 0;
  for (auto _ : state) {
    Status a = table.Create(id);
    Status b = table.Free(id);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
    ++id;
  }
  state.SetItemsProcessed(state.iterations());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_CreateFree)->Arg(0)->Arg(256);

// Decode growth: round-robin over `sequences` sequences, one token of one layer per call
// (layers cycle 0..31 per token, as decode requests arrive layer by layer); a block is allocated
// every 16 tokens of layer 0. A sequence at max_context is freed and recreated (amortised in).
void BM_AppendToken(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  const int sequences = static_cast<int>(state.range(0));
  BlockAllocator allocator(sequences * shape.max_blocks_per_sequence());
  SequenceTable table(shape, &allocator);
  for (int s = 0; s < sequences; ++s) Check(table.Create(s), state);
  std::vector<int> layer(sequences, 0), length(sequences, 0);
  std::vector<BlockCopy> copies;
  int s = 0;
  for (auto _ : state) {
    StatusOr<TokenPosition> token = table.AppendToken(s, layer[s], &copies);
    benchmark::DoNotOptimize(token);
    if (++layer[s] == shape.num_layers) {
      layer[s] = 0;
      if (++length[s] == shape.max_context) {
        Check(table.Free(s), state);
        Check(table.Create(s), state);
        length[s] = 0;
      }
    }
    if (++s == sequences) s = 0;
  }
  if (!copies.empty()) state.SkipWithError("unexpected copy-on-write");
  state.SetItemsProcessed(state.iterations());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_AppendToken)->Arg(1)->Arg(64);

// The same growth with every layer at once (kAllLayers), as a prefill-by-one or a runtime that
// advances all layers together would do.
void BM_AppendTokenAllLayers(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  BlockAllocator allocator(shape.max_blocks_per_sequence());
  SequenceTable table(shape, &allocator);
  Check(table.Create(0), state);
  std::vector<BlockCopy> copies;
  int length = 0;
  for (auto _ : state) {
    StatusOr<TokenPosition> token = table.AppendToken(0, kAll, &copies);
    benchmark::DoNotOptimize(token);
    if (++length == shape.max_context) {
      Check(table.Free(0), state);
      Check(table.Create(0), state);
      length = 0;
    }
  }
  state.SetItemsProcessed(state.iterations());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_AppendTokenAllLayers);

// Fork of a 4096-token (256-block) sequence and free of the child: 256 AddRefs + 256 Releases.
void BM_ForkFree(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  const int tokens = static_cast<int>(state.range(0));
  BlockAllocator allocator(shape.max_blocks_per_sequence() + 1);
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  Check(table.Create(0), state);
  Check(table.Append(0, kAll, tokens, &copies).status(), state);
  for (auto _ : state) {
    Status a = table.Fork(0, 1);
    benchmark::DoNotOptimize(a);
    Status b = table.Free(1);
    benchmark::DoNotOptimize(b);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["blocks_shared"] = static_cast<double>(table.Blocks(0)->size());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_ForkFree)->Arg(4096)->Arg(4095);

// Beam step: fork a 4095-token sequence (partial last block), append one token on every layer
// to the child (one copy-on-write), free the child.
void BM_ForkCopyOnWriteFree(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  BlockAllocator allocator(shape.max_blocks_per_sequence() + 2);
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  Check(table.Create(0), state);
  Check(table.Append(0, kAll, shape.max_context - 1, &copies).status(), state);
  for (auto _ : state) {
    copies.clear();
    Status a = table.Fork(0, 1);
    StatusOr<TokenPosition> token = table.AppendToken(1, kAll, &copies);
    Status b = table.Free(1);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(token);
    benchmark::DoNotOptimize(b);
  }
  if (copies.size() != 1) state.SkipWithError("expected one copy-on-write per step");
  state.SetItemsProcessed(state.iterations());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_ForkCopyOnWriteFree);

// MetadataBytes() with `range(0)` live 4096-token sequences, and the overhead it reports.
void BM_MetadataBytes(benchmark::State& state) {
  const ModelShape shape = BenchShape();
  const int sequences = static_cast<int>(state.range(0));
  BlockAllocator allocator(sequences * shape.max_blocks_per_sequence());
  SequenceTable table(shape, &allocator);
  std::vector<BlockCopy> copies;
  for (int s = 0; s < sequences; ++s) {
    Check(table.Create(s), state);
    Check(table.Append(s, kAll, shape.max_context, &copies).status(), state);
  }
  for (auto _ : state) {
    std::size_t bytes = table.MetadataBytes();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations());
  ReportCounters(state, table, allocator);
}
BENCHMARK(BM_MetadataBytes)->Arg(64);

}  // namespace
}  // namespace attnrt::kvcache

BENCHMARK_MAIN();
