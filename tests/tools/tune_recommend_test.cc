// Tests tools/tune_recommend.h: the tuner's rules for a recommendation, on made-up measurements.
#include "tools/tune_recommend.h"

#include <vector>

#include <gtest/gtest.h>

namespace attnrt::tools {
namespace {

// A point at `rate` whose runs complete `thru` req/s with these p99s (us).
TunePoint MakePoint(double rate, int window_us, int max_batch, double thru,
                    std::vector<double> p99s, std::int64_t rejected = 0) {
  TunePoint p;
  p.rate = rate;
  p.window_us = window_us;
  p.max_batch = max_batch;
  for (double p99 : p99s) {
    OpenLoopResult r;
    r.throughput_per_s = thru;
    r.p99_us = p99;
    r.rejected = rejected;
    p.runs.push_back(r);
  }
  return p;
}

TEST(TuneRecommendTest, SummaryIsTheMedianAndTheRange) {
  const TunePoint p = MakePoint(100, 0, 8, 100, {300, 100, 200});
  EXPECT_DOUBLE_EQ(p.p99(), 200);
  EXPECT_DOUBLE_EQ(p.p99_min(), 100);
  EXPECT_DOUBLE_EQ(p.p99_max(), 300);
}

TEST(TuneRecommendTest, OverlappingRangesAreTiesThatGoToTheSmallerWindowThenBatch) {
  // The case: one noisy run each would have picked the 1863 us setting.
  const std::vector<TunePoint> points = {
      MakePoint(200, 1000, 32, 200, {2516, 1900, 2300}),
      MakePoint(200, 200, 32, 200, {1863, 2400, 2100}),
      MakePoint(200, 200, 8, 200, {2000, 2450, 2200}),
  };
  const Recommendation rec = Recommend(points, 200, 5000);
  ASSERT_NE(rec.best, nullptr);
  EXPECT_EQ(rec.ties.size(), 3u);
  EXPECT_EQ(rec.best->window_us, 200);
  EXPECT_EQ(rec.best->max_batch, 8);
}

TEST(TuneRecommendTest, ClearlyFasterWinsOverTheSmallerWindow) {
  const std::vector<TunePoint> points = {
      MakePoint(200, 0, 8, 200, {4000, 4100, 3900}),
      MakePoint(200, 200, 8, 200, {1000, 1050, 980}),
  };
  const Recommendation rec = Recommend(points, 200, 5000);
  ASSERT_NE(rec.best, nullptr);
  EXPECT_EQ(rec.best->window_us, 200);
  EXPECT_EQ(rec.ties.size(), 1u);
}

TEST(TuneRecommendTest, ShedLoadSlowThroughputAndShortenedPointsAreNeverRecommended) {
  TunePoint shortened = MakePoint(200, 0, 8, 200, {100});
  shortened.shortened = true;
  const std::vector<TunePoint> points = {
      MakePoint(200, 0, 32, 200, {100, 100, 100}, /*rejected=*/5),
      MakePoint(200, 200, 32, 150, {100, 100, 100}),  // 75% of the rate
      shortened,
      MakePoint(200, 1000, 32, 195, {900, 950, 1000}),
  };
  const Recommendation rec = Recommend(points, 200, 5000);
  ASSERT_NE(rec.best, nullptr);
  EXPECT_EQ(rec.best->window_us, 1000);
}

TEST(TuneRecommendTest, NearestMissIsTheLowestP99AmongThoseThatKeepUp) {
  const std::vector<TunePoint> points = {
      MakePoint(200, 0, 8, 200, {9000, 9100, 9200}),
      MakePoint(200, 200, 8, 200, {6000, 6100, 6200}),
      MakePoint(200, 1000, 8, 100, {3000, 3000, 3000}),  // faster, but does not keep up
  };
  const Recommendation rec = Recommend(points, 200, 5000);
  EXPECT_EQ(rec.best, nullptr);
  ASSERT_NE(rec.nearest_miss, nullptr);
  EXPECT_EQ(rec.nearest_miss->window_us, 200);
  EXPECT_NE(rec.miss_reason.find("22% over the objective"), std::string::npos) << rec.miss_reason;
}

TEST(TuneRecommendTest, WhenNothingKeepsUpTheNearestMissCompletesTheMost) {
  const std::vector<TunePoint> points = {
      MakePoint(1000, 0, 8, 400, {9000}),
      MakePoint(1000, 200, 32, 700, {9000}),
  };
  const Recommendation rec = Recommend(points, 1000, 5000);
  EXPECT_EQ(rec.best, nullptr);
  ASSERT_NE(rec.nearest_miss, nullptr);
  EXPECT_EQ(rec.nearest_miss->max_batch, 32);
  EXPECT_NE(rec.miss_reason.find("no setting keeps up"), std::string::npos) << rec.miss_reason;
}

TEST(TuneRecommendTest, OnlyShortenedPointsLeaveNoNearestMiss) {
  TunePoint shortened = MakePoint(1e6, 0, 8, 500, {9000});
  shortened.shortened = true;
  const Recommendation rec = Recommend({shortened}, 1e6, 5000);
  EXPECT_EQ(rec.best, nullptr);
  EXPECT_EQ(rec.nearest_miss, nullptr);
  EXPECT_NE(rec.miss_reason.find("far past"), std::string::npos);
}

}  // namespace
}  // namespace attnrt::tools
