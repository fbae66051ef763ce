// A C++ consumer of the installed attnrt: one sequence, a prompt, one decode on the CPU executor.
// Exits 0 only when the output is finite and not all zero.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <attnrt/runtime.h>
#include <attnrt/version.h>

int main() {
  if (std::strcmp(attnrt::Version(), ATTNRT_VERSION_STRING) != 0) {
    std::fprintf(stderr, "consumer_cpp: header %s, library %s\n", ATTNRT_VERSION_STRING,
                 attnrt::Version());
    return 1;
  }
  attnrt::RuntimeOptions options;
  options.device = attnrt::DeviceKind::kCpu;
  options.shape = {.num_layers = 1, .num_q_heads = 8, .num_kv_heads = 2, .head_dim = 64,
                   .block_size = 16, .max_context = 256};
  options.kv_cache_bytes = 16 << 20;
  auto runtime = attnrt::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", runtime.status().ToString().c_str());
    return 1;
  }
  attnrt::Runtime& rt = **runtime;

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto random_halves = [&](std::size_t n) {
    std::vector<attnrt::Half> v(n);
    for (attnrt::Half& h : v) h = attnrt::FloatToHalf(normal(rng));
    return v;
  };
  const int prompt = 20;
  const std::size_t kv = options.shape.kv_token_elems();
  const std::vector<attnrt::Half> k = random_halves(prompt * kv), v = random_halves(prompt * kv);
  const std::vector<attnrt::Half> q = random_halves(8 * 64), k_new = random_halves(kv),
                                  v_new = random_halves(kv);
  if (attnrt::Status s = rt.CreateSequence(1); !s.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (attnrt::Status s = rt.Prefill(1, 0, prompt, k, v); !s.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", s.ToString().c_str());
    return 1;
  }
  auto submission = rt.Submit({.sequence_id = 1, .layer = 0, .q = q, .k = k_new, .v = v_new});
  if (!submission.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", submission.status().ToString().c_str());
    return 1;
  }
  const attnrt::DecodeResult result = submission->result.get();
  if (!result.status.ok() || result.output.size() != q.size()) {
    std::fprintf(stderr, "consumer_cpp: decode failed: %s\n", result.status.ToString().c_str());
    return 1;
  }
  int nonzero = 0;
  for (attnrt::Half h : result.output) {
    const float x = attnrt::HalfToFloat(h);
    if (!std::isfinite(x)) {
      std::fprintf(stderr, "consumer_cpp: non-finite output %f\n", x);
      return 1;
    }
    nonzero += x != 0.0f;
  }
  if (nonzero == 0) {
    std::fprintf(stderr, "consumer_cpp: the output is all zero\n");
    return 1;
  }
  std::printf("consumer_cpp: attnrt %s on the %s: %zu outputs finite, %d nonzero: OK\n",
              attnrt::Version(), rt.device_description().c_str(), result.output.size(), nonzero);
  return 0;
}
