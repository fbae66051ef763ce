// Dense FP64 decode attention over a host mirror of one (sequence, layer): the independent check
// for end-to-end tests (runtime facade, executors), which never see the paged layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>

namespace attnrt::testing {

// K and V of every token so far, as the cache holds them: [tokens][Hkv][D] each.
struct DenseKv {
  std::vector<float> k, v;
  void Append(std::span<const Half> k_new, std::span<const Half> v_new) {
    for (Half h : k_new) k.push_back(HalfToFloat(h));
    for (Half h : v_new) v.push_back(HalfToFloat(h));
  }
};

// out[H][D] in FP64 for query q[H][D]; the natural-log LSE of the scaled scores per head goes
// to *lse when given.
inline std::vector<double> DenseDecode(const ModelShape& s, const DenseKv& kv,
                                       std::span<const Half> q, std::vector<double>* lse = nullptr) {
  const int d = s.head_dim, hkv = s.num_kv_heads, g = s.group_size();
  const std::size_t tokens = kv.k.size() / (static_cast<std::size_t>(hkv) * d);
  std::vector<double> out(static_cast<std::size_t>(s.num_q_heads) * d, 0.0), p(tokens);
  if (lse) lse->assign(s.num_q_heads, 0.0);
  for (int h = 0; h < s.num_q_heads; ++h) {
    const int kvh = h / g;
    double mx = -INFINITY;
    for (std::size_t t = 0; t < tokens; ++t) {
      double dot = 0.0;
      for (int i = 0; i < d; ++i) {
        dot += double(HalfToFloat(q[h * d + i])) * kv.k[(t * hkv + kvh) * d + i];
      }
      p[t] = dot * s.scale();
      mx = std::max(mx, p[t]);
    }
    double sum = 0.0;
    for (double& x : p) sum += (x = std::exp(x - mx));
    for (std::size_t t = 0; t < tokens; ++t) {
      for (int i = 0; i < d; ++i) out[h * d + i] += p[t] * kv.v[(t * hkv + kvh) * d + i];
    }
    for (int i = 0; i < d; ++i) out[h * d + i] /= sum;
    if (lse) (*lse)[h] = mx + std::log(sum);
  }
  return out;
}

struct ErrorStats {
  double max_abs = 0.0;
  double rel_l2 = 0.0;
};

inline ErrorStats CompareToReference(std::span<const Half> out, const std::vector<double>& ref) {
  double diff2 = 0.0, ref2 = 0.0, max_abs = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double o = HalfToFloat(out[i]);
    const double e = std::isfinite(o) ? std::abs(o - ref[i]) : INFINITY;
    max_abs = std::max(max_abs, e);
    diff2 += e * e;
    ref2 += ref[i] * ref[i];
  }
  return {max_abs, std::sqrt(diff2 / std::max(ref2, 1e-300))};
}

}  // namespace attnrt::testing
