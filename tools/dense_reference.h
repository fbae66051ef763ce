// The dense FP64 decode-attention reference the self-checking programs (demo, attnrt-check,
// attnrt-loadgen --verify) compare the runtime's outputs with: a host mirror of one (sequence,
// layer) of the cache as it holds it (FP16 values, or FP8 codes read back), and the largest
// deviation of one request's output from attention over that mirror. Public API plus
// tools/kv_cache_support.h (the FP8 codec).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include "tools/kv_cache_support.h"

namespace attnrt::tools {

// K and V of one (sequence, layer) as a cache of `type` with the default scales (1.0) holds
// them (StoredKvValue: the FP16 values, or their E4M3 codes read back), [tokens][Hkv][D].
struct KvMirror {
  KvCacheType type = KvCacheType::kFp16;
  std::vector<float> k, v;

  void Append(const std::vector<Half>& new_k, const std::vector<Half>& new_v) {
    for (Half h : new_k) k.push_back(StoredKvValue(type, h));
    for (Half h : new_v) v.push_back(StoredKvValue(type, h));
  }
};

// n FP16 values drawn from N(0, 1).
inline std::vector<Half> NormalHalves(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Half> out(n);
  for (Half& h : out) h = FloatToHalf(normal(rng));
  return out;
}

// Dense FP64 decode attention of `q` (H x D) over the first `tokens` tokens of `k` and `v`
// ([tokens][Hkv][D], as the cache holds them); returns max |out - ref| over all heads, infinity
// when `out` is not H x D or any output is not finite.
inline double MaxDecodeError(const ModelShape& s, const float* k, const float* v,
                             std::size_t tokens, const Half* q, const std::vector<Half>& out) {
  const int d = s.head_dim, hkv = s.num_kv_heads, g = s.group_size();
  if (out.size() != static_cast<std::size_t>(s.num_q_heads) * d) {
    return std::numeric_limits<double>::infinity();
  }
  double worst = 0.0;
  std::vector<double> scores(tokens);
  for (int h = 0; h < s.num_q_heads; ++h) {
    const int kvh = h / g;
    double mx = -1e300;
    for (std::size_t t = 0; t < tokens; ++t) {
      double dot = 0.0;
      const float* kr = &k[(t * hkv + kvh) * d];
      for (int i = 0; i < d; ++i) dot += HalfToFloat(q[h * d + i]) * double(kr[i]);
      scores[t] = dot * s.scale();
      mx = std::max(mx, scores[t]);
    }
    double sum = 0.0;
    for (double& x : scores) sum += (x = std::exp(x - mx));
    for (int i = 0; i < d; ++i) {
      double acc = 0.0;
      for (std::size_t t = 0; t < tokens; ++t) acc += scores[t] * v[(t * hkv + kvh) * d + i];
      const double error = std::abs(acc / sum - HalfToFloat(out[h * d + i]));
      // A NaN output must fail the check: std::max would drop a NaN error.
      if (!std::isfinite(error)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, error);
    }
  }
  return worst;
}
// Over every token of the mirror `m`.
inline double MaxDecodeError(const ModelShape& s, const KvMirror& m, const std::vector<Half>& q,
                             const std::vector<Half>& out) {
  const std::size_t tokens = m.k.size() / (static_cast<std::size_t>(s.num_kv_heads) * s.head_dim);
  return MaxDecodeError(s, m.k.data(), m.v.data(), tokens, q.data(), out);
}

}  // namespace attnrt::tools
