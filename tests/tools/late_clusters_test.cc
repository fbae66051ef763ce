// tools/late_clusters.h: the requests over a threshold, grouped by arrival time.
#include "tools/late_clusters.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace attnrt::tools {
namespace {

// Arrivals every 10 us; two stalls (requests 100-149 and 400-409 late), one late request alone,
// one request without a result.
TEST(LateClustersTest, GroupsLateRequestsByArrival) {
  const int n = 1000;
  std::vector<std::int64_t> arrival(n), latency(n, 50'000), submit_late(n, 1'000);
  for (int i = 0; i < n; ++i) arrival[i] = i * 10'000LL;
  for (int i = 100; i < 150; ++i) latency[i] = 900'000 - (i - 100) * 1'000;
  submit_late[120] = 7'000;
  for (int i = 400; i < 410; ++i) latency[i] = 300'000;
  latency[700] = 250'000;
  latency[701] = -1;  // no result: not late, not counted
  const LateClusters c = FindLateClusters(arrival, latency, submit_late, 200'000, 100'000);
  EXPECT_EQ(c.threshold_ns, 200'000);
  EXPECT_EQ(c.late, 50 + 10 + 1);
  EXPECT_EQ(c.clusters, 3);
  ASSERT_EQ(c.largest.size(), 3u);
  EXPECT_EQ(c.largest[0].requests, 50);
  EXPECT_EQ(c.largest[0].first_arrival_ns, 1'000'000);
  EXPECT_EQ(c.largest[0].last_arrival_ns, 1'490'000);
  EXPECT_EQ(c.largest[0].max_latency_ns, 900'000);
  EXPECT_EQ(c.largest[0].max_submit_late_ns, 7'000);
  EXPECT_EQ(c.largest[1].requests, 10);
  EXPECT_EQ(c.largest[1].max_submit_late_ns, 1'000);
  EXPECT_EQ(c.largest[2].requests, 1);
  EXPECT_EQ(c.largest[2].first_arrival_ns, 7'000'000);
  const std::string text = DescribeLateClusters(c);
  EXPECT_NE(text.find("61 requests over 200 us in 3 clusters; largest: 50 at t=1.00 ms"),
            std::string::npos)
      << text;
}

// A gap wider than `gap` between two late requests starts a new cluster; one within it does not.
TEST(LateClustersTest, GapDecidesWhereAClusterEnds) {
  const std::vector<std::int64_t> arrival = {0, 100, 201, 400};
  const std::vector<std::int64_t> latency = {10, 10, 10, 10};
  const LateClusters c = FindLateClusters(arrival, latency, {}, 5, 100, 1);
  EXPECT_EQ(c.late, 4);
  EXPECT_EQ(c.clusters, 3);  // {0, 100}, {201}, {400}
  ASSERT_EQ(c.largest.size(), 1u);  // keep = 1
  EXPECT_EQ(c.largest[0].requests, 2);
  EXPECT_EQ(c.largest[0].max_submit_late_ns, 0);  // not recorded
}

TEST(LateClustersTest, NothingLate) {
  const LateClusters c = FindLateClusters({0, 1, 2}, {1, 2, 3}, {}, 3, 10);
  EXPECT_EQ(c.late, 0);
  EXPECT_EQ(c.clusters, 0);
  EXPECT_TRUE(c.largest.empty());
  EXPECT_EQ(DescribeLateClusters(c), "0 requests over 0 us in 0 clusters");
}

// A pass as scheduler::BatcherPass has it (the function is a template over the pass type).
struct Pass {
  std::int64_t begin_ns, end_ns, sleep_until_ns;
  int batches, in_flight;
};

// Passes every 10 us, but a 700 us wait after the pass ending at 1.21 ms (it planned 50 us):
// the line names that wait, its plan, the longest pass and the most batches in flight.
TEST(LateClustersTest, DescribePassesAtTheLargestCluster) {
  const std::int64_t start = 1'000'000'000;
  std::vector<Pass> passes;
  for (std::int64_t t = 0; t < 5'000'000; t += 10'000) {
    if (t > 1'200'000 && t < 1'910'000) continue;  // asleep
    const std::int64_t length = t == 2'000'000 ? 6'000 : 2'000;
    passes.push_back({start + t, start + t + length, start + t + length + 50'000,
                      t == 2'000'000 ? 3 : 1, t == 1'500'000 ? 9 : 2});
  }
  LateClusters c;
  c.largest.push_back({1'300'000, 1'900'000, 300, 700'000, 0});
  const std::string text = DescribePassesAt(c, passes, start);
  EXPECT_NE(text.find("longest wait 708 us at t=1.202 ms (planned: 50 us)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("longest pass 6 us at t=2.000 ms (3 batches)"), std::string::npos) << text;
  EXPECT_NE(text.find("most batches in flight 2"), std::string::npos) << text;
  EXPECT_EQ(DescribePassesAt(LateClusters{}, passes, start), "no passes recorded");
}

// One sleep spanning the whole window (no pass begins in it) is the wait the line names; a
// trace whose first pass lies past the window says so.
TEST(LateClustersTest, DescribePassesAtAWaitSpanningTheCluster) {
  const std::int64_t start = 1'000'000'000;
  const std::int64_t never = std::numeric_limits<std::int64_t>::max();
  const std::vector<Pass> passes = {{start, start + 1'000, never, 0, 0},
                                    {start + 9'001'000, start + 9'003'000, never, 1, 1}};
  LateClusters c;
  c.largest.push_back({2'000'000, 2'500'000, 50, 7'000'000, 0});
  const std::string text = DescribePassesAt(c, passes, start);
  EXPECT_NE(text.find("0 passes from 1 ms before"), std::string::npos) << text;
  EXPECT_NE(text.find("longest wait 9000 us at t=0.001 ms (planned: no wake-up, 0 us)"),
            std::string::npos)
      << text;
  const std::vector<Pass> late = {{start + 5'001'000, start + 5'002'000, never, 0, 0}};
  EXPECT_EQ(DescribePassesAt(c, late, start), "the trace no longer holds the largest cluster");
}

TEST(LateClustersTest, DescribeStartBinsTheFirstArrivals) {
  const std::vector<std::int64_t> arrival = {0, 400'000, 1'200'000, 2'500'000, 9'000'000};
  const std::vector<std::int64_t> latency = {5'000, 90'000, 7'000, 1'000, 1'000'000};
  EXPECT_EQ(DescribeStart(arrival, latency, 1'000'000, 2),
            "0-1 ms: 2, max 90 us; 1-2 ms: 1, max 7 us");
}

}  // namespace
}  // namespace attnrt::tools
