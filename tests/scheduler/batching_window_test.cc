// BatchingWindow: the dispatch rule of scheduler.h without threads or clocks.
#include "scheduler/batching_window.h"

#include <gtest/gtest.h>

namespace attnrt::scheduler {
namespace {

constexpr std::int64_t kDelay = 100'000;  // 100 us

TEST(BatchingWindowTest, FullBucketIsLargestBucketNotAboveMaxBatch) {
  EXPECT_EQ(BatchingWindow(8, 0, kDelay, {1, 2, 4, 8, 16}).full_bucket(), 8);
  EXPECT_EQ(BatchingWindow(6, 0, kDelay, {1, 2, 4, 8}).full_bucket(), 4);
  EXPECT_EQ(BatchingWindow(6, 0, kDelay, {}).full_bucket(), 6);     // no buckets: max itself
  EXPECT_EQ(BatchingWindow(6, 0, kDelay, {8, 16}).full_bucket(), 6);  // none fits: max itself
  EXPECT_EQ(BatchingWindow(8, 0, kDelay, {8, 1, 4, 2, 4}).full_bucket(), 8);  // any order
}

TEST(BatchingWindowTest, FullBucketDispatchesAtOnceWithinDelay) {
  BatchingWindow w(8, 0, kDelay, {1, 2, 4, 8});
  EXPECT_EQ(w.DispatchSize(8, 0, false), 8);
  EXPECT_EQ(w.DispatchSize(20, 0, false), 8);  // more than a bucket: one full bucket
}

TEST(BatchingWindowTest, PartialBatchWaitsForDelayThenTakesEverything) {
  BatchingWindow w(8, 0, kDelay, {1, 2, 4, 8});
  EXPECT_EQ(w.DispatchSize(3, 0, false), 0);
  EXPECT_EQ(w.DispatchSize(7, kDelay - 1, false), 0);
  EXPECT_EQ(w.DispatchSize(3, kDelay, false), 3);
  EXPECT_EQ(w.DispatchSize(7, kDelay + 5, false), 7);
  EXPECT_EQ(w.DispatchSize(0, kDelay, false), 0);
}

TEST(BatchingWindowTest, ZeroDelayDispatchesWhatIsThere) {
  BatchingWindow w(8, 0, 0, {1, 2, 4, 8});
  EXPECT_EQ(w.DispatchSize(1, 0, false), 1);
  EXPECT_EQ(w.DispatchSize(5, 0, false), 5);
  EXPECT_EQ(w.DispatchSize(12, 0, false), 8);
}

TEST(BatchingWindowTest, MaxBatchBetweenBucketsDispatchesFullBucketEarlyAndMaxAtDelay) {
  BatchingWindow w(6, 0, kDelay, {1, 2, 4, 8});
  EXPECT_EQ(w.DispatchSize(5, 0, false), 4);
  EXPECT_EQ(w.DispatchSize(6, kDelay, false), 6);
  EXPECT_EQ(w.BucketFor(6), 8);  // padded by the executor
  EXPECT_EQ(w.BucketFor(3), 4);
}

TEST(BatchingWindowTest, MinBatchSizeAddsPreferredSizesOnlyWithinDelay) {
  BatchingWindow w(16, 4, kDelay, {1, 2, 4, 8, 16});
  EXPECT_EQ(w.preferred_sizes(), (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(w.DispatchSize(3, 0, false), 0);  // below min_batch_size: wait
  EXPECT_EQ(w.DispatchSize(4, 0, false), 4);
  EXPECT_EQ(w.DispatchSize(7, 0, false), 4);   // the largest preferred size that fills
  EXPECT_EQ(w.DispatchSize(12, 0, false), 8);
  EXPECT_EQ(w.DispatchSize(2, kDelay, false), 2);  // past the delay min_batch_size is not honoured
}

TEST(BatchingWindowTest, FlushIgnoresTheWindow) {
  BatchingWindow w(8, 0, kDelay, {1, 2, 4, 8});
  EXPECT_EQ(w.DispatchSize(3, 0, true), 3);
  EXPECT_EQ(w.DispatchSize(30, 0, true), 8);
}

}  // namespace
}  // namespace attnrt::scheduler
