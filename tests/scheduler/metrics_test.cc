// Histogram geometry and percentiles, the snapshot's counters, and the Prometheus exposition.
#include "scheduler/metrics.h"

#include <gtest/gtest.h>

#include <random>
#include <algorithm>

namespace attnrt::scheduler {
namespace {

TEST(HistogramTest, BucketsTileTheLineWithoutGaps) {
  for (int bits : {2, 4, 8}) {
    std::uint64_t expected_lower = 0;
    for (int i = 0; i < 40 << bits && expected_lower < (1ull << 40); ++i) {
      ASSERT_EQ(Histogram::BucketLower(i, bits), expected_lower) << "bits " << bits << " i " << i;
      const std::uint64_t upper = Histogram::BucketUpper(i, bits);
      ASSERT_GT(upper, expected_lower);
      ASSERT_EQ(Histogram::BucketOf(expected_lower, bits), i);
      ASSERT_EQ(Histogram::BucketOf(upper - 1, bits), i);
      // Relative width never above 2^-bits once past the exact range.
      if (expected_lower >= (1u << bits)) {
        ASSERT_LE((upper - expected_lower) * (1u << bits), expected_lower);
      }
      expected_lower = upper;
    }
  }
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h(8, 16);
  for (int v : {1, 1, 2, 3, 3, 3, 200}) h.Record(v);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(s.sum, 213u);
  EXPECT_EQ(s.max, 200u);
  EXPECT_EQ(s.CountAtMost(1), 2u);
  EXPECT_EQ(s.CountAtMost(2), 3u);
  EXPECT_EQ(s.CountAtMost(199), 6u);
  EXPECT_EQ(s.CountAtMost(200), 7u);
}

TEST(HistogramTest, PercentilesWithinBucketResolutionOfExact) {
  Histogram h(4, 40);
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(11.0, 1.0);  // ~60 us median, in ns
  std::vector<std::uint64_t> values(20000);
  for (auto& v : values) {
    v = static_cast<std::uint64_t>(dist(rng));
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  HistogramSnapshot s = h.Snapshot();
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    const double exact = static_cast<double>(values[static_cast<std::size_t>(p * values.size())]);
    EXPECT_NEAR(s.Percentile(p), exact, exact / 16 + 1) << "p" << p;
  }
  EXPECT_EQ(s.Percentile(1.0), static_cast<double>(values.back()));
  EXPECT_NEAR(s.Mean(), static_cast<double>(s.sum) / s.count, 1e-9);
}

TEST(HistogramTest, HugeValuesLandInTheLastBucketAndKeepMax) {
  Histogram h(4, 20);
  h.Record(1ull << 50);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.max, 1ull << 50);
  EXPECT_EQ(s.counts.back(), 1u);
}

TEST(HistogramTest, EmptyHistogramPercentileIsZero) {
  Histogram h(4, 20);
  EXPECT_EQ(h.Snapshot().Percentile(0.99), 0.0);
}

// RecordAll of a batch leaves what Record of each value would: bucket counts, sum, max.
TEST(HistogramTest, RecordAllMatchesRecordingEachValue) {
  std::mt19937_64 rng(5);
  Histogram each(4, 40), all(4, 40);
  for (int batch = 0; batch < 200; ++batch) {
    std::vector<std::uint64_t> values(rng() % 130);
    for (std::uint64_t& v : values) {
      // Runs of nearby values (a batch's queue delays), jumps, zeros and huge ones.
      const int kind = static_cast<int>(rng() % 8);
      v = kind == 0 ? 0 : kind == 1 ? (std::uint64_t{1} << 45) + rng() % 1000 : 1000 + rng() % 64;
    }
    for (std::uint64_t v : values) each.Record(v);
    all.RecordAll(values);
  }
  const HistogramSnapshot a = each.Snapshot(), b = all.Snapshot();
  EXPECT_EQ(a.counts, b.counts);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.max, b.max);
  EXPECT_GT(a.count, 0u);
}

TEST(MetricsTest, PrometheusTextHasCountersGaugesAndCumulativeBuckets) {
  SchedulerMetrics m;
  m.Reject(RejectReason::kQueueFull);
  m.Reject(RejectReason::kQueueFull);
  m.Reject(RejectReason::kUnknownSequence);
  m.completed.store(4);
  m.latency_ns.Record(1500);      // 1.5 us
  m.latency_ns.Record(3'000'000); // 3 ms
  m.batch_size.Record(3);
  MetricsSnapshot s = m.Snapshot();
  s.submitted = 5;  // owned by the scheduler's admission counters
  s.pending = 2;
  EXPECT_EQ(s.rejected_total(), 3u);
  const std::string text = PrometheusText(s);
  EXPECT_NE(text.find("# TYPE attnrt_scheduler_requests_submitted_total counter\n"
                      "attnrt_scheduler_requests_submitted_total 5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("attnrt_scheduler_requests_rejected_total{reason=\"queue_full\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_requests_rejected_total{reason=\"unknown_sequence\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_pending_requests 2\n"), std::string::npos);
  // 1.5 us lies below 2^11 ns = 2.048 us; 3 ms above 2^21 ns = 2.1 ms, below 2^22 ns.
  EXPECT_NE(text.find("attnrt_scheduler_latency_seconds_bucket{le=\"1.024e-06\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_latency_seconds_bucket{le=\"2.048e-06\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_latency_seconds_bucket{le=\"0.004194304\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_latency_seconds_bucket{le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_latency_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_batch_size_bucket{le=\"2\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("attnrt_scheduler_batch_size_bucket{le=\"4\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace attnrt::scheduler
