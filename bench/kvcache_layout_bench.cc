// How consecutive the block allocator keeps each sequence's blocks under serving-like churn
// (tools/kv_churn.h: sequences prefilled with random prompts decode round-robin one token at a
// time, each freed at its target length and replaced), and what the bookkeeping costs on the
// host. Per pool size (a factor over the blocks the live sequences hold on average): the
// fraction of adjacent table entries that are consecutive ascending (kvcache::BlockLayout,
// averaged over samples of every live table), blocks per consecutive run, and ns per
// SequenceTable call and per block allocated or released, timed over the churn rounds alone
// (median of --repeats runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "tools/flags.h"
#include "tools/kv_churn.h"
#include "tools/percentile.h"
#include "tools/progress.h"

namespace attnrt::bench {
namespace {

struct Row {
  std::int32_t pool_blocks = 0;
  double utilization = 0;       // mean over samples of blocks in use / pool
  kvcache::BlockLayout layout;  // summed over samples
  tools::ChurnCounts counts;    // of the measured rounds
  double seconds = 0;           // in Step() of the measured rounds only
};

// One churn run: `warmup` rounds, then `rounds` timed ones with a layout sample every
// `sample_every` (untimed). Progress counts rounds on from `*done`.
StatusOr<Row> RunChurn(const tools::ChurnConfig& c, int warmup, int rounds, int sample_every,
                       tools::Progress* progress, double* done, const std::string& note) {
  Row row;
  row.pool_blocks = c.pool_blocks;
  ATTNRT_ASSIGN_OR_RETURN(std::unique_ptr<tools::KvChurn> churn, tools::KvChurn::Create(c));
  int samples = 0;
  tools::ChurnCounts start;
  for (int r = 0; r < warmup + rounds; ++r) {
    if (r == warmup) start = churn->counts();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = churn->Step();
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) return InternalError("round " + std::to_string(r) + ": " + s.ToString());
    if (r < warmup) continue;
    row.seconds += std::chrono::duration<double>(t1 - t0).count();
    if ((r - warmup) % sample_every == 0) {
      row.layout.Add(churn->Layout());
      row.utilization += 1.0 - static_cast<double>(churn->allocator().num_free()) / c.pool_blocks;
      ++samples;
    }
    if (r % 1000 == 0) progress->Update(*done + r, note);
  }
  *done += warmup + rounds;
  const tools::ChurnCounts& end = churn->counts();
  row.counts.prefills = end.prefills - start.prefills;
  row.counts.preempted = end.preempted - start.preempted;
  row.counts.waiting = end.waiting - start.waiting;
  row.counts.table_calls = end.table_calls - start.table_calls;
  row.counts.blocks_allocated = end.blocks_allocated - start.blocks_allocated;
  row.counts.blocks_released = end.blocks_released - start.blocks_released;
  row.utilization /= std::max(samples, 1);
  return row;
}

int Run(int argc, char** argv) {
  tools::ChurnConfig c;
  int rounds = 50000;
  int warmup_rounds = 2000;
  int sample_every = 100;
  int repeats = 5;
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
  flags.Int("--repeats", &repeats,
            "runs of each pool factor (the same calls each time): the timing is their median", 1,
            1000);
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
  tools::Progress progress("churn", static_cast<double>(factors.size()) * repeats *
                                        (warmup_rounds + rounds));
  double done = 0;
  for (double factor : factors) {
    c.pool_blocks = tools::PoolBlocksFor(c, factor);
    std::vector<double> seconds;
    Row row;
    for (int rep = 0; rep < repeats; ++rep) {
      StatusOr<Row> run = RunChurn(c, warmup_rounds, rounds, sample_every, &progress, &done,
                                   "factor " + std::to_string(factor));
      if (!run.ok()) {
        std::fprintf(stderr, "kvcache_layout_bench: %s\n", run.status().ToString().c_str());
        return 1;
      }
      seconds.push_back(run->seconds);
      row = *run;  // the same layout and counts every time: the calls do not depend on time
    }
    progress.Done();
    const double t = tools::Median(seconds);
    const double calls = std::max<double>(1.0, static_cast<double>(row.counts.table_calls));
    const double blocks = std::max<double>(
        1.0, static_cast<double>(row.counts.blocks_allocated + row.counts.blocks_released));
    std::printf("%7.2f %8d %5.0f%% %9lld %9lld %9lld %11.4f %8.1f %8.1f %9.1f\n", factor,
                row.pool_blocks, 100.0 * row.utilization,
                static_cast<long long>(row.counts.prefills),
                static_cast<long long>(row.counts.preempted),
                static_cast<long long>(row.counts.waiting), row.layout.consecutive_fraction(),
                row.layout.mean_run_blocks(), t * 1e9 / calls, t * 1e9 / blocks);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) { return attnrt::bench::Run(argc, argv); }
