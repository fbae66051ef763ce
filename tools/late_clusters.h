// Where an open-loop run's tail comes from: the requests over a latency threshold, grouped by
// arrival time. A p99 made of a few clusters (a stall: every request arriving during it waits)
// reads differently from one made of late requests spread over the run (a steady cost). Shared
// by tools/open_loop.h (OpenLoopResult::late) and its printers; standard library only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace attnrt::tools {

// Requests over the threshold whose arrivals lie within `gap` of the previous such arrival.
struct LateCluster {
  std::int64_t first_arrival_ns = 0;  // from the run's start
  std::int64_t last_arrival_ns = 0;
  std::int64_t requests = 0;
  std::int64_t max_latency_ns = 0;
  // The most any of them reached Submit after its scheduled arrival (the load generator's own
  // lateness: a late producer thread, not the runtime).
  std::int64_t max_submit_late_ns = 0;
};

struct LateClusters {
  std::int64_t threshold_ns = 0;
  std::int64_t late = 0;  // requests with latency > threshold_ns
  std::int64_t clusters = 0;
  std::vector<LateCluster> largest;  // by requests, descending; at most `keep`
};

// arrival_ns[i], latency_ns[i] (< 0: no result, skipped) and submit_late_ns[i] (empty: not
// recorded) describe request i; arrivals ascending.
inline LateClusters FindLateClusters(const std::vector<std::int64_t>& arrival_ns,
                                     const std::vector<std::int64_t>& latency_ns,
                                     const std::vector<std::int64_t>& submit_late_ns,
                                     std::int64_t threshold_ns, std::int64_t gap_ns,
                                     std::size_t keep = 3) {
  LateClusters out;
  out.threshold_ns = threshold_ns;
  std::vector<LateCluster> all;
  for (std::size_t i = 0; i < arrival_ns.size() && i < latency_ns.size(); ++i) {
    if (latency_ns[i] <= threshold_ns) continue;
    ++out.late;
    const std::int64_t at = arrival_ns[i];
    if (all.empty() || at - all.back().last_arrival_ns > gap_ns) {
      all.push_back({at, at, 0, 0, 0});
    }
    LateCluster& c = all.back();
    c.last_arrival_ns = at;
    ++c.requests;
    c.max_latency_ns = std::max(c.max_latency_ns, latency_ns[i]);
    if (i < submit_late_ns.size()) {
      c.max_submit_late_ns = std::max(c.max_submit_late_ns, submit_late_ns[i]);
    }
  }
  out.clusters = static_cast<std::int64_t>(all.size());
  std::stable_sort(all.begin(), all.end(), [](const LateCluster& a, const LateCluster& b) {
    return a.requests > b.requests;
  });
  if (all.size() > keep) all.resize(keep);
  out.largest = std::move(all);
  return out;
}

// One line: "N requests over T us in C clusters; largest: n at t=.. ms over .. us (max .. us,
// submit late <= .. us), ...".
inline std::string DescribeLateClusters(const LateClusters& c) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "%lld requests over %.0f us in %lld clusters",
                static_cast<long long>(c.late), c.threshold_ns * 1e-3,
                static_cast<long long>(c.clusters));
  std::string s = buffer;
  for (std::size_t i = 0; i < c.largest.size(); ++i) {
    const LateCluster& l = c.largest[i];
    std::snprintf(buffer, sizeof buffer,
                  "%s%lld at t=%.2f ms over %.0f us (latency max %.0f us, submit late max %.0f us)",
                  i == 0 ? "; largest: " : ", ", static_cast<long long>(l.requests),
                  l.first_arrival_ns * 1e-6, (l.last_arrival_ns - l.first_arrival_ns) * 1e-3,
                  l.max_latency_ns * 1e-3, l.max_submit_late_ns * 1e-3);
    s += buffer;
  }
  return s;
}

// The batching thread around the largest cluster (SchedulerOptions::pass_trace): `passes` (oldest
// first) on the scheduler's clock, `start_ns` the run's start on it, the cluster's first arrival
// from the start. Over [first arrival - 1 ms, first arrival + 3 ms]: how many passes ran in it,
// the longest wait between two passes that overlaps it (one wait may span it all) with the
// wake-up the earlier pass planned beside it (a wait far past its plan is a late wake-up, a plan
// far ahead a sleep too long), the longest pass, the most batches in flight.
template <typename Pass>
std::string DescribePassesAt(const LateClusters& c, const std::vector<Pass>& passes,
                             std::int64_t start_ns) {
  if (c.largest.empty() || passes.empty()) return "no passes recorded";
  const std::int64_t to = start_ns + c.largest.front().first_arrival_ns + 3'000'000;
  // A window opening before the first pass (a cluster at the run's start) opens with it; a trace
  // whose first pass lies past the window no longer holds it (pass_trace too small).
  if (passes.front().begin_ns > to) return "the trace no longer holds the largest cluster";
  const std::int64_t from = std::max(passes.front().begin_ns,
                                     start_ns + c.largest.front().first_arrival_ns - 1'000'000);
  std::int64_t count = 0, longest_wait = -1, wait_at = 0, planned = 0, longest_pass = 0;
  std::int64_t pass_at = 0;
  bool no_wake_up = false;  // the pass before the longest wait planned none (a wake only)
  int most_in_flight = 0, pass_batches = 0;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const Pass& p = passes[i];
    if (i > 0) {
      const Pass& previous = passes[i - 1];
      const bool overlaps = previous.end_ns <= to && p.begin_ns >= from;
      if (overlaps && p.begin_ns - previous.end_ns > longest_wait) {
        longest_wait = p.begin_ns - previous.end_ns;
        wait_at = previous.end_ns;
        planned = previous.sleep_until_ns - previous.end_ns;
        no_wake_up = previous.sleep_until_ns == std::numeric_limits<std::int64_t>::max();
      }
    }
    if (p.end_ns < from || p.begin_ns > to) continue;
    ++count;
    if (p.end_ns - p.begin_ns > longest_pass) {
      longest_pass = p.end_ns - p.begin_ns;
      pass_at = p.begin_ns;
      pass_batches = p.batches;
    }
    most_in_flight = std::max(most_in_flight, static_cast<int>(p.in_flight));
  }
  char buffer[320];
  std::snprintf(buffer, sizeof buffer,
                "%lld passes from 1 ms before the largest cluster to 3 ms into it; longest wait "
                "%.0f us at t=%.3f ms (planned: %s%.0f us); longest pass %.0f us at t=%.3f ms "
                "(%d batches); most batches in flight %d",
                static_cast<long long>(count), longest_wait * 1e-3, (wait_at - start_ns) * 1e-6,
                no_wake_up ? "no wake-up, " : "", no_wake_up ? 0.0 : planned * 1e-3,
                longest_pass * 1e-3, (pass_at - start_ns) * 1e-6, pass_batches, most_in_flight);
  return buffer;
}

// The run's start, bin by bin ("0-1 ms: 583, max 2768 us; 1-2 ms: ..."): the
// requests arriving in each of the first `bins` bins of `bin_ns`, and their largest latency.
inline std::string DescribeStart(const std::vector<std::int64_t>& arrival_ns,
                                 const std::vector<std::int64_t>& latency_ns,
                                 std::int64_t bin_ns, int bins) {
  std::vector<std::int64_t> count(bins, 0), max_latency(bins, 0);
  for (std::size_t i = 0; i < arrival_ns.size() && i < latency_ns.size(); ++i) {
    const std::int64_t bin = arrival_ns[i] / bin_ns;
    if (bin >= bins) break;  // arrivals ascend
    ++count[bin];
    max_latency[bin] = std::max(max_latency[bin], latency_ns[i]);
  }
  std::string s;
  char buffer[96];
  for (int b = 0; b < bins; ++b) {
    std::snprintf(buffer, sizeof buffer, "%s%g-%g ms: %lld, max %.0f us", b == 0 ? "" : "; ",
                  b * bin_ns * 1e-6, (b + 1) * bin_ns * 1e-6, static_cast<long long>(count[b]),
                  max_latency[b] * 1e-3);
    s += buffer;
  }
  return s;
}

}  // namespace attnrt::tools
