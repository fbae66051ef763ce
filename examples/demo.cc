// The runtime demo (README's first command): several threads submit decode requests for many
// sequences and layers; the runtime batches them and runs them on the GPU when one is present,
// else on the CPU executor. Every output is checked against a dense FP64 attention over a host
// mirror of the cache, and a short report is printed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <attnrt/runtime.h>
#include "tools/dense_reference.h"
#include "tools/flags.h"
#include "tools/percentile.h"

namespace {

using attnrt::Half;
using Clock = std::chrono::steady_clock;

struct DemoOptions {
  attnrt::DeviceKind device = attnrt::DeviceKind::kAuto;
  int threads = 4;
  int sequences = 32;
  int layers = 2;
  int steps = 8;
  int context = 512;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  int window_us = 200;
  int max_batch = 32;
};

// Parses the flags into *o; returns FlagSet::kContinue or the exit code.
int ParseArgs(int argc, char** argv, DemoOptions* o) {
  std::string device = "auto";
  attnrt::tools::FlagSet flags(
      "demo",
      "demo: batched paged decode attention through the attnrt runtime, checked against a\n"
      "dense FP64 reference.");
  flags.Choice("--device", &device, attnrt::tools::DeviceChoices(),
               "executor (auto: CUDA when a GPU is present)");
  flags.Int("--threads", &o->threads, "submitting threads", 1, 1024);
  flags.Int("--sequences", &o->sequences, "sequences", 1, 1 << 20);
  flags.Int("--layers", &o->layers, "layers", 1, 1024);
  flags.Int("--steps", &o->steps, "decode steps per sequence and layer", 1, 1 << 20);
  flags.Int("--context", &o->context, "prompt tokens prefilled per sequence", 1, 1 << 20);
  flags.Int("--heads", &o->heads, "query heads H", 1, 1024);
  flags.Int("--kv-heads", &o->kv_heads, "KV heads Hkv (H % Hkv == 0)", 1, 1024);
  flags.Int("--head-dim", &o->head_dim, "head dim: 64, 128 or 256");
  flags.Int("--block-size", &o->block_size, "KV block size: 8, 16, 32 or 64");
  flags.Int("--window-us", &o->window_us, "batching window: max queue delay in us");
  flags.Int("--max-batch", &o->max_batch, "max batch size", 1, 1 << 16);
  const int rc = flags.Parse(argc, argv);
  o->device = attnrt::tools::ToDeviceKind(device);
  return rc;
}

using attnrt::tools::KvMirror;
using attnrt::tools::MaxDecodeError;
using attnrt::tools::NormalHalves;
using attnrt::tools::Percentile;

}  // namespace

int main(int argc, char** argv) {
  DemoOptions o;
  if (const int rc = ParseArgs(argc, argv, &o); rc != attnrt::tools::FlagSet::kContinue) {
    return rc;
  }

  attnrt::RuntimeOptions ro;
  ro.shape.num_layers = o.layers;
  ro.shape.num_q_heads = o.heads;
  ro.shape.num_kv_heads = o.kv_heads;
  ro.shape.head_dim = o.head_dim;
  ro.shape.block_size = o.block_size;
  ro.shape.max_context = o.context + o.steps + 1;
  ro.device = o.device;
  ro.max_batch_size = o.max_batch;
  ro.max_queue_delay = std::chrono::microseconds(o.window_us);
  const std::size_t kv_bytes_needed = static_cast<std::size_t>(o.sequences) * o.layers * 2 *
                                      (o.context + o.steps + 2 * o.block_size) * o.kv_heads *
                                      o.head_dim * sizeof(Half);
  ro.kv_cache_bytes = kv_bytes_needed + (64u << 20);

  auto created = attnrt::Runtime::Create(ro);
  if (!created.ok()) {
    std::fprintf(stderr, "demo: %s\n", created.status().ToString().c_str());
    return 1;
  }
  attnrt::Runtime& rt = **created;
  const attnrt::ModelShape& s = rt.shape();
  std::printf("attnrt demo on %s\n", rt.device_description().c_str());
  std::printf("shape: %d layers, H=%d, Hkv=%d, D=%d, block %d; %d sequences x %d prompt tokens\n",
              s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.block_size, o.sequences,
              o.context);

  // Sequences with random prompts, mirrored on the host.
  const std::size_t kv_elems = static_cast<std::size_t>(s.num_kv_heads) * s.head_dim;
  const std::size_t q_elems = static_cast<std::size_t>(s.num_q_heads) * s.head_dim;
  std::vector<std::vector<KvMirror>> mirrors(o.sequences, std::vector<KvMirror>(o.layers));
  std::mt19937 rng(2026);
  for (int seq = 0; seq < o.sequences; ++seq) {
    if (auto st = rt.CreateSequence(seq); !st.ok()) {
      std::fprintf(stderr, "demo: CreateSequence: %s\n", st.ToString().c_str());
      return 1;
    }
    for (int layer = 0; layer < o.layers; ++layer) {
      auto k = NormalHalves(rng, kv_elems * o.context), v = NormalHalves(rng, kv_elems * o.context);
      if (auto st = rt.Prefill(seq, layer, o.context, k, v); !st.ok()) {
        std::fprintf(stderr, "demo: Prefill: %s\n", st.ToString().c_str());
        return 1;
      }
      mirrors[seq][layer].Append(k, v);
    }
  }

  // Each thread owns the sequences seq % threads == t and runs decode steps over all layers,
  // submitting one round (its sequences, one layer) at a time and checking every output.
  std::atomic<long> completed{0}, failed{0};
  std::vector<double> worst_error(o.threads, 0.0);
  std::vector<std::vector<double>> latencies_us(o.threads);
  std::atomic<long> done_requests{0};
  const long total = static_cast<long>(o.sequences) * o.layers * o.steps;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 trng(1000 + t);
      for (int step = 0; step < o.steps; ++step) {
        for (int layer = 0; layer < o.layers; ++layer) {
          struct Pending {
            int seq;
            std::vector<Half> q;
            Clock::time_point submitted;
            attnrt::ResultFuture result;
          };
          std::vector<Pending> round;
          for (int seq = t; seq < o.sequences; seq += o.threads) {
            Pending p{seq, NormalHalves(trng, q_elems), Clock::now(), {}};
            auto k = NormalHalves(trng, kv_elems), v = NormalHalves(trng, kv_elems);
            attnrt::DecodeRequest req;
            req.sequence_id = seq;
            req.layer = layer;
            req.q = p.q;
            req.k = k;
            req.v = v;
            auto submitted = rt.Submit(req);
            if (!submitted.ok()) {
              if (failed++ < 5) {
                std::fprintf(stderr, "demo: Submit: %s\n", submitted.status().ToString().c_str());
              }
              continue;
            }
            p.result = std::move(submitted->result);
            mirrors[seq][layer].Append(k, v);
            round.push_back(std::move(p));
          }
          for (Pending& p : round) {
            attnrt::DecodeResult r = p.result.get();
            latencies_us[t].push_back(
                std::chrono::duration<double, std::micro>(Clock::now() - p.submitted).count());
            if (!r.status.ok()) {
              if (failed++ < 5) std::fprintf(stderr, "demo: %s\n", r.status.ToString().c_str());
              continue;
            }
            worst_error[t] =
                std::max(worst_error[t], MaxDecodeError(s, mirrors[p.seq][layer], p.q, r.output));
            ++completed;
          }
          const long d = done_requests += static_cast<long>(round.size());
          if (t == 0 && (step + 1) % std::max(1, o.steps / 4) == 0 && layer == o.layers - 1) {
            std::printf("  progress: %ld / %ld requests\n", d, total);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rt.Drain();

  std::vector<double> all;
  for (auto& v : latencies_us) all.insert(all.end(), v.begin(), v.end());
  const double err = *std::max_element(worst_error.begin(), worst_error.end());
  const bool ok = failed == 0 && completed == total && err <= 2e-3;
  std::printf("\nrequests: %ld completed, %ld failed, of %ld\n", completed.load(), failed.load(),
              total);
  std::printf("throughput: %.0f requests/s over %.3f s (%d threads)\n", total / seconds, seconds,
              o.threads);
  std::printf("latency (submit to result, as the caller sees it): p50 %.1f us, p99 %.1f us\n",
              Percentile(all, 0.5), Percentile(all, 0.99));
  std::printf("max |out - ref| vs dense FP64 reference: %.2e (tolerance 2e-3)\n", err);
  std::printf("\nmetrics (Prometheus text, non-zero series):\n");
  const std::string metrics = rt.MetricsText();
  std::size_t pos = 0;
  while (pos < metrics.size()) {
    std::size_t end = metrics.find('\n', pos);
    if (end == std::string::npos) end = metrics.size();
    std::string line = metrics.substr(pos, end - pos);
    const bool zero = line.size() >= 2 && line.compare(line.size() - 2, 2, " 0") == 0;
    if (!line.empty() && line[0] != '#' && line.find("_bucket") == std::string::npos && !zero) {
      std::printf("  %s\n", line.c_str());
    }
    pos = end + 1;
  }
  std::printf("\n%s\n", ok ? "demo: OK" : "demo: FAILED");
  return ok ? 0 : 1;
}
