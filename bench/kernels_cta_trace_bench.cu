// Where a split-KV decode step's time goes, CTA by CTA: the tensor-core kernel stamps its phases
// (kernels::CtaTracePoint: entry, prerequisites done, length read, first tile, loops done,
// stored, exit) into DecodeRunContext::cta_trace, the runs are replayed back to back as in the
// decode benchmark (one CUDA graph of --steps runs cycling over input sets larger than L2), and
// this prints, per context: the step time (events, median of replays), the run's span (its
// first CTA released from griddepcontrol.wait to its last exit; the runs are launched with
// programmatic dependent launch, so CTAs of a run are resident and parked before the previous
// run ends), the release (the previous run's last exit to this run's first release), each
// phase's median over CTAs, the spread of the CTAs' loop ends, and what the last split of a row
// spends merging. The floor beside it: the step's K/V bytes at the read ceiling
// measured in the same process. Small batches are the point (issue 12: B=1 is start and tail).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include "bench/gpu_bench_util.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "kernels/read_ceiling.h"
#include "tools/device_decode.cuh"
#include "tools/flags.h"
#include "tools/percentile.h"

namespace attnrt::bench {
namespace {

using kernels::CtaTracePoint;

struct Options {
  int batch = 1;
  int q_heads = 32;
  int kv_heads = 32;
  int head_dim = 128;
  int block_size = 16;
  std::string contexts = "512,4096";
  std::string configs;  // "warps:ctas_per_sm:min_split_tokens,..." (tensor cores); empty: tuned
  std::string step = "decode";
  int steps = 24;
  int replays = 7;
  int rotation_mib = 256;
  std::string json_out;
  std::string commit = "unknown";
};

// "512,4096" (sep ',') or "8:0:256" (sep ':') -> integers >= 0; false on anything else.
bool ParseInts(const std::string& text, char sep, std::vector<int>* out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) {
    std::size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(item, &used);
    } catch (...) {
      return false;
    }
    if (used != item.size() || value < 0) return false;
    out->push_back(value);
  }
  return !out->empty();
}

// One traced configuration at one context: the figures this prints and writes.
struct TraceSummary {
  int context = 0;
  std::string config;  // "tuned" or warps:ctas_per_sm:min_split_tokens
  int grid_ctas = 0, working_ctas = 0, splits = 0;
  double step_us = 0, floor_us = 0;
  double span_us = 0, release_us = 0;  // medians over the traced runs
  // Phase medians over the working CTAs of every traced run, us: from the run's first release
  // to the CTA's; entry -> release (parked); release -> length; -> first tile; -> loops done;
  // -> stored; stored -> exit (the merging CTA and the others apart).
  double released_us = 0, parked_us = 0, length_us = 0, first_tile_us = 0, loops_us = 0,
         store_us = 0, exit_us = 0, merge_us = 0;
  double loops_done_p10_us = 0, loops_done_p50_us = 0, loops_done_max_us = 0;  // from release
  double last_stored_us = 0;  // from the first release, the run's latest stored
};

std::string Format(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

TraceSummary TraceOne(const Options& o, int context, const kernels::DecodePlan& plan,
                      const std::string& config_name, double read_bps, cudaStream_t stream) {
  const ModelShape& shape = plan.shape;
  const std::vector<int> lengths(o.batch, context);
  // Input sets: together at least --rotation-mib of K/V, so no run reads the last one's lines.
  std::vector<std::unique_ptr<DeviceDecodeBatch>> sets;
  sets.push_back(MakeDeviceDecodeBatch(shape, lengths, stream, 1, tools::BlockOrder::kAllocator));
  const double set_bytes = sets[0]->kv_bytes();
  const int n_sets = std::clamp(
      static_cast<int>((o.rotation_mib * 1048576.0 + set_bytes - 1) / set_bytes), 2, 64);
  for (int i = 1; i < n_sets; ++i) {
    sets.push_back(
        MakeDeviceDecodeBatch(shape, lengths, stream, 1 + i, tools::BlockOrder::kAllocator));
  }
  tools::DeviceMemory ws;
  CheckOk(tools::AllocateDevice(plan.workspace_bytes, &ws), "workspace");
  const kernels::DecodeWorkspace workspace{ws.get(), plan.workspace_bytes};
  CheckOk(kernels::PrepareDecodeWorkspace(plan, workspace, stream), "PrepareDecodeWorkspace");
  const dim3 grid = plan.decode.grid;
  const int ctas = static_cast<int>(grid.x * grid.y * grid.z);
  const tools::RunTiming timing{.min_steps = o.steps, .warmups = 2, .replays = o.replays};
  const int steps = tools::StepsPerReplay(timing, n_sets);
  const std::size_t slots = static_cast<std::size_t>(steps) * ctas * kernels::kCtaTracePoints;
  tools::DeviceMemory trace_mem;
  CheckOk(tools::AllocateDevice(slots * sizeof(unsigned long long), &trace_mem), "trace");
  auto* trace = static_cast<unsigned long long*>(trace_mem.get());
  // Zeroed once: a phase a CTA never reaches stays 0 (each replay rewrites the others).
  Check(cudaMemset(trace, 0, slots * sizeof(unsigned long long)), "memset");
  const kernels::DecodeVariant& variant = kernels::DefaultDecodeVariant();
  CheckOk(variant.run(plan, sets[0]->batch, sets[0]->pools, workspace, {stream, nullptr}),
          "eager run");  // module load, outside the capture
  Check(cudaStreamSynchronize(stream), "sync");
  // The decode benchmark's timing, each run of the graph stamping its own slice.
  const StatusOr<double> step_us = tools::MedianRunUs(
      plan, sets, workspace, {stream, nullptr}, timing,
      [&](int run, kernels::DecodeRunContext& run_context) {
        run_context.cta_trace =
            trace + static_cast<std::size_t>(run) * ctas * kernels::kCtaTracePoints;
      });
  CheckOk(step_us, "MedianRunUs");
  std::vector<unsigned long long> t(slots);
  Check(cudaMemcpy(t.data(), trace, slots * sizeof(unsigned long long), cudaMemcpyDeviceToHost),
        "trace copy");

  TraceSummary s;
  s.context = context;
  s.config = config_name;
  s.grid_ctas = ctas;
  s.splits = static_cast<int>(grid.x);
  s.step_us = *step_us;
  s.floor_us = sets[0]->step_bytes() / read_bps * 1e6;
  std::vector<double> span, release, released, parked, length, first, loops, store, exit_other, merge,
      done_p10, done_p50, done_max, last_stored;
  unsigned long long prev_end = 0;
  // Run 0 follows the previous replay and its timing event, not a run: skipped.
  for (int i = 0; i < steps; ++i) {
    const unsigned long long* r =
        t.data() + static_cast<std::size_t>(i) * ctas * kernels::kCtaTracePoints;
    unsigned long long first_release = ~0ull, last_exit = 0, latest_stored = 0;
    std::vector<double> done;
    int working = 0;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long* p = r + static_cast<std::size_t>(c) * kernels::kCtaTracePoints;
      if (p[kernels::kCtaPrerequisitesDone] != 0) {
        first_release = std::min(first_release, p[kernels::kCtaPrerequisitesDone]);
      }
      last_exit = std::max(last_exit, p[kernels::kCtaExit]);
    }
    // The split of a (row, kv head) that stored last is the one that merged the row (the grid's
    // x is the split: a row's splits are grid.x consecutive CTAs).
    std::vector<char> merging(ctas, 0);
    if (s.splits > 1) {
      for (int c0 = 0; c0 < ctas; c0 += s.splits) {
        int last = -1;
        for (int c = c0; c < c0 + s.splits; ++c) {
          const unsigned long long stored = r[static_cast<std::size_t>(c) * kernels::kCtaTracePoints + kernels::kCtaStored];
          if (stored != 0 && (last < 0 || stored > r[static_cast<std::size_t>(last) * kernels::kCtaTracePoints + kernels::kCtaStored])) last = c;
        }
        if (last >= 0) merging[last] = 1;
      }
    }
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long* p = r + static_cast<std::size_t>(c) * kernels::kCtaTracePoints;
      if (p[kernels::kCtaStored] == 0) continue;  // no work (padding or an unused split)
      ++working;
      auto us = [](unsigned long long a, unsigned long long b) { return (double(b) - double(a)) / 1e3; };
      if (i > 0) {
        released.push_back(us(first_release, p[kernels::kCtaPrerequisitesDone]));
        parked.push_back(us(p[kernels::kCtaEntry], p[kernels::kCtaPrerequisitesDone]));
        length.push_back(us(p[kernels::kCtaPrerequisitesDone], p[kernels::kCtaLengthRead]));
        first.push_back(us(p[kernels::kCtaLengthRead], p[kernels::kCtaFirstTile]));
        loops.push_back(us(p[kernels::kCtaFirstTile], p[kernels::kCtaLoopsDone]));
        store.push_back(us(p[kernels::kCtaLoopsDone], p[kernels::kCtaStored]));
        const double tail = us(p[kernels::kCtaStored], p[kernels::kCtaExit]);
        (merging[c] ? merge : exit_other).push_back(tail);
        done.push_back(us(first_release, p[kernels::kCtaLoopsDone]));
      }
      latest_stored = std::max(latest_stored, p[kernels::kCtaStored]);
    }
    s.working_ctas = working;
    if (i > 0) {
      span.push_back((double(last_exit) - double(first_release)) / 1e3);
      release.push_back((double(first_release) - double(prev_end)) / 1e3);
      std::sort(done.begin(), done.end());
      done_p10.push_back(tools::PercentileOfSorted(done, 0.1));
      done_p50.push_back(tools::PercentileOfSorted(done, 0.5));
      done_max.push_back(done.back());
      last_stored.push_back((double(latest_stored) - double(first_release)) / 1e3);
    }
    prev_end = last_exit;
  }
  auto med = [](const std::vector<double>& v) { return v.empty() ? 0.0 : Median(v); };
  s.span_us = med(span);
  s.release_us = med(release);
  s.released_us = med(released);
  s.parked_us = med(parked);
  s.length_us = med(length);
  s.first_tile_us = med(first);
  s.loops_us = med(loops);
  s.store_us = med(store);
  s.exit_us = med(exit_other);
  s.merge_us = med(merge);
  s.loops_done_p10_us = med(done_p10);
  s.loops_done_p50_us = med(done_p50);
  s.loops_done_max_us = med(done_max);
  s.last_stored_us = med(last_stored);
  return s;
}

int Run(int argc, char** argv) {
  Options o;
  tools::FlagSet flags(
      "kernels_cta_trace_bench",
      "Where a split-KV decode step's time goes, CTA by CTA (the tensor-core kernel's phase\n"
      "stamps, DecodeRunContext::cta_trace): step time, a run's span from its first CTA's\n"
      "release, the release after the previous run's end, each phase's median, the spread of the\n"
      "CTAs' loop ends, the merging split's tail; beside the step's bytes at the read ceiling\n"
      "measured in the same process. Needs a GPU.");
  flags.Int("--batch", &o.batch, "batch rows, every one at the context", 1, 4096);
  flags.Int("--q-heads", &o.q_heads, "query heads", 1, 256);
  flags.Int("--kv-heads", &o.kv_heads, "KV heads", 1, 256);
  flags.Int("--head-dim", &o.head_dim, "head dim (64, 128, 256)", 64, 256);
  flags.Int("--block-size", &o.block_size, "KV block size", 1, 256);
  flags.String("--contexts", &o.contexts, "contexts to trace: T,T,...");
  flags.String("--configs", &o.configs,
               "tensor-core launch configurations warps:ctas_per_sm:min_split_tokens,... "
               "(empty: the tuned table's choice)");
  flags.String("--step", &o.step, "decode or append (append + decode, the serving step)");
  flags.Int("--steps", &o.steps, "runs per graph replay (rounded up to the input sets)", 2, 4096);
  flags.Int("--replays", &o.replays, "timed replays (the median is reported)", 1, 1000);
  flags.Int("--rotation-mib", &o.rotation_mib, "K/V of the input sets together, MiB", 1, 65536);
  flags.String("--json-out", &o.json_out, "write the summaries here as JSON");
  flags.String("--commit", &o.commit, "commit recorded in the JSON");
  if (const int rc = flags.Parse(argc, argv); rc != tools::FlagSet::kContinue) return rc;
  if (o.step != "decode" && o.step != "append") {
    std::fprintf(stderr, "--step = %s, expected decode or append\n", o.step.c_str());
    return 2;
  }
  const kernels::DecodeStep step =
      o.step == "append" ? kernels::DecodeStep::kAppendAndDecode : kernels::DecodeStep::kDecode;
  std::vector<int> contexts;
  if (!ParseInts(o.contexts, ',', &contexts) ||
      *std::min_element(contexts.begin(), contexts.end()) < 1) {
    std::fprintf(stderr, "--contexts %s: expected T,T,... with every T >= 1\n",
                 o.contexts.c_str());
    return 2;
  }
  std::vector<std::pair<std::string, kernels::SplitKvLaunchConfig>> configs;
  {
    std::stringstream ss(o.configs);
    std::string item;
    while (std::getline(ss, item, ',')) {
      std::vector<int> v;
      if (!ParseInts(item, ':', &v) || v.size() != 3) {
        std::fprintf(stderr,
                     "--configs item '%s': expected warps:ctas_per_sm:min_split_tokens\n",
                     item.c_str());
        return 2;
      }
      configs.emplace_back(item, kernels::SplitKvLaunchConfig{
                                     .warps = v[0], .ctas_per_sm = v[1],
                                     .min_split_tokens = v[2]});
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "kernels_cta_trace_bench: no CUDA device; the trace needs a GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const StatusOr<double> read_bps = kernels::MeasureReadBandwidth();
  CheckOk(read_bps, "MeasureReadBandwidth");
  std::printf("%s, read ceiling %.3f TB/s (this process)\n", prop.name, *read_bps / 1e12);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::vector<TraceSummary> all;
  for (const int context : contexts) {
    ModelShape shape;
    shape.num_layers = 1;
    shape.num_q_heads = o.q_heads;
    shape.num_kv_heads = o.kv_heads;
    shape.head_dim = o.head_dim;
    shape.block_size = o.block_size;
    shape.max_context = context;
    std::vector<std::pair<std::string, kernels::DecodePlan>> plans;
    if (o.configs.empty()) {
      plans.emplace_back("tuned", PlanOrExit(kernels::DefaultDecodeVariant(), shape, o.batch,
                                             step, context));
    } else {
      const StatusOr<kernels::DecodeDevice> device = kernels::CurrentDecodeDevice();
      CheckOk(device, "CurrentDecodeDevice");
      for (const auto& [name, config] : configs) {
        StatusOr<kernels::DecodePlan> plan =
            kernels::PlanSplitKv(kernels::SplitKvFamily::kTensorCore, config,
                                 {shape, o.batch, context, step, *device});
        CheckOk(plan, "PlanSplitKv");
        plans.emplace_back(name, *plan);
      }
    }
    for (const auto& [name, plan] : plans) {
      if (plan.split_kv_family != kernels::SplitKvFamily::kTensorCore) {
        std::printf("T=%d %s: the SIMT family (not traced)\n", context, name.c_str());
        continue;
      }
      const TraceSummary s = TraceOne(o, context, plan, name, *read_bps, stream);
      std::printf(
          "B=%d H=%d/%d D=%d T=%d %s (warps %d, grid %d CTAs, %d working, %d splits): step %.2f us "
          "(floor %.2f, %.3fx), span %.2f, release %.2f | a CTA: released %.2f after the first "
          "(parked %.2f), then length %.2f, first tile %.2f, loops %.2f, store %.2f, exit %.2f, "
          "merging split %.2f | loops done p10 %.2f p50 %.2f max %.2f, last stored %.2f\n",
          o.batch, o.q_heads, o.kv_heads, o.head_dim, context, name.c_str(),
          plan.split_kv_config.warps, s.grid_ctas, s.working_ctas, s.splits, s.step_us,
          s.floor_us, s.step_us / s.floor_us, s.span_us, s.release_us, s.released_us, s.parked_us,
          s.length_us, s.first_tile_us, s.loops_us, s.store_us, s.exit_us, s.merge_us,
          s.loops_done_p10_us, s.loops_done_p50_us, s.loops_done_max_us, s.last_stored_us);
      std::fflush(stdout);
      all.push_back(s);
    }
  }
  cudaStreamDestroy(stream);
  if (!o.json_out.empty()) {
    FILE* f = std::fopen(o.json_out.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write --json-out %s\n", o.json_out.c_str());
      return 2;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"commit\": \"%s\", \"read_tbps\": %.4f, \"batch\": %d, "
                 "\"q_heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"step\": \"%s\", \"runs\": [",
                 prop.name, o.commit.c_str(), *read_bps / 1e12, o.batch, o.q_heads, o.kv_heads,
                 o.head_dim, o.step.c_str());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const TraceSummary& s = all[i];
      std::fprintf(f,
                   "%s\n {\"context\": %d, \"config\": \"%s\", \"grid_ctas\": %d, \"working_ctas\": %d, "
                   "\"splits\": %d, \"step_us\": %s, \"floor_us\": %s, \"span_us\": %s, \"release_us\": %s, "
                   "\"released_us\": %s, \"parked_us\": %s, \"length_us\": %s, \"first_tile_us\": %s, "
                   "\"loops_us\": %s, \"store_us\": %s, \"exit_us\": %s, \"merge_us\": %s, "
                   "\"loops_done_p10_us\": %s, \"loops_done_p50_us\": %s, \"loops_done_max_us\": %s, "
                   "\"last_stored_us\": %s}",
                   i == 0 ? "" : ",", s.context, s.config.c_str(), s.grid_ctas, s.working_ctas,
                   s.splits, Format(s.step_us).c_str(), Format(s.floor_us).c_str(),
                   Format(s.span_us).c_str(), Format(s.release_us).c_str(),
                   Format(s.released_us).c_str(), Format(s.parked_us).c_str(), Format(s.length_us).c_str(),
                   Format(s.first_tile_us).c_str(), Format(s.loops_us).c_str(),
                   Format(s.store_us).c_str(), Format(s.exit_us).c_str(),
                   Format(s.merge_us).c_str(), Format(s.loops_done_p10_us).c_str(),
                   Format(s.loops_done_p50_us).c_str(), Format(s.loops_done_max_us).c_str(),
                   Format(s.last_stored_us).c_str());
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) { return attnrt::bench::Run(argc, argv); }
