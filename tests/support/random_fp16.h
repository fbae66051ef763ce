// Seeded N(0,1) FP16 fills and poison helpers for tests and benchmarks. Header-only, no CUDA.
// The generator is our own (splitmix64 + Box-Muller) so a seed gives the same numbers with every
// standard library (std::normal_distribution is implementation-defined).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <thread>
#include <vector>

#include <attnrt/half.h>

namespace attnrt::testing {

// Quiet-NaN FP16 bits: any kernel that reads a poisoned element or leaves an output unwritten
// shows it as NaN in the comparison.
inline constexpr Half kHalfNaN{0x7e00};

// Deterministic N(0, 1) source.
class NormalRng {
 public:
  explicit NormalRng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}

  std::uint64_t NextU64() {  // splitmix64
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() below is finite.
  double NextUniform() { return (static_cast<double>(NextU64() >> 11) + 1.0) * 0x1.0p-53; }
  int NextInt(int lo, int hi) {  // uniform in [lo, hi]
    return lo + static_cast<int>(NextU64() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  float NextNormal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(NextUniform()));
    const double theta = 6.283185307179586 * NextUniform();
    spare_ = static_cast<float>(r * std::sin(theta));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(theta));
  }

 private:
  std::uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0.0f;
};

// out[i] = FP16(scale * N(0,1)).
inline void FillNormal(std::span<Half> out, NormalRng& rng, float scale = 1.0f) {
  for (Half& h : out) h = FloatToHalf(scale * rng.NextNormal());
}
inline void FillNormal(std::span<Half> out, std::uint64_t seed, float scale = 1.0f) {
  NormalRng rng(seed);
  FillNormal(out, rng, scale);
}
// The same distribution filled by `threads` threads, each over an equal share with its own
// generator seeded from (seed, share): a seed and a thread count give the same numbers. For the
// gigabytes of K/V that long-context tests draw (one thread draws ~40 M values/s).
inline void FillNormalParallel(std::span<Half> out, std::uint64_t seed, int threads,
                               float scale = 1.0f) {
  threads = std::max(threads, 1);
  const std::size_t share = (out.size() + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    const std::size_t begin = std::min(out.size(), i * share);
    const std::size_t count = std::min(out.size() - begin, share);
    workers.emplace_back([=] {
      NormalRng rng(seed ^ (0xD1B54A32D192ED03ull * (i + 1)));
      FillNormal(out.subspan(begin, count), rng, scale);
    });
  }
  for (std::thread& w : workers) w.join();
}

inline std::vector<Half> RandomNormalHalf(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<Half> out(n);
  FillNormal(out, seed, scale);
  return out;
}

inline void Poison(std::span<Half> out) {
  for (Half& h : out) h = kHalfNaN;
}
inline void Poison(std::span<float> out) {
  for (float& f : out) f = std::numeric_limits<float>::quiet_NaN();
}
inline bool IsNaN(Half h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0; }

}  // namespace attnrt::testing
