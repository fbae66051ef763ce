// check (installed as attnrt-check): the self-test a user runs on their machine. For every decode
// path (on the GPU: split_kv, split_kv_simt, simple, gemm; the CPU executor has one, its
// reference kernel) x KV cache type (--kv-cache-type) x head dim x block size x group size
// (H / Hkv), it runs a short decode through the public runtime on fresh random inputs (sequences
// of different lengths, partial blocks, several steps, batched) and compares every output with a
// dense FP64 attention over a host mirror of the cache (FP8: the codes read back). Prints a
// table with the max error per case and PASS/FAIL; a path that refuses the cache type is n/a.
// On the CUDA executor it then times every path x cache type x head dim x group on a
// bandwidth-bound decode (the kernels directly: tools/decode_speed.h) against the device's read
// ceiling measured in the same run (kernels/read_ceiling.h, the benchmarks' ceiling).
// Exit codes: 0 every case passed or was n/a (and every speed row measured); 1 a case failed (or
// could not run), or a speed measurement failed; 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attnrt/config.h>
#include <attnrt/runtime.h>
#include <attnrt/status.h>
#include <attnrt/version.h>
#include "kernels/read_ceiling.h"
#include "tools/decode_speed.h"
#include "tools/dense_reference.h"
#include "tools/flags.h"
#include "tools/kv_cache_support.h"
#include "tools/progress.h"

namespace {

using attnrt::Half;
using attnrt::KvCacheType;
using Clock = std::chrono::steady_clock;

// The speed rows' fixed shape: 32 query heads (Hkv = 32 / group) and one block size; the
// kernels' bandwidth barely depends on the block size, and the table stays one row per
// path x cache type x head dim x group.
constexpr int kSpeedQHeads = 32;
constexpr int kSpeedBlockSize = 16;
constexpr int kSpeedReplays = 7;

struct CheckOptions {
  std::string device = "auto";
  std::vector<std::string> paths;  // CUDA decode paths; empty: all
  std::vector<KvCacheType> kv_cache_types = {KvCacheType::kFp16};
  std::vector<int> head_dims = {64, 128, 256};
  std::vector<int> block_sizes = {8, 16, 32, 64};
  std::vector<int> groups = {1, 4, 8};
  int kv_heads = 2;
  int sequences = 6;
  int context = 200;
  int steps = 3;
  double tolerance = 2e-3;  // FP16 output rounding plus FP32 softmax (as the demo)
  std::uint64_t seed = 0;   // 0: a fresh one, printed
  std::string json;
  bool speed = true;        // the speed table, on the CUDA executor
  int speed_batch = 32;
  int speed_context = 4096;
};

// Every decode path of the CUDA executor (RuntimeOptions::decode_path).
const std::vector<std::string>& AllCudaPaths() {
  static const std::vector<std::string> paths = {"split_kv", "split_kv_simt", "simple", "gemm"};
  return paths;
}

std::string TypeName(KvCacheType type) { return std::string(attnrt::KvCacheTypeName(type)); }

int ParseArgs(int argc, char** argv, CheckOptions* o) {
  std::string paths;
  std::string kv_cache_type = "fp16";
  bool no_speed = false;
  attnrt::tools::FlagSet flags(
      "attnrt-check",
      "attnrt-check (build target: check): decode self-test. Every decode path x KV cache type x\n"
      "head dim x block size x group size on fresh random inputs through the runtime, each output\n"
      "compared with a dense FP64 reference over what the cache holds; a table of max errors,\n"
      "PASS/FAIL, exit 1 on any failure. On a GPU, then each path's decode speed (TB/s) against\n"
      "the device's read ceiling, both measured in the same run.");
  flags.Choice("--device", &o->device, attnrt::tools::DeviceChoices(),
               "executor (auto: CUDA when a GPU is present)");
  flags.String("--paths", &paths,
               "CUDA decode paths, comma-separated (empty: split_kv,split_kv_simt,simple,gemm); "
               "the CPU executor has one");
  flags.Choice("--kv-cache-type", &kv_cache_type, {"fp16", "fp8_e4m3", "all"},
               "KV cache storage checked (all: both); fp8_e4m3 with the default scales (1.0), "
               "each output against the reference over the codes read back");
  flags.List("--head-dims", &o->head_dims, "head dims (64, 128, 256)");
  flags.List("--block-sizes", &o->block_sizes, "KV block sizes (8, 16, 32, 64)");
  flags.List("--groups", &o->groups, "group sizes H / Hkv");
  flags.Int("--kv-heads", &o->kv_heads, "KV heads Hkv (H = group x Hkv)", 1, 64);
  flags.Int("--sequences", &o->sequences, "sequences per case (batched together)", 1, 1024);
  flags.Int("--context", &o->context,
            "prompt tokens of the longest sequence (the others shorter)", 1, 1 << 16);
  flags.Int("--steps", &o->steps, "decode steps per sequence", 1, 1024);
  flags.Double("--tolerance", &o->tolerance, "max |out - ref| allowed", 0, 1);
  flags.Int("--seed", &o->seed, "random seed (0: a fresh one, printed)", 0, 1e18);
  flags.String("--json", &o->json, "also write the tables as JSON to this file");
  flags.Bool("--no-speed", &no_speed,
             "skip the speed table (else on with the CUDA executor; see below)");
  flags.Int("--speed-batch", &o->speed_batch, "speed table: batch rows", 1, 1024);
  flags.Int("--speed-context", &o->speed_context, "speed table: tokens every row attends", 1,
            1 << 20);
  flags.Footer(
      "n/a: a path that refuses the KV cache type (Runtime::Create answers Unimplemented or\n"
      "InvalidArgument naming the type, e.g. gemm with fp8_e4m3) shows 'n/a: <that Status>' and\n"
      "is not a failure; any other error is one.\n"
      "\n"
      "Speed (CUDA executor only; the CPU executor's reference kernel is no GPU decode path):\n"
      "after the table, every path x cache type x head dim x group times one decode step of\n"
      "--speed-batch rows x --speed-context tokens with H 32 (Hkv = 32 / group) at ONE block\n"
      "size, 16 (--block-sizes does not apply), through the kernels directly: the median of 7\n"
      "CUDA-graph replays (2 warm-ups first) of 20+ steps cycling over 2+ input sets holding\n"
      "256 MiB of K/V or more, so no step reads K/V left in L2 (D 256, group 1 needs ~9 GB of\n"
      "device memory). TB/s counts K and V once per KV head plus q and out; the\n"
      "ratio is to the read ceiling measured first (16-byte loads over 4 GiB, best of 10; the\n"
      "benchmarks' ceiling). Each path's output is checked finite first. A speed row that fails\n"
      "(CUDA error, NaN output) fails the run; a refused cache type is n/a as above.");
  if (const int rc = flags.Parse(argc, argv); rc != attnrt::tools::FlagSet::kContinue) return rc;
  std::stringstream ss(paths);
  for (std::string p; std::getline(ss, p, ',');) {
    if (std::find(AllCudaPaths().begin(), AllCudaPaths().end(), p) == AllCudaPaths().end()) {
      std::fprintf(stderr,
                   "attnrt-check: --paths: '%s' is not one of split_kv, split_kv_simt, simple, "
                   "gemm (see --help)\n",
                   p.c_str());
      return 2;
    }
    o->paths.push_back(p);
  }
  if (kv_cache_type == "all") {
    o->kv_cache_types = {KvCacheType::kFp16, KvCacheType::kFp8E4M3};
  } else {
    attnrt::ParseKvCacheType(kv_cache_type, &o->kv_cache_types.front());  // Choice checked it
  }
  o->speed = !no_speed;
  return attnrt::tools::FlagSet::kContinue;
}

struct Case {
  std::string path;  // "" on the CPU executor
  KvCacheType kv;
  int head_dim, block_size, group;
};

struct CaseResult {
  bool ran = false;
  bool not_applicable = false;  // the path refuses the cache type; `error` is the refusal
  double max_error = 0;
  long requests = 0;
  double seconds = 0;
  std::string error;  // why it could not run, or the first failed request
};

CaseResult RunCase(const CheckOptions& o, attnrt::DeviceKind device, const Case& c,
                   std::uint64_t seed, std::string* description) {
  CaseResult result;
  const Clock::time_point start = Clock::now();
  attnrt::RuntimeOptions ro;
  ro.device = device;
  ro.decode_path = c.path;
  ro.shape.num_layers = 1;
  ro.shape.num_kv_heads = o.kv_heads;
  ro.shape.num_q_heads = o.kv_heads * c.group;
  ro.shape.head_dim = c.head_dim;
  ro.shape.block_size = c.block_size;
  ro.shape.max_context = o.context + o.steps + 1;
  ro.shape.kv_cache_type = c.kv;  // FP8: the default scales, 1.0 (what the mirror assumes)
  ro.max_batch_size = std::max(1, o.sequences);
  ro.max_queue_delay = std::chrono::microseconds(200);  // lets the steps' requests batch
  const std::size_t kv_elems = static_cast<std::size_t>(o.kv_heads) * c.head_dim;
  const std::size_t q_elems = static_cast<std::size_t>(ro.shape.num_q_heads) * c.head_dim;
  const std::size_t blocks_per_sequence = (ro.shape.max_context + c.block_size - 1) / c.block_size;
  ro.kv_cache_bytes = static_cast<std::size_t>(o.sequences) * (blocks_per_sequence + 1) *
                          c.block_size * kv_elems * 2 * ro.shape.kv_element_bytes() +
                      (1u << 20);
  auto created = attnrt::Runtime::Create(ro);
  if (!created.ok()) {
    result.not_applicable = attnrt::tools::IsKvCacheTypeRefusal(created.status(), c.kv);
    result.error = created.status().ToString();
    return result;
  }
  attnrt::Runtime& rt = **created;
  *description = rt.device_description();

  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::vector<attnrt::tools::KvMirror> mirrors(o.sequences);
  for (attnrt::tools::KvMirror& m : mirrors) m.type = c.kv;
  for (int seq = 0; seq < o.sequences; ++seq) {
    // Lengths spread over (context / 2, context]: most end inside a block.
    const int tokens = std::max(1, o.context - seq * std::max(1, o.context / (2 * o.sequences)));
    auto k = attnrt::tools::NormalHalves(rng, kv_elems * tokens);
    auto v = attnrt::tools::NormalHalves(rng, kv_elems * tokens);
    attnrt::Status st = rt.CreateSequence(seq);
    if (st.ok()) st = rt.Prefill(seq, 0, tokens, k, v);
    if (!st.ok()) {
      result.error = "sequence " + std::to_string(seq) + ": " + st.ToString();
      return result;
    }
    mirrors[seq].Append(k, v);
  }
  for (int step = 0; step < o.steps; ++step) {
    struct Pending {
      int seq;
      std::vector<Half> q;
      attnrt::ResultFuture result;
    };
    std::vector<Pending> round;
    for (int seq = 0; seq < o.sequences; ++seq) {
      Pending p{seq, attnrt::tools::NormalHalves(rng, q_elems), {}};
      auto k = attnrt::tools::NormalHalves(rng, kv_elems);
      auto v = attnrt::tools::NormalHalves(rng, kv_elems);
      attnrt::DecodeRequest req;
      req.sequence_id = seq;
      req.layer = 0;
      req.q = p.q;
      req.k = k;
      req.v = v;
      auto submitted = rt.Submit(req);
      if (!submitted.ok()) {
        result.error = "Submit: " + submitted.status().ToString();
        return result;
      }
      p.result = std::move(submitted->result);
      mirrors[seq].Append(k, v);
      round.push_back(std::move(p));
    }
    for (Pending& p : round) {
      attnrt::DecodeResult r = p.result.get();
      ++result.requests;
      if (!r.status.ok()) {
        if (result.error.empty()) result.error = r.status.ToString();
        result.max_error = std::numeric_limits<double>::infinity();
        continue;
      }
      result.max_error = std::max(
          result.max_error, attnrt::tools::MaxDecodeError(ro.shape, mirrors[p.seq], p.q, r.output));
    }
  }
  rt.Drain();
  result.ran = true;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// ---- speed (CUDA executor) -------------------------------------------------------------------

struct SpeedRow {
  std::string path;
  KvCacheType kv;
  int head_dim, group, q_heads, kv_heads;
};

struct SpeedResult {
  bool measured = false;
  bool not_applicable = false;  // as CaseResult
  attnrt::tools::DecodeSpeed speed;
  std::string error;
};

// The device's read ceiling in TB/s (kernels/read_ceiling.h), or why not.
attnrt::StatusOr<double> MeasureReadCeilingTbps() {
#if ATTNRT_WITH_CUDA
  attnrt::StatusOr<double> bytes_per_s = attnrt::kernels::MeasureReadBandwidth();
  if (!bytes_per_s.ok()) return bytes_per_s.status();
  return *bytes_per_s / 1e12;
#else
  return attnrt::UnimplementedError("attnrt was built without CUDA (ATTNRT_WITH_CUDA=0)");
#endif
}

attnrt::StatusOr<attnrt::tools::DecodeSpeed> MeasureSpeed(
    const attnrt::tools::DecodeSpeedRequest& request) {
#if ATTNRT_WITH_CUDA
  return attnrt::tools::MeasureDecodeSpeed(request);
#else
  (void)request;
  return attnrt::UnimplementedError("attnrt was built without CUDA (ATTNRT_WITH_CUDA=0)");
#endif
}

// `refusal`: the runtime's refusal of this path and cache type from the table above, if any;
// the row is then n/a with it, without asking the kernels.
SpeedResult RunSpeedRow(const CheckOptions& o, const SpeedRow& row,
                        const std::optional<std::string>& refusal) {
  SpeedResult result;
  if (refusal) {
    result.not_applicable = true;
    result.error = *refusal;
    return result;
  }
  attnrt::tools::DecodeSpeedRequest request;
  request.path = row.path;
  request.shape.num_layers = 1;
  request.shape.num_q_heads = row.q_heads;
  request.shape.num_kv_heads = row.kv_heads;
  request.shape.head_dim = row.head_dim;
  request.shape.block_size = kSpeedBlockSize;
  request.shape.max_context = o.speed_context;
  request.shape.kv_cache_type = row.kv;
  request.batch = o.speed_batch;
  request.context = o.speed_context;
  request.replays = kSpeedReplays;
  attnrt::StatusOr<attnrt::tools::DecodeSpeed> speed = MeasureSpeed(request);
  if (!speed.ok()) {
    result.not_applicable = attnrt::tools::IsKvCacheTypeRefusal(speed.status(), row.kv);
    result.error = speed.status().ToString();
    return result;
  }
  result.measured = true;
  result.speed = *speed;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CheckOptions o;
  if (const int rc = ParseArgs(argc, argv, &o); rc != attnrt::tools::FlagSet::kContinue) {
    return rc;
  }
  // Which executor --device gives, as the runtime resolves it: a small runtime says.
  bool cuda = false;
  {
    attnrt::RuntimeOptions probe;
    probe.device = attnrt::tools::ToDeviceKind(o.device);
    probe.shape.num_layers = 1;
    probe.shape.num_q_heads = probe.shape.num_kv_heads = 1;
    probe.shape.head_dim = 64;
    probe.shape.max_context = 16;
    probe.kv_cache_bytes = 1 << 20;
    auto rt = attnrt::Runtime::Create(probe);
    if (!rt.ok()) {
      std::fprintf(stderr, "attnrt-check: --device %s: %s\n", o.device.c_str(),
                   rt.status().ToString().c_str());
      return 1;
    }
    cuda = (*rt)->device_description().find("CUDA executor") != std::string::npos;
  }
  const attnrt::DeviceKind device = cuda ? attnrt::DeviceKind::kCuda : attnrt::DeviceKind::kCpu;
  std::vector<std::string> paths = {""};  // the CPU executor runs its reference kernel
  if (cuda) paths = o.paths.empty() ? AllCudaPaths() : o.paths;
  std::uint64_t seed = o.seed;
  if (seed == 0) seed = std::random_device{}() | 1;
  std::string type_names;
  for (KvCacheType t : o.kv_cache_types) {
    type_names += (type_names.empty() ? "" : ",") + TypeName(t);
  }

  std::vector<Case> cases;
  for (const std::string& path : paths) {
    for (KvCacheType kv : o.kv_cache_types) {
      for (int d : o.head_dims) {
        for (int b : o.block_sizes) {
          for (int g : o.groups) cases.push_back({path, kv, d, b, g});
        }
      }
    }
  }
  std::vector<SpeedRow> speed_rows;
  if (cuda && o.speed) {
    for (const std::string& path : paths) {
      for (KvCacheType kv : o.kv_cache_types) {
        for (int d : o.head_dims) {
          for (int g : o.groups) {
            const int kv_heads = std::max(1, kSpeedQHeads / std::max(1, g));
            speed_rows.push_back({path, kv, d, g, g * kv_heads, kv_heads});
          }
        }
      }
    }
  }
  std::printf("attnrt-check %s: %zu cases on the %s executor, KV cache %s, %d sequences of up to "
              "%d tokens, %d steps, Hkv %d, seed %llu (--seed reproduces), tolerance %.0e\n",
              attnrt::Version(), cases.size(), cuda ? "CUDA" : "CPU", type_names.c_str(),
              o.sequences, o.context, o.steps, o.kv_heads, static_cast<unsigned long long>(seed),
              o.tolerance);
  std::printf("\n%-14s %-9s %8s %6s %6s %4s %10s %9s  %s\n", "path", "kv_cache", "head_dim",
              "block", "group", "H", "max_error", "time_s", "result");
  std::fflush(stdout);

  nlohmann::ordered_json doc = {{"tool", "attnrt-check"},
                                {"version", attnrt::Version()},
                                {"device", cuda ? "cuda" : "cpu"},
                                {"kv_cache_types", nlohmann::ordered_json::array()},
                                {"seed", seed},
                                {"tolerance", o.tolerance},
                                {"cases", nlohmann::ordered_json::array()}};
  for (KvCacheType t : o.kv_cache_types) doc["kv_cache_types"].push_back(TypeName(t));
  attnrt::tools::Progress progress("attnrt-check",
                                   static_cast<double>(cases.size() + speed_rows.size()));
  int failures = 0;
  int not_applicable = 0;
  bool ceiling_failed = false;  // the speed rows are then measured without a ratio
  std::string description;
  std::vector<CaseResult> results;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::ostringstream note;
    note << (c.path.empty() ? "" : c.path + ", ") << TypeName(c.kv) << ", D " << c.head_dim
         << ", block " << c.block_size << ", group " << c.group;
    progress.Update(static_cast<double>(i), note.str());
    const CaseResult r = RunCase(o, device, c, seed + i, &description);
    progress.Done();
    results.push_back(r);
    const bool pass = r.ran && r.error.empty() && r.max_error <= o.tolerance;
    failures += !pass && !r.not_applicable;
    not_applicable += r.not_applicable;
    const char* verdict = r.not_applicable ? "n/a" : pass ? "PASS" : "FAIL";
    char error[32];
    std::snprintf(error, sizeof error, r.ran ? "%.2e" : "-", r.max_error);
    std::printf("%-14s %-9s %8d %6d %6d %4d %10s %9.2f  %s%s%s\n",
                c.path.empty() ? "cpu-reference" : c.path.c_str(), TypeName(c.kv).c_str(),
                c.head_dim, c.block_size, c.group, c.group * o.kv_heads, error, r.seconds, verdict,
                r.error.empty() ? "" : ": ", r.error.c_str());
    std::fflush(stdout);
    doc["cases"].push_back({{"path", c.path.empty() ? "cpu-reference" : c.path},
                            {"kv_cache_type", TypeName(c.kv)},
                            {"head_dim", c.head_dim},
                            {"block_size", c.block_size},
                            {"group", c.group},
                            {"requests", r.requests},
                            {"max_error", r.ran ? nlohmann::ordered_json(r.max_error) : nullptr},
                            {"seconds", r.seconds},
                            {"result", verdict},
                            {"pass", r.not_applicable ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(pass)},
                            {"error", r.error}});
  }

  // The speed table.
  nlohmann::ordered_json speed_doc = {{"measured", false}};
  if (!cuda) {
    std::printf("\nspeed: not measured on the CPU executor (its reference kernel is no GPU decode "
                "path); on a GPU, attnrt-check times each path against the device's read "
                "ceiling\n");
    speed_doc["reason"] = "CPU executor";
  } else if (!o.speed) {
    std::printf("\nspeed: skipped (--no-speed)\n");
    speed_doc["reason"] = "--no-speed";
  } else {
    progress.Update(static_cast<double>(cases.size()), "read ceiling");
    const attnrt::StatusOr<double> ceiling = MeasureReadCeilingTbps();
    progress.Done();
    if (ceiling.ok()) {
      std::printf("\nread ceiling: %.3f TB/s (this device, now: 16-byte loads over %.0f GiB, best "
                  "of 10)\n",
                  *ceiling, static_cast<double>(attnrt::kernels::kReadCeilingBytes) / (1 << 30));
    } else {
      ceiling_failed = true;
      std::printf("\nread ceiling: FAIL: %s\n", ceiling.status().ToString().c_str());
    }
    std::printf("speed: one decode step, batch %d x %d tokens, H %d, block %d (one block size), "
                "median of %d graph replays; TB/s = (K and V once per KV head + q + out) / time\n",
                o.speed_batch, o.speed_context, kSpeedQHeads, kSpeedBlockSize, kSpeedReplays);
    std::printf("\n%-14s %-9s %8s %6s %4s %4s %10s %10s %7s %10s  %s\n", "path", "kv_cache",
                "head_dim", "group", "H", "Hkv", "MB/step", "us/step", "TB/s", "of_ceiling",
                "result");
    std::fflush(stdout);
    speed_doc = {{"measured", true},
                 {"read_ceiling_tbps",
                  ceiling.ok() ? nlohmann::ordered_json(*ceiling) : nullptr},
                 {"read_ceiling_error", ceiling.ok() ? "" : ceiling.status().ToString()},
                 {"batch", o.speed_batch},
                 {"context", o.speed_context},
                 {"q_heads", kSpeedQHeads},
                 {"block_size", kSpeedBlockSize},
                 {"replays", kSpeedReplays},
                 {"rows", nlohmann::ordered_json::array()}};
    for (std::size_t i = 0; i < speed_rows.size(); ++i) {
      const SpeedRow& row = speed_rows[i];
      // The runtime's refusal of this path and cache type (n/a above) decides here too.
      std::optional<std::string> refusal;
      for (std::size_t j = 0; j < cases.size() && !refusal; ++j) {
        if (results[j].not_applicable && cases[j].path == row.path && cases[j].kv == row.kv) {
          refusal = results[j].error;
        }
      }
      std::ostringstream note;
      note << "speed: " << row.path << ", " << TypeName(row.kv) << ", D " << row.head_dim
           << ", group " << row.group;
      progress.Update(static_cast<double>(cases.size() + i), note.str());
      const SpeedResult r = RunSpeedRow(o, row, refusal);
      progress.Done();
      failures += !r.measured && !r.not_applicable;
      not_applicable += r.not_applicable;
      const double ratio = r.measured && ceiling.ok() ? r.speed.tbps / *ceiling : 0.0;
      char mb[32] = "-", us[32] = "-", tbps[32] = "-", of[32] = "-";
      if (r.measured) {
        std::snprintf(mb, sizeof mb, "%.1f", r.speed.bytes_per_step / 1e6);
        std::snprintf(us, sizeof us, "%.1f", r.speed.us_per_step);
        std::snprintf(tbps, sizeof tbps, "%.3f", r.speed.tbps);
        if (ceiling.ok()) std::snprintf(of, sizeof of, "%.3f", ratio);
      }
      const char* verdict = r.not_applicable ? "n/a" : r.measured ? "ok" : "FAIL";
      std::printf("%-14s %-9s %8d %6d %4d %4d %10s %10s %7s %10s  %s%s%s\n", row.path.c_str(),
                  TypeName(row.kv).c_str(), row.head_dim, row.group, row.q_heads, row.kv_heads,
                  mb, us, tbps, of, verdict, r.error.empty() ? "" : ": ", r.error.c_str());
      std::fflush(stdout);
      auto number = [&](double x, bool known) {
        return known ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
      };
      speed_doc["rows"].push_back(
          {{"path", row.path},
           {"kv_cache_type", TypeName(row.kv)},
           {"head_dim", row.head_dim},
           {"group", row.group},
           {"q_heads", row.q_heads},
           {"kv_heads", row.kv_heads},
           {"bytes_per_step", number(r.speed.bytes_per_step, r.measured)},
           {"us_per_step", number(r.speed.us_per_step, r.measured)},
           {"tbps", number(r.speed.tbps, r.measured)},
           {"ratio_to_read_ceiling", number(ratio, r.measured && ceiling.ok())},
           {"rotation_sets", r.measured ? nlohmann::ordered_json(r.speed.rotation_sets) : nullptr},
           {"steps_per_replay",
            r.measured ? nlohmann::ordered_json(r.speed.steps_per_replay) : nullptr},
           {"result", verdict},
           {"error", r.error}});
    }
  }
  doc["speed"] = speed_doc;
  doc["executor"] = description;
  doc["failures"] = failures;
  doc["not_applicable"] = not_applicable;
  doc["pass"] = failures == 0 && !ceiling_failed;
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << doc.dump(2) << '\n';
    if (!f) {
      std::fprintf(stderr, "attnrt-check: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  std::printf("\n%s\n", description.c_str());
  const std::size_t rows = cases.size() + speed_rows.size();
  const std::size_t applicable = rows - static_cast<std::size_t>(not_applicable);
  std::string na_note;
  if (not_applicable > 0) {
    na_note = ", " + std::to_string(not_applicable) + " n/a: a path that refuses the cache type";
  }
  const char* what = speed_rows.empty() ? "cases" : "cases and speed rows";
  if (failures == 0 && !ceiling_failed) {
    std::printf("attnrt-check: PASS (%zu of %zu %s%s)\n", applicable, applicable, what,
                na_note.c_str());
    return 0;
  }
  std::printf("attnrt-check: FAIL (%d of %zu %s failed%s%s)\n", failures, applicable, what,
              na_note.c_str(), ceiling_failed ? "; the read ceiling could not be measured" : "");
  return 1;
}
