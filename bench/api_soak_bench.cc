// The soak and overload record of the public Runtime on the CPU executor (bench/api_soak.h):
// N requests with sequence churn, cancels and timeouts from many threads (exactly-once, no leaked
// block, flat RSS), then capacity, normal, 2x overload and recovery phases. Progress on stderr,
// the summary on stdout; exit 1 when a check fails.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <attnrt/version.h>
#include "bench/api_soak.h"
#if ATTNRT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

// Device memory in use on the current device (total - free), -1 where there is no CUDA.
std::int64_t DeviceUsedBytes() {
#if ATTNRT_WITH_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return static_cast<std::int64_t>(total_bytes - free_bytes);
#else
  return -1;
#endif
}

constexpr const char* kHelp = R"(usage: api_soak_bench [options]
Soak: drives a Runtime (the CPU executor; the CUDA one with --device cuda) with decode
requests from many threads, with sequence create/fork/free churn, random cancels and short timeouts; checks every accepted request
completed exactly once with OK, Cancelled or DeadlineExceeded, that freeing every sequence
brings kv_cache_usage().blocks_in_use back to its baseline, and that RSS is flat after warm-up
(growth of the largest sample after 20% of the requests over the sample at 20%, < 5%).
Overload: measures capacity C (closed loop), then open-loop phases at 0.5 C (normal), 2 C
(overload) and 0.5 C (recovery); checks that Submit sheds promptly (ResourceExhausted, p99 of
Submit under overload), that the admitted requests' p99 stays within 2 (Q + 3 B) / C + 20 ms
(Q = max_queue_size, B = max_batch_size), that RSS grows less than 64 MiB, and that the
recovery phase's p99 is within max(2 x, +10 ms) of the normal phase's.

  --requests N             soak requests (default 10000000)
  --threads N              soak submitting threads (default 8)
  --progress-interval S    seconds between progress lines on stderr (default 5)
  --seed N                 (default 1)
  --device cpu|cuda        the soak's executor (default cpu; cuda needs a GPU, and
                           its device memory must stay flat as RSS does)
  --no-soak                run the overload phases only
  --no-overload            run the soak only
  --phase-seconds S        each open-loop phase (default 3)
  --capacity-seconds S     the closed-loop capacity run (default 2)
  --max-queue-size N       the Runtime's max_queue_size in the overload run (default 256)
  --submit-p99-limit-us U  the overload phase's Submit p99 must stay under this (default 1000)
  -h, --help               this text
Exit status: 0 when every check passes, 1 when one fails, 2 on bad arguments.
)";

bool Arg(int argc, char** argv, int* i, const char* name, std::string* value) {
  if (std::strcmp(argv[*i], name) != 0) return false;
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", name);
    std::exit(2);
  }
  *value = argv[++*i];
  return true;
}

double Number(const std::string& text, const char* name) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= 0)) {
    std::fprintf(stderr, "%s = '%s': expected a non-negative number\n", name, text.c_str());
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnrt::bench;
  SoakConfig soak;
  OverloadConfig overload;
  OverloadBounds bounds;
  bool run_soak = true, run_overload = true;
  double submit_p99_limit_us = 1000;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::fputs(kHelp, stdout);
      return 0;
    } else if (Arg(argc, argv, &i, "--requests", &v)) {
      soak.requests = static_cast<std::int64_t>(Number(v, "--requests"));
    } else if (Arg(argc, argv, &i, "--threads", &v)) {
      soak.threads = static_cast<int>(Number(v, "--threads"));
    } else if (Arg(argc, argv, &i, "--progress-interval", &v)) {
      soak.progress_interval_s = Number(v, "--progress-interval");
    } else if (Arg(argc, argv, &i, "--seed", &v)) {
      soak.seed = static_cast<std::uint64_t>(Number(v, "--seed"));
      overload.seed = soak.seed;
    } else if (Arg(argc, argv, &i, "--device", &v)) {
      if (v == "cpu") {
        soak.device = attnrt::DeviceKind::kCpu;
      } else if (v == "cuda") {
        soak.device = attnrt::DeviceKind::kCuda;
        soak.device_used_bytes = DeviceUsedBytes;
      } else {
        std::fprintf(stderr, "--device: cpu or cuda, not '%s'\n", v.c_str());
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--no-soak")) {
      run_soak = false;
    } else if (!std::strcmp(argv[i], "--no-overload")) {
      run_overload = false;
    } else if (Arg(argc, argv, &i, "--phase-seconds", &v)) {
      overload.phase_seconds = Number(v, "--phase-seconds");
    } else if (Arg(argc, argv, &i, "--capacity-seconds", &v)) {
      overload.capacity_seconds = Number(v, "--capacity-seconds");
    } else if (Arg(argc, argv, &i, "--max-queue-size", &v)) {
      overload.max_queue_size = static_cast<int>(Number(v, "--max-queue-size"));
    } else if (Arg(argc, argv, &i, "--submit-p99-limit-us", &v)) {
      submit_p99_limit_us = Number(v, "--submit-p99-limit-us");
    } else {
      std::fprintf(stderr, "unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (soak.requests < 1 || soak.threads < 1 || overload.max_queue_size < 1) {
    std::fprintf(stderr, "--requests, --threads and --max-queue-size must be >= 1\n");
    return 2;
  }

  std::printf("api_soak_bench: attnrt %s, soak on the %s executor (overload on the CPU "
              "executor), %u hardware threads\n",
              attnrt::Version(), soak.device == attnrt::DeviceKind::kCuda ? "CUDA" : "CPU",
              std::thread::hardware_concurrency());
  bool pass = true;
  if (run_soak) {
    const SoakResult r = RunSoak(soak);
    PrintSoak(stdout, soak, r);
    std::fflush(stdout);
    pass = pass && r.passed();
  }
  if (run_overload) {
    const OverloadResult r = RunOverload(overload, bounds);
    const bool shed = r.shed_promptly(submit_p99_limit_us);
    const bool ok = r.clean() && shed && r.latency_bounded() && r.memory_bounded() &&
                    r.recovered();
    const auto& s = overload.shape;
    std::printf("overload: %s\n", ok ? "PASS" : "FAIL");
    std::printf("  shape               L=%d H=%d Hkv=%d D=%d block=%d, %d sequences with %d-token "
                "prompts (recreated before each phase)\n",
                s.num_layers, s.num_q_heads, s.num_kv_heads, s.head_dim, s.block_size,
                overload.sequences, overload.prompt_tokens);
    std::printf("  runtime             max_queue_size Q=%d, max_batch_size B=%d, window %d us, "
                "%d completion threads\n",
                overload.max_queue_size, overload.max_batch_size,
                attnrt::defaults::kMaxQueueDelayUs, attnrt::defaults::kCompletionThreads);
    std::printf("  capacity            C = %.0f requests/s (closed loop, %d outstanding, %.1f s, "
                "%" PRId64 " completed)\n",
                r.capacity_per_s, std::min(overload.capacity_window, overload.max_queue_size),
                overload.capacity_seconds,
                r.capacity_completed);
    PrintPhase(stdout, r.normal);
    PrintPhase(stdout, r.overload);
    PrintPhase(stdout, r.recovery);
    std::printf("  shed promptly       %s: %" PRId64 " shed, Submit p99 %.1f us under overload "
                "(limit %.0f us)\n",
                shed ? "yes" : "NO", r.overload.shed, r.overload.submit_p99_us,
                submit_p99_limit_us);
    std::printf("  latency bounded     %s: admitted p99 %.2f ms <= %.2f ms = %.0f x (Q + 3B) / C "
                "+ %.0f ms\n",
                r.latency_bounded() ? "yes" : "NO", r.overload.p99_ms, r.latency_bound_ms,
                bounds.latency_slack, bounds.latency_floor_ms);
    std::printf("  memory bounded      %s: rss before %.1f MiB, max under overload %.1f MiB "
                "(limit +%.0f MiB); queue depth max %" PRId64 " (Q = %d)\n",
                r.memory_bounded() ? "yes" : "NO", r.rss_before_kb / 1024.0,
                r.overload.rss_max_kb / 1024.0, r.rss_growth_limit_kb / 1024.0,
                r.overload.pending_max, overload.max_queue_size);
    std::printf("  recovered           %s: recovery p99 %.2f ms <= %.2f ms (normal p99 %.2f ms)\n",
                r.recovered() ? "yes" : "NO", r.recovery.p99_ms, r.recovery_bound_ms,
                r.normal.p99_ms);
    std::printf("  clean               %s: blocks after freeing all %" PRId64 "%s%s\n",
                r.clean() ? "yes" : "NO", r.blocks_after,
                r.first_error.empty() ? "" : "; first error: ", r.first_error.c_str());
    pass = pass && ok;
  }
  return pass ? 0 : 1;
}
