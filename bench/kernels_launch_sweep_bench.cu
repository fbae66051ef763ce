// Study 4: launch-configuration sweep of the split-KV decode kernels. Knobs: the kernel family
// (tensor cores; SIMT for FP16 caches), warps per CTA (tensor cores: 2, 4, 8; the CTA's KV tile is
// 16 tokens per warp), the split target (CTAs per SM wanted, or the occupancy rule) and the
// shortest split. For each (head dim, group, work items = B * Hkv) it times every configuration
// that yields a distinct launch at several context lengths (CUDA-graph replays of back-to-back
// steps, append + decode by default as serving runs them, cycling over input sets larger than L2
// with blocks placed by the KV cache's allocator; CUDA events; median of 7 replays after 2
// warm-ups), and picks for the (D, G, work) and each context class (plans of max_kv_length <=
// kSplitKvShortContext, planned and scored at the contexts up to it; the rest) the family and
// configuration with the best geometric mean of time / (best time at that length) over the
// class's contexts; batches of 8 or more rows also run a skewed batch (one row at 32768
// tokens, the rest at 512: "context" -32768 in the JSON), scored with the long class. The
// default (tensor cores, default configuration) is kept unless another is more than 1% better.
// --table-out writes the picks as a launch table (kernels/launch_tables/<model>_fp16.inc for this
// GPU's model: what variant "split_kv" reads on it; a new model also needs its TunedGpu);
// --json-out writes every timing for bench/studies/make_gemm_report.py.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "kernels/decode.h"
#include "kernels/decode_internal.h"
#include "tools/flags.h"

namespace attnrt::bench {
namespace {

using kernels::SplitKvFamily;
using kernels::SplitKvLaunchConfig;

constexpr SplitKvFamily kTc = SplitKvFamily::kTensorCore;
constexpr SplitKvFamily kSimt = SplitKvFamily::kSimt;

// A family and its launch configuration: one candidate of the sweep.
struct Candidate {
  SplitKvFamily family;
  SplitKvLaunchConfig config;
  bool operator==(const Candidate&) const = default;
  auto key() const {
    return std::make_tuple(static_cast<int>(family), config.warps, config.ctas_per_sm,
                           config.min_split_tokens);
  }
};
const Candidate kDefaultCandidate{kTc, SplitKvLaunchConfig{}};

std::string ToString(const Candidate& c) {
  return std::string(kernels::SplitKvVariantName(c.family)) + " " + kernels::ToString(c.config);
}
constexpr std::size_t kRotationBytes = 128ull << 20;  // > 2.5x the H100's 50 MB L2
constexpr std::size_t kMaxSetBytes = 2ull << 30;      // KV bytes of one input set
constexpr int kMaxSets = 64;
constexpr int kMinSteps = 20;
constexpr int kMaxContext = 65536;  // the model's max_context (caps splits as in serving)
constexpr double kKeepDefaultWithin = 1.01;

struct Family {  // a (D, Hq, Hkv) and the batch sizes swept for it
  int head_dim, q_heads, kv_heads;
  std::vector<int> batches;
};

std::vector<Family> Families(bool quick) {
  if (quick) return {{128, 32, 8, {1, 32}}, {64, 8, 8, {32}}};
  return {
      {128, 32, 32, {1, 4, 8, 16, 32, 64, 128}},  // MHA (Llama-2 7B)
      {128, 32, 16, {1, 8, 32, 128}},         // G = 2
      {128, 32, 8, {1, 4, 16, 32, 64, 256}},  // G = 4 (Llama-3 8B)
      {128, 64, 8, {1, 4, 16, 32, 64, 256}},  // G = 8 (Llama-3 70B)
      {64, 8, 8, {1, 4, 16, 32, 128, 512}},
      {64, 32, 8, {1, 8, 32, 128}},
      {256, 16, 16, {1, 4, 16, 64}},
      {256, 16, 8, {1, 4, 16, 32, 64}},       // G = 2 at D = 256 (sdpa_compare's D = 256 shape)
  };
}

// The short class is scored at 256-4096 tokens, the long one at 16K and 64K. 512 and 2048 are
// swept since 2026-11-29: with 256, 1024 and 4096 alone a B=1 row's shortest split (256 or 512
// tokens) was decided at T=1024 by a hair, while at T=512 one split ran 7.7 us against two's 8.9
// (bench/NOTES.md, "where a small-batch step's time goes").
std::vector<int> Contexts(bool quick) {
  return quick ? std::vector<int>{512, 8192}
               : std::vector<int>{256, 512, 1024, 2048, 4096, 16384, 65536};
}

// "128:32:8:32,33;64:8:8:32" -> families (head dim, q heads, kv heads, batches); false on a
// malformed list.
bool ParseFamilies(const std::string& text, std::vector<Family>* out) {
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ';')) {
    Family f{};
    char sep[3] = {};
    std::stringstream one(item);
    one >> f.head_dim >> sep[0] >> f.q_heads >> sep[1] >> f.kv_heads >> sep[2];
    if (!one || sep[0] != ':' || sep[1] != ':' || sep[2] != ':') return false;
    std::string batch;
    while (std::getline(one, batch, ',')) {
      try {
        f.batches.push_back(std::stoi(batch));
      } catch (...) {
        return false;
      }
      if (f.batches.back() < 1) return false;
    }
    if (f.batches.empty() || f.kv_heads < 1 || f.q_heads % f.kv_heads != 0) return false;
    out->push_back(f);
  }
  return !out->empty();
}

// "4096,16384" -> contexts; false on a malformed list.
bool ParseContexts(const std::string& text, std::vector<int>* out) {
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ',')) {
    try {
      out->push_back(std::stoi(item));
    } catch (...) {
      return false;
    }
    if (out->back() < 1 || out->back() > kMaxContext) return false;
  }
  return !out->empty();
}

// The SIMT family has one CTA shape (warps is ignored: swept at the default only); an FP8 cache
// is swept on tensor cores alone (dispatch never sends an FP8 shape to SIMT).
std::vector<Candidate> Candidates(int head_dim, KvCacheType kv_cache_type) {
  std::vector<Candidate> out;
  for (SplitKvFamily family : {kTc, kSimt}) {
    if (family == kSimt && kv_cache_type != KvCacheType::kFp16) continue;
    for (int warps : {2, 4, 8}) {
      if (family == kSimt && warps != SplitKvLaunchConfig{}.warps) continue;
      for (int ctas : {0, 1, 2, 4, 8, 16}) {
        for (int min_split : {128, 256, 512, 1024}) {
          const SplitKvLaunchConfig c{warps, ctas, min_split};
          if (kernels::CheckLaunchConfig(family, c, head_dim, kv_cache_type).ok()) {
            out.push_back({family, c});
          }
        }
      }
    }
  }
  return out;
}

ModelShape ShapeOf(const Family& f, KvCacheType kv_cache_type) {
  ModelShape s;
  s.kv_cache_type = kv_cache_type;  // FP8: scales 1.0 (DeviceDecodeBatch)
  s.num_layers = 1;
  s.num_q_heads = f.q_heads;
  s.num_kv_heads = f.kv_heads;
  s.head_dim = f.head_dim;
  s.block_size = 16;
  s.max_context = kMaxContext;
  return s;
}

// The split-KV plan of candidate `c` for `capacity` batch rows on this device.
// Planned for `context` as the runtime plans it (the context class holding it).
kernels::DecodePlan PlanCandidate(const ModelShape& shape, int capacity, const Candidate& c,
                                  kernels::DecodeStep step, int context) {
  const StatusOr<kernels::DecodeDevice> device = kernels::CurrentDecodeDevice();
  CheckOk(device, "CurrentDecodeDevice");
  StatusOr<kernels::DecodePlan> plan =
      kernels::PlanSplitKv(c.family, c.config, {shape, capacity, context, step, *device});
  CheckOk(plan, "PlanSplitKv");
  return *plan;
}

// Median µs per decode of `plan` over the input sets (tools::MedianRunUs: one graph of at
// least kMinSteps runs, 2 warm-up replays, the median of 7).
double TimePlan(const kernels::DecodePlan& plan,
                const std::vector<std::unique_ptr<DeviceDecodeBatch>>& sets, cudaStream_t stream) {
  tools::DeviceMemory ws;
  CheckOk(tools::AllocateDevice(plan.workspace_bytes, &ws), "workspace");
  CheckOk(kernels::PrepareDecodeWorkspace(plan, {ws.get(), plan.workspace_bytes}, stream),
          "PrepareDecodeWorkspace");
  const tools::RunTiming timing{.min_steps = kMinSteps, .warmups = 2, .replays = 7};
  const StatusOr<double> us = tools::MedianRunUs(plan, sets, {ws.get(), plan.workspace_bytes},
                                                 {stream, nullptr}, timing);
  CheckOk(us, "split_kv run");
  return *us;
}

struct Timing {
  int head_dim, group, batch, kv_heads, context;
  Candidate candidate;
  kernels::SplitKvPlan plan;
  double us, tbps;
};

std::string Json(const Candidate& candidate) {
  const SplitKvLaunchConfig& c = candidate.config;
  std::ostringstream os;
  os << "{\"family\": \"" << kernels::SplitKvVariantName(candidate.family)
     << "\", \"warps\": " << c.warps << ", \"ctas_per_sm\": " << c.ctas_per_sm
     << ", \"min_split_tokens\": " << c.min_split_tokens << "}";
  return os.str();
}

// A skewed batch (serving's usual mix): row 0 at kSkewLong tokens, the others at kSkewShort.
// Its timings carry context = -kSkewLong; it is scored with the long class (its plan's).
constexpr int kSkewLong = 32768, kSkewShort = 512, kSkewMinBatch = 8;
constexpr int kSkewContext = -kSkewLong;

// The table row class of a context: kSplitKvShortContext for the short class, 0 for the rest.
int ClassOf(int context) { return context > 0 ? kernels::SplitKvRowClass(context) : 0; }

struct Pick {
  int head_dim, group, work, batch;
  int max_kv_length;  // the row class (ClassOf)
  Candidate candidate;
  double score, default_score;
};

int Run(int argc, char** argv) {
  std::string table_out, json_out, commit, cache_type = "fp16", families_text, contexts_text;
  std::string blocks = "allocator", step_text = "append";
  bool quick = false;
  tools::FlagSet flags(
      "kernels_launch_sweep_bench",
      "Study 4: sweeps the split-KV kernels' family (tensor cores or SIMT) and launch\n"
      "configuration (warps per CTA, split target, shortest split) per (head dim, group, batch,\n"
      "context) on this GPU, prints the best per shape and writes the per-(head dim, group, work)\n"
      "picks that variant split_kv reads.");
  flags.String("--table-out", &table_out,
               "write the picks here (kernels/launch_tables/<model>_fp16.inc)");
  flags.String("--json-out", &json_out, "write every timing and pick here as JSON");
  flags.String("--commit", &commit, "commit recorded in the outputs (the device copy has no .git)");
  flags.Bool("--quick", &quick, "two small families and two contexts (a smoke run, ~10 s)");
  flags.Choice("--kv-cache-type", &cache_type, {"fp16", "fp8_e4m3"},
               "KV cache the kernel reads (fp8_e4m3: its table is kernels/launch_tables/h100_fp8.inc)");
  flags.String("--families", &families_text,
               "sweep only these shapes: D:Hq:Hkv:B,B,...;... (e.g. 128:32:8:32,33); a probe, "
               "not for --table-out");
  flags.String("--contexts", &contexts_text, "sweep only these contexts: T,T,... (e.g. 4096)");
  flags.Choice("--blocks", &blocks, {"shuffled", "in-order", "allocator"},
               "the batches' block ids: scattered over the pool, each row's in order (what "
               "paging costs the kernel), or as the KV cache's allocator places them in serving");
  flags.Choice("--step", &step_text, {"append", "decode"},
               "what is timed: append + decode (what a serving step runs: the tensor-core kernel "
               "fuses the append, SIMT runs the append kernel first) or decode alone");
  if (const int rc = flags.Parse(argc, argv); rc != tools::FlagSet::kContinue) return rc;
  std::vector<Family> families = Families(quick);
  std::vector<int> contexts = Contexts(quick);
  if (!families_text.empty()) {
    families.clear();
    if (!ParseFamilies(families_text, &families)) {
      std::fprintf(stderr, "kernels_launch_sweep_bench: --families %s: expected D:Hq:Hkv:B,B;... "
                   "with Hq a multiple of Hkv and B >= 1\n", families_text.c_str());
      return 2;
    }
  }
  if (!contexts_text.empty()) {
    contexts.clear();
    if (!ParseContexts(contexts_text, &contexts)) {
      std::fprintf(stderr, "kernels_launch_sweep_bench: --contexts %s: expected T,T,... within "
                   "1..%d\n", contexts_text.c_str(), kMaxContext);
      return 2;
    }
  }
  if (!table_out.empty() && (!families_text.empty() || !contexts_text.empty() ||
                             blocks != "allocator" || step_text != "append")) {
    std::fprintf(stderr, "kernels_launch_sweep_bench: --table-out needs the sweep's own shapes, "
                 "the allocator's blocks and append + decode (no --families, --contexts, other "
                 "--blocks or --step)\n");
    return 2;
  }
  const kernels::DecodeStep step =
      step_text == "decode" ? kernels::DecodeStep::kDecode : kernels::DecodeStep::kAppendAndDecode;
  const KvCacheType kv_cache_type =
      cache_type == "fp8_e4m3" ? KvCacheType::kFp8E4M3 : KvCacheType::kFp16;
  const double element_bytes = kv_cache_type == KvCacheType::kFp8E4M3 ? 1.0 : 2.0;

  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "kernels_launch_sweep_bench: no CUDA device; the sweep needs a GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "properties");
  const double read_tbps = MeasureReadBandwidth() / 1e12;
  const int sms = SmCount();
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("device %s, %d SMs, read ceiling %.3f TB/s, %s, commit %s, KV cache %s, %s blocks, "
              "%s\n",
              prop.name, sms, read_tbps, date, commit.empty() ? "unknown" : commit.c_str(),
              cache_type.c_str(), blocks.c_str(),
              step == kernels::DecodeStep::kDecode ? "decode" : "append + decode");
  // The same read in shuffled chunks of a KV block's head slice (block_size * D * element bytes).
  std::printf("paged read ceiling (shuffled chunks):");
  for (const std::size_t chunk : {1024, 2048, 4096, 8192, 16384}) {
    const StatusOr<double> bw = kernels::MeasurePagedReadBandwidth(chunk);
    CheckOk(bw, "MeasurePagedReadBandwidth");
    std::printf(" %zu B %.3f TB/s (%.3f);", chunk, *bw / 1e12, *bw / 1e12 / read_tbps);
  }
  std::printf("\n");
  const tools::BlockOrder order = blocks == "in-order"    ? tools::BlockOrder::kInOrder
                                  : blocks == "allocator" ? tools::BlockOrder::kAllocator
                                                          : tools::BlockOrder::kShuffled;

  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::vector<Timing> timings;
  std::vector<Pick> picks;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t fi = 0; fi < families.size(); ++fi) {
    const Family& fam = families[fi];
    const ModelShape shape = ShapeOf(fam, kv_cache_type);
    const int group = shape.group_size();
    const std::vector<Candidate> candidates = Candidates(fam.head_dim, kv_cache_type);
    for (int batch : fam.batches) {
      std::map<int, double> best_at;  // context -> best µs
      std::vector<std::size_t> rows_of_batch;
      // The uniform batches at each context, then (the full sweep, B >= kSkewMinBatch) the
      // skewed one.
      std::vector<int> cases = contexts;
      if (families_text.empty() && contexts_text.empty() && !quick && batch >= kSkewMinBatch) {
        cases.push_back(kSkewContext);
      }
      for (int context : cases) {
        std::vector<int> lengths(batch, context);
        if (context == kSkewContext) {
          lengths.assign(batch, kSkewShort);
          lengths[0] = kSkewLong;
        }
        double tokens = 0;
        for (int len : lengths) tokens += len;
        const int longest = *std::max_element(lengths.begin(), lengths.end());
        const double kv_bytes = 2.0 * element_bytes * fam.kv_heads * tokens * fam.head_dim;
        if (kv_bytes > kMaxSetBytes) continue;
        const double qo_bytes = 2.0 * 2.0 * batch * fam.q_heads * fam.head_dim;
        const int n_sets = std::clamp(static_cast<int>(std::ceil(kRotationBytes / kv_bytes)), 2,
                                      kMaxSets);
        std::vector<std::unique_ptr<DeviceDecodeBatch>> sets;
        for (int k = 0; k < n_sets; ++k) {
          sets.push_back(MakeDeviceDecodeBatch(shape, lengths, stream, 100 + k, order));
        }
        // Configurations of a family with the same grid and the same split of this context are
        // one kernel launch: time it once.
        std::map<std::tuple<int, int, int, int, int, int, int>, double> timed;
        double best = 1e30;
        for (const Candidate& c : candidates) {
          const kernels::DecodePlan decode_plan = PlanCandidate(shape, batch, c, step, longest);
          const kernels::SplitKvPlan& plan = decode_plan.split_kv;
          const kernels::RowSplit ss = kernels::SplitRow(longest, plan);
          const kernels::RowSplit rest = kernels::SplitRow(lengths.back(), plan);
          const auto key = std::make_tuple(static_cast<int>(c.family), c.config.warps,
                                           plan.max_splits, ss.num_splits, ss.tiles_per_split,
                                           rest.num_splits, rest.tiles_per_split);
          auto it = timed.find(key);
          if (it == timed.end()) it = timed.emplace(key, TimePlan(decode_plan, sets, stream)).first;
          const double us = it->second;
          best = std::min(best, us);
          rows_of_batch.push_back(timings.size());
          timings.push_back({fam.head_dim, group, batch, fam.kv_heads, context, c, plan, us,
                             (kv_bytes + qo_bytes) / (us * 1e-6) / 1e12});
        }
        best_at[context] = best;
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string what = context == kSkewContext
                                     ? "skewed (1 x " + std::to_string(kSkewLong) + ", " +
                                           std::to_string(batch - 1) + " x " +
                                           std::to_string(kSkewShort) + ")"
                                     : "T=" + std::to_string(context);
        std::fprintf(stderr,
                     "[%zu/%zu %6.0fs] D=%d G=%d B=%d %s: %zu kernels timed, best %.2f us "
                     "(%.2f TB/s)\n",
                     fi + 1, families.size(), secs, fam.head_dim, group, batch, what.c_str(),
                     timed.size(), best, (kv_bytes + qo_bytes) / (best * 1e-6) / 1e12);
      }
      if (best_at.empty()) continue;
      // Score each candidate over the contexts of each class: geometric mean of time / best.
      for (const int row_class : {0, kernels::kSplitKvShortContext}) {
        std::map<decltype(kDefaultCandidate.key()), std::pair<Candidate, std::pair<double, int>>>
            log_sum;
        for (std::size_t i : rows_of_batch) {
          const Timing& t = timings[i];
          if (ClassOf(t.context) != row_class) continue;
          auto& entry = log_sum.try_emplace(t.candidate.key(), t.candidate, std::pair{0.0, 0})
                            .first->second;
          entry.second.first += std::log(t.us / best_at[t.context]);
          ++entry.second.second;
        }
        if (log_sum.empty()) continue;
        Pick pick{fam.head_dim, group, batch * fam.kv_heads, batch, row_class, kDefaultCandidate,
                  1e30, 1e30};
        for (const auto& [key, entry] : log_sum) {
          const auto& [c, sc] = entry;
          const double score = std::exp(sc.first / sc.second);
          if (c == kDefaultCandidate) pick.default_score = score;
          if (score < pick.score) {
            pick.score = score;
            pick.candidate = c;
          }
        }
        if (pick.default_score <= pick.score * kKeepDefaultWithin) {
          pick.candidate = kDefaultCandidate;
          pick.score = pick.default_score;
        }
        picks.push_back(pick);
        std::printf("D=%-3d G=%d B=%-3d work=%-4d %-5s contexts: pick %-58s score %.3f (default "
                    "%.3f)\n",
                    pick.head_dim, pick.group, pick.batch, pick.work,
                    row_class == 0 ? "long" : "short", ToString(pick.candidate).c_str(),
                    pick.score, pick.default_score);
      }
    }
  }

  // Best configuration per shape.
  std::printf("\n%-4s %-2s %-4s %-6s %-58s %9s %7s %9s %7s\n", "D", "G", "B", "T", "best", "us",
              "TB/s", "default", "gain");
  std::map<std::tuple<int, int, int, int>, std::pair<const Timing*, const Timing*>> per_shape;
  for (const Timing& t : timings) {
    auto& [best, def] = per_shape[{t.head_dim, t.group, t.batch, t.context}];
    if (best == nullptr || t.us < best->us) best = &t;
    if (t.candidate == kDefaultCandidate) def = &t;
  }
  for (const auto& [key, bd] : per_shape) {
    const auto& [best, def] = bd;
    std::printf("%-4d %-2d %-4d %-6d %-58s %9.2f %7.3f %9.2f %6.3fx\n", std::get<0>(key),
                std::get<1>(key), std::get<2>(key), std::get<3>(key),
                ToString(best->candidate).c_str(), best->us, best->tbps, def->us,
                def->us / best->us);
  }

  std::sort(picks.begin(), picks.end(), [](const Pick& a, const Pick& b) {
    return std::tie(a.head_dim, a.group, a.max_kv_length, a.work) <
           std::tie(b.head_dim, b.group, b.max_kv_length, b.work);
  });
  if (!table_out.empty()) {
    std::ofstream f(table_out);
    f << "// Tuned split-KV kernel family and launch configuration"
      << (kv_cache_type == KvCacheType::kFp8E4M3 ? " over an FP8 E4M3 KV cache" : "")
      << ", one row per\n"
         "// {head_dim, group, min_work, {warps, ctas_per_sm, min_split_tokens}, family,\n"
         "// max_kv_length}: used for work items (capacity * num_kv_heads) >= min_work up to the\n"
         "// next row of the same (D, G, max_kv_length), in plans of that context class (8192:\n"
         "// max_kv_length <= 8192, scored at the contexts <= 8192; 0: the rest).\n"
         "// Written by bench/kernels_launch_sweep_bench --kv-cache-type "
      << cache_type << " --table-out; do not edit by hand.\n"
      << "// " << prop.name << ", " << date << ", commit " << (commit.empty() ? "unknown" : commit)
      << ", " << blocks << " blocks, append + decode. Score: geometric mean over contexts of "
         "time / best time at that context.\n";
    // Boundaries halfway (geometrically) between swept work counts; a row equal to the one below
    // it is left out.
    for (std::size_t i = 0; i < picks.size(); ++i) {
      const Pick& p = picks[i];
      const bool first = i == 0 || picks[i - 1].head_dim != p.head_dim ||
                         picks[i - 1].group != p.group ||
                         picks[i - 1].max_kv_length != p.max_kv_length;
      int min_work = 1;
      if (!first) {
        if (picks[i - 1].candidate == p.candidate) continue;
        min_work = static_cast<int>(std::lround(std::sqrt(double(picks[i - 1].work) * p.work)));
      }
      const SplitKvLaunchConfig& c = p.candidate.config;
      char line[240];
      std::snprintf(line, sizeof line,
                    "{%d, %d, %d, {%d, %d, %d}, SplitKvFamily::%s, %d},  // swept at work %d "
                    "(B=%d): score %.3f, default %.3f\n",
                    p.head_dim, p.group, min_work, c.warps, c.ctas_per_sm, c.min_split_tokens,
                    p.candidate.family == kSimt ? "kSimt" : "kTensorCore", p.max_kv_length,
                    p.work, p.batch, p.score, p.default_score);
      f << line;
    }
    // Where the table goes: the FP16 table of this GPU's model; one FP8 table serves every model.
    const kernels::TunedGpu model = kernels::TunedGpuFor(prop.name);
    const bool own_model = model != kernels::TunedGpu::kH100 ||
                           std::string(prop.name).find("H100") != std::string::npos;
    const std::string adopt =
        kv_cache_type == KvCacheType::kFp8E4M3
            ? std::string("kernels/launch_tables/h100_fp8.inc (every model reads it)")
            : "kernels/launch_tables/" + std::string(kernels::TunedGpuName(model)) + "_fp16.inc" +
                  (own_model ? "" : " (the H100's: this GPU has no table of its own; add a "
                                    "kernels::TunedGpu for it)");
    std::printf("\nwrote %s; to adopt it, copy it to %s and rebuild\n", table_out.c_str(),
                adopt.c_str());
  }
  if (!json_out.empty()) {
    std::ofstream f(json_out);
    f << "{\n  \"device\": \"" << prop.name << "\", \"sms\": " << sms << ", \"date\": \"" << date
      << "\", \"commit\": \"" << (commit.empty() ? "unknown" : commit)
      << "\", \"kv_cache_type\": \"" << cache_type << "\", \"blocks\": \"" << blocks
      << "\", \"step\": \"" << step_text
      << "\", \"read_ceiling_tbps\": " << read_tbps
      << ",\n  \"timings\": [\n";
    for (std::size_t i = 0; i < timings.size(); ++i) {
      const Timing& t = timings[i];
      f << "    {\"head_dim\": " << t.head_dim << ", \"group\": " << t.group
        << ", \"batch\": " << t.batch << ", \"kv_heads\": " << t.kv_heads
        << ", \"context\": " << t.context << ", \"config\": " << Json(t.candidate)
        << ", \"max_splits\": " << t.plan.max_splits << ", \"us\": " << t.us
        << ", \"tbps\": " << t.tbps << "}" << (i + 1 < timings.size() ? "," : "") << "\n";
    }
    f << "  ],\n  \"picks\": [\n";
    for (std::size_t i = 0; i < picks.size(); ++i) {
      const Pick& p = picks[i];
      f << "    {\"head_dim\": " << p.head_dim << ", \"group\": " << p.group
        << ", \"batch\": " << p.batch << ", \"work\": " << p.work
        << ", \"max_kv_length\": " << p.max_kv_length << ", \"config\": " << Json(p.candidate) << ", \"score\": " << p.score << ", \"default_score\": "
        << p.default_score << "}" << (i + 1 < picks.size() ? "," : "") << "\n";
    }
    f << "  ]\n}\n";
    std::printf("wrote %s\n", json_out.c_str());
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) { return attnrt::bench::Run(argc, argv); }
