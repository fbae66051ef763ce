// How consecutive the block allocator keeps each sequence's blocks under serving-like churn
// (tools/kv_churn.h: sequences prefilled with random prompts decode round-robin one token at a
// time, each freed at its target length and replaced), and what the bookkeeping costs on the
// host. Per pool size (a factor over the blocks the live sequences hold on average): the
// fraction of adjacent table entries that are consecutive ascending (kvcache::BlockLayout,
// averaged over samples of every live table), blocks per consecutive run, and ns per
// SequenceTable call and per block allocated or released, timed over the churn rounds alone.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "tools/flags.h"
#include "tools/kv_churn.h"
#include "tools/progress.h"

namespace attnrt::bench {
namespace {

struct Row {
  double factor = 0;
  std::int32_t pool_blocks = 0;
  double utilization = 0;  // mean over samples of blocks in use / pool
  kvcache::BlockLayout layout;  // summed over samples
  tools::ChurnCounts counts;
  double seconds = 0;  // in Step() only
};

int Run(int argc, char** argv) {
  tools::ChurnConfig c;
  int rounds = 50000;
  int warmup_rounds = 2000;
  int sample_every = 100;
  std::vector<double> factors = {1.1, 1.5, 3.0};
  std::vector<int> prompt = {c.min_prompt, c.max_prompt};
  std::vector<int> output = {c.min_output, c.max_output};
  tools::FlagSet flags("kvcache_layout_bench",
                       "Block layout (consecutive ascending table entries) and host cost of the KV "
                       "cache's block allocator under churn: sequences prefilled with random prompts "
                       "decode round-robin, each freed at its target length and replaced.");
  flags.Int("--sequences", &c.sequences, "live sequences (slots)", 1, 1 << 16);
  flags.List("--prompt", &prompt, "prompt tokens MIN,MAX (uniform)");
  flags.List("--output", &output, "decode tokens MIN,MAX before a sequence finishes (uniform)");
  flags.Int("--block-size", &c.block_size, "tokens per block", 1, 1024);
  flags.Int("--max-context", &c.max_context, "longest sequence, tokens", 2, 1 << 24);
  flags.List("--pool-factors", &factors,
             "pool sizes, each a factor over the blocks the live sequences hold on average "
             "(1.1: nearly full, preemptions; 3: mostly free)");
  flags.Int("--rounds", &rounds, "measured rounds (each live sequence appends one token)", 1, 1 << 30);
  flags.Int("--warmup-rounds", &warmup_rounds, "rounds before the first sample and the timing", 0,
            1 << 30);
  flags.Int("--sample-every", &sample_every, "rounds between layout samples", 1, 1 << 30);
  flags.Int("--seed", &c.seed, "workload seed (the same calls whatever ids the allocator hands out)",
            0, 1e15);
  flags.Footer("Output: one line per pool factor. consecutive = adjacent table entries with "
               "b[i+1] == b[i] + 1 over all adjacent pairs (1.0: every table in order); run = blocks "
               "per consecutive run; ns/call = per SequenceTable Create/Append/AppendToken/Free; "
               "ns/block = the same time per block allocated or released.");
  if (const int rc = flags.Parse(argc, argv); rc != tools::FlagSet::kContinue) return rc;
  if (prompt.size() != 2 || output.size() != 2) {
    std::fprintf(stderr, "kvcache_layout_bench: --prompt and --output take MIN,MAX (see --help)\n");
    return 2;
  }
  c.min_prompt = prompt[0];
  c.max_prompt = prompt[1];
  c.min_output = output[0];
  c.max_output = output[1];
  c.pool_blocks = 1;
  if (const Status s = c.Validate(); !s.ok()) {
    std::fprintf(stderr, "kvcache_layout_bench: %s (see --help)\n", s.ToString().c_str());
    return 2;
  }

  std::printf("churn: %d sequences, prompt [%d, %d], output [%d, %d] tokens, block size %d, "
              "max context %d, %d + %d rounds, seed %llu\n",
              c.sequences, c.min_prompt, c.max_prompt, c.min_output, c.max_output, c.block_size,
              c.max_context, warmup_rounds, rounds, static_cast<unsigned long long>(c.seed));
  std::printf("%7s %8s %6s %9s %9s %9s %11s %8s %8s %9s\n", "factor", "pool", "used", "prefills",
              "preempted", "waiting", "consecutive", "run", "ns/call", "ns/block");
  tools::Progress progress("churn", static_cast<double>(factors.size()) * (warmup_rounds + rounds));
  double done = 0;
  for (double factor : factors) {
    Row row;
    row.factor = factor;
    c.pool_blocks = tools::PoolBlocksFor(c, factor);
    row.pool_blocks = c.pool_blocks;
    StatusOr<std::unique_ptr<tools::KvChurn>> made = tools::KvChurn::Create(c);
    if (!made.ok()) {
      std::fprintf(stderr, "kvcache_layout_bench: %s\n", made.status().ToString().c_str());
      return 1;
    }
    tools::KvChurn& churn = **made;
    int samples = 0;
    tools::ChurnCounts at_start;
    for (int r = 0; r < warmup_rounds + rounds; ++r) {
      if (r == warmup_rounds) at_start = churn.counts();
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = churn.Step();
      if (r >= warmup_rounds) {
        row.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (!s.ok()) {
        std::fprintf(stderr, "kvcache_layout_bench: round %d: %s\n", r, s.ToString().c_str());
        return 1;
      }
      if (r >= warmup_rounds && (r - warmup_rounds) % sample_every == 0) {
        row.layout.Add(churn.Layout());
        row.utilization += 1.0 - static_cast<double>(churn.allocator().num_free()) / c.pool_blocks;
        ++samples;
      }
      if ((++done, r % 1000 == 0)) {
        progress.Update(done, "factor " + std::to_string(factor));
      }
    }
    const tools::ChurnCounts& end = churn.counts();
    row.counts.prefills = end.prefills - at_start.prefills;
    row.counts.preempted = end.preempted - at_start.preempted;
    row.counts.waiting = end.waiting - at_start.waiting;
    row.counts.table_calls = end.table_calls - at_start.table_calls;
    const double blocks = static_cast<double>(end.blocks_allocated - at_start.blocks_allocated +
                                              end.blocks_released - at_start.blocks_released);
    row.utilization /= std::max(samples, 1);
    progress.Done();
    std::printf("%7.2f %8d %5.0f%% %9lld %9lld %9lld %11.4f %8.1f %8.1f %9.1f\n", row.factor,
                row.pool_blocks, 100.0 * row.utilization,
                static_cast<long long>(row.counts.prefills),
                static_cast<long long>(row.counts.preempted),
                static_cast<long long>(row.counts.waiting), row.layout.consecutive_fraction(),
                row.layout.mean_run_blocks(),
                row.seconds * 1e9 / std::max<double>(1.0, static_cast<double>(row.counts.table_calls)),
                row.seconds * 1e9 / std::max(1.0, blocks));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) { return attnrt::bench::Run(argc, argv); }
