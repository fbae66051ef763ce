// check (installed as attnrt-check): the self-test a user runs on their machine. For every decode
// path (on the GPU: split_kv, split_kv_simt, simple, gemm; the CPU executor has one, its
// reference kernel) x head dim x block size x group size (H / Hkv), it runs a short decode through
// the public runtime on fresh random inputs (sequences of different lengths, partial blocks,
// several steps, batched) and compares every output with a dense FP64 attention over a host
// mirror of the cache. Prints a table with the max error per case and PASS/FAIL.
// Exit codes: 0 every case passed; 1 a case failed (or could not run); 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attnrt/runtime.h>
#include <attnrt/version.h>
#include "tools/dense_reference.h"
#include "tools/flags.h"
#include "tools/progress.h"

namespace {

using attnrt::Half;
using Clock = std::chrono::steady_clock;

struct CheckOptions {
  std::string device = "auto";
  std::vector<std::string> paths;  // CUDA decode paths; empty: all
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
};

// Every decode path of the CUDA executor (RuntimeOptions::decode_path).
const std::vector<std::string>& AllCudaPaths() {
  static const std::vector<std::string> paths = {"split_kv", "split_kv_simt", "simple", "gemm"};
  return paths;
}

int ParseArgs(int argc, char** argv, CheckOptions* o) {
  std::string paths;
  attnrt::tools::FlagSet flags(
      "attnrt-check",
      "attnrt-check (build target: check): decode self-test. Every decode path x head dim x\n"
      "block size x group size on fresh random inputs through the runtime, each output compared\n"
      "with a dense FP64 reference; a table of max errors, PASS/FAIL, exit 1 on any failure.");
  flags.Choice("--device", &o->device, attnrt::tools::DeviceChoices(),
               "executor (auto: CUDA when a GPU is present)");
  flags.String("--paths", &paths,
               "CUDA decode paths, comma-separated (empty: split_kv,split_kv_simt,simple,gemm); "
               "the CPU executor has one");
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
  flags.String("--json", &o->json, "also write the table as JSON to this file");
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
  return attnrt::tools::FlagSet::kContinue;
}

struct Case {
  std::string path;  // "" on the CPU executor
  int head_dim, block_size, group;
};

struct CaseResult {
  bool ran = false;
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
  ro.max_batch_size = std::max(1, o.sequences);
  ro.max_queue_delay = std::chrono::microseconds(200);  // lets the steps' requests batch
  const std::size_t kv_elems = static_cast<std::size_t>(o.kv_heads) * c.head_dim;
  const std::size_t q_elems = static_cast<std::size_t>(ro.shape.num_q_heads) * c.head_dim;
  const std::size_t blocks_per_sequence = (ro.shape.max_context + c.block_size - 1) / c.block_size;
  ro.kv_cache_bytes = static_cast<std::size_t>(o.sequences) * (blocks_per_sequence + 1) *
                          c.block_size * kv_elems * 2 * sizeof(Half) +
                      (1u << 20);
  auto created = attnrt::Runtime::Create(ro);
  if (!created.ok()) {
    result.error = created.status().ToString();
    return result;
  }
  attnrt::Runtime& rt = **created;
  *description = rt.device_description();

  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::vector<attnrt::tools::KvMirror> mirrors(o.sequences);
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

  std::vector<Case> cases;
  for (const std::string& path : paths) {
    for (int d : o.head_dims) {
      for (int b : o.block_sizes) {
        for (int g : o.groups) cases.push_back({path, d, b, g});
      }
    }
  }
  std::printf("attnrt-check %s: %zu cases on the %s executor, %d sequences of up to %d tokens, "
              "%d steps, Hkv %d, seed %llu (--seed reproduces), tolerance %.0e\n",
              attnrt::Version(), cases.size(), cuda ? "CUDA" : "CPU", o.sequences, o.context,
              o.steps, o.kv_heads, static_cast<unsigned long long>(seed), o.tolerance);
  std::printf("\n%-14s %8s %6s %6s %4s %10s %9s  %s\n", "path", "head_dim", "block", "group",
              "H", "max_error", "time_s", "result");
  std::fflush(stdout);

  nlohmann::ordered_json doc = {{"tool", "attnrt-check"},
                                {"version", attnrt::Version()},
                                {"device", cuda ? "cuda" : "cpu"},
                                {"seed", seed},
                                {"tolerance", o.tolerance},
                                {"cases", nlohmann::ordered_json::array()}};
  attnrt::tools::Progress progress("attnrt-check", static_cast<double>(cases.size()));
  int failures = 0;
  std::string description;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::ostringstream note;
    note << (c.path.empty() ? "" : c.path + ", ") << "D " << c.head_dim << ", block "
         << c.block_size << ", group " << c.group;
    progress.Update(static_cast<double>(i), note.str());
    const CaseResult r = RunCase(o, device, c, seed + i, &description);
    progress.Done();
    const bool pass = r.ran && r.error.empty() && r.max_error <= o.tolerance;
    failures += !pass;
    char error[32];
    std::snprintf(error, sizeof error, r.ran ? "%.2e" : "-", r.max_error);
    std::printf("%-14s %8d %6d %6d %4d %10s %9.2f  %s%s%s\n",
                c.path.empty() ? "cpu-reference" : c.path.c_str(), c.head_dim, c.block_size,
                c.group, c.group * o.kv_heads, error, r.seconds, pass ? "PASS" : "FAIL",
                r.error.empty() ? "" : ": ", r.error.c_str());
    std::fflush(stdout);
    doc["cases"].push_back({{"path", c.path.empty() ? "cpu-reference" : c.path},
                            {"head_dim", c.head_dim},
                            {"block_size", c.block_size},
                            {"group", c.group},
                            {"requests", r.requests},
                            {"max_error", r.ran ? nlohmann::ordered_json(r.max_error) : nullptr},
                            {"seconds", r.seconds},
                            {"pass", pass},
                            {"error", r.error}});
  }
  doc["executor"] = description;
  doc["failures"] = failures;
  doc["pass"] = failures == 0;
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << doc.dump(2) << '\n';
    if (!f) {
      std::fprintf(stderr, "attnrt-check: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  std::printf("\n%s\n", description.c_str());
  if (failures == 0) {
    std::printf("attnrt-check: PASS (%zu of %zu cases)\n", cases.size(), cases.size());
    return 0;
  }
  std::printf("attnrt-check: FAIL (%d of %zu cases failed)\n", failures, cases.size());
  return 1;
}
