// The one percentile and median definition of every tool and benchmark, so that a p99 printed by
// one program means what it means in another. Percentile(v, p), p in [0, 1]: the sample at index
// floor(p * (n - 1) + 0.5) of the n samples sorted ascending (the sample nearest to position
// p * (n - 1), ties to the upper one; an actual sample, never interpolated); 0 when v is empty.
// Median(v): the middle sample, the mean of the two middle ones when n is even; 0 when empty.
// (scheduler::HistogramSnapshot::Percentile is another thing: an estimate from histogram buckets,
// for the metrics, where the samples themselves are not kept.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace attnrt::tools {

// `sorted` must be sorted ascending.
template <typename T>
double PercentileOfSorted(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const std::size_t n = sorted.size();
  const std::size_t i = std::min(n - 1, static_cast<std::size_t>(p * (n - 1) + 0.5));
  return static_cast<double>(sorted[i]);
}

// Sorts its own copy of the samples.
template <typename T>
double Percentile(std::vector<T> samples, double p) {
  std::sort(samples.begin(), samples.end());
  return PercentileOfSorted(samples, p);
}

template <typename T>
double Median(std::vector<T> samples) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  const double upper = static_cast<double>(samples[n / 2]);
  return n % 2 ? upper : 0.5 * (static_cast<double>(samples[n / 2 - 1]) + upper);
}

}  // namespace attnrt::tools
