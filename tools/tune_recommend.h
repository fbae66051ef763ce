// The tuner's verdict (attnrt-tune, examples/tune_window.cc): a (rate, window, max batch) point
// as the median and range of its repeated runs, and per offered rate the recommended setting,
// the settings tied with it within the noise, or the nearest miss. Pure functions of the
// measurements, so tests/tools/tune_recommend_test.cc can pin the rules down.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/open_loop.h"
#include "tools/percentile.h"

namespace attnrt::tools {

// A setting keeps up when it completes at least this fraction of the offered rate.
inline constexpr double kKeepsUpFraction = 0.9;
// p99 ranges over the repeats are widened by this fraction on each side before they are compared:
// with one repeat there is no spread to go by, and timers and schedulers jitter by a few percent.
inline constexpr double kNoiseFloor = 0.05;

// One (rate, window, max batch) point: its repeats and their summary.
struct TunePoint {
  double rate = 0;
  int window_us = 0, max_batch = 0;
  bool overloaded = false;  // rate beyond the maximum sustainable rate
  bool shortened = false;   // far past it: one short run, never recommended
  std::vector<OpenLoopResult> runs;

  // Medians over the repeats, and the p99 range.
  double Median(double OpenLoopResult::*field) const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return tools::Median(v);  // the one definition (tools/percentile.h), not this member
  }
  double p99() const { return Median(&OpenLoopResult::p99_us); }
  double p99_min() const {
    double m = runs.front().p99_us;
    for (const auto& r : runs) m = std::min(m, r.p99_us);
    return m;
  }
  double p99_max() const {
    double m = runs.front().p99_us;
    for (const auto& r : runs) m = std::max(m, r.p99_us);
    return m;
  }
  double throughput() const { return Median(&OpenLoopResult::throughput_per_s); }
  double batch() const { return Median(&OpenLoopResult::batch_mean); }
  std::int64_t rejected() const {
    std::int64_t n = 0;
    for (const auto& r : runs) n += r.rejected;
    return n;
  }
  std::int64_t failures() const {
    std::int64_t n = 0;
    for (const auto& r : runs) n += r.failures();
    return n;
  }
  bool KeepsUp() const {
    return !shortened && rejected() == 0 && throughput() >= kKeepsUpFraction * rate;
  }
  // Within the noise of `other`: their p99 ranges, widened by the noise floor, overlap.
  bool TiesWith(const TunePoint& other) const {
    return p99_min() * (1 - kNoiseFloor) <= other.p99_max() * (1 + kNoiseFloor) &&
           other.p99_min() * (1 - kNoiseFloor) <= p99_max() * (1 + kNoiseFloor);
  }
};

// The verdict for one offered rate.
struct Recommendation {
  double rate = 0;
  const TunePoint* best = nullptr;          // meets the objective; null when none does
  std::vector<const TunePoint*> ties;       // the settings within the noise of the lowest p99
  const TunePoint* nearest_miss = nullptr;  // when none meets it: the closest one
  std::string miss_reason;
};

inline Recommendation Recommend(const std::vector<TunePoint>& points, double rate,
                                double p99_slo_us) {
  Recommendation rec;
  rec.rate = rate;
  const TunePoint* fastest = nullptr;
  for (const TunePoint& p : points) {
    if (p.rate != rate || !p.KeepsUp() || p.p99() > p99_slo_us) continue;
    if (!fastest || p.p99() < fastest->p99()) fastest = &p;
  }
  if (fastest) {
    // Ties: every qualifying setting within the noise of the fastest; the smaller window wins
    // (less added latency at low load), then the smaller batch (less memory held per step).
    for (const TunePoint& p : points) {
      if (p.rate != rate || !p.KeepsUp() || p.p99() > p99_slo_us) continue;
      if (p.TiesWith(*fastest)) rec.ties.push_back(&p);
    }
    auto smaller = [](const TunePoint* a, const TunePoint* b) {
      return std::pair(a->window_us, a->max_batch) < std::pair(b->window_us, b->max_batch);
    };
    rec.best = *std::min_element(rec.ties.begin(), rec.ties.end(), smaller);
    return rec;
  }
  // Nearest miss: among the settings that keep up, the lowest p99; if none keeps up, the one
  // that completes the most.
  for (const TunePoint& p : points) {
    if (p.rate != rate || p.shortened) continue;
    if (p.KeepsUp()) {
      if (!rec.nearest_miss || !rec.nearest_miss->KeepsUp() || p.p99() < rec.nearest_miss->p99()) {
        rec.nearest_miss = &p;
      }
    } else if (!rec.nearest_miss ||
               (!rec.nearest_miss->KeepsUp() && p.throughput() > rec.nearest_miss->throughput())) {
      rec.nearest_miss = &p;
    }
  }
  if (rec.nearest_miss == nullptr) {
    rec.miss_reason = "every point at this rate was far past the maximum sustainable rate";
  } else if (rec.nearest_miss->KeepsUp()) {
    std::ostringstream why;
    why << "p99 " << std::lround(rec.nearest_miss->p99()) << " us is "
        << std::lround(100 * (rec.nearest_miss->p99() / p99_slo_us - 1)) << "% over the objective";
    rec.miss_reason = why.str();
  } else {
    std::ostringstream why;
    const double thru = rec.nearest_miss->throughput();
    why << "no setting keeps up; the best completes " << std::lround(thru) << " req/s ("
        << std::lround(100 * thru / rate) << "% of the rate";
    if (rec.nearest_miss->rejected() > 0) why << ", " << rec.nearest_miss->rejected() << " shed";
    why << ")";
    rec.miss_reason = why.str();
  }
  return rec;
}

}  // namespace attnrt::tools
