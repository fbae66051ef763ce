// tools/host_canary.h: the canary's log of late wake-ups, and the thread that fills it.
#include "tools/host_canary.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace attnrt::tools {
namespace {

TEST(CanaryLogTest, LogsTheWakeUpsLaterThanItsThreshold) {
  CanaryLog log(200'000);
  log.Add(1'000'000, 1'010'000);  // 10 us late
  log.Add(2'000'000, 2'150'000);  // 150 us: under the threshold
  log.Add(3'000'000, 3'300'000);  // 300 us: a stall
  log.Add(4'000'000, 6'000'000);  // 2 ms: the longest
  log.Add(7'000'000, 6'990'000);  // early (a clock read before the due time): not late
  EXPECT_EQ(log.wakeups(), 5);
  EXPECT_EQ(log.stall_count(), 2);
  EXPECT_EQ(log.late_total_ns(), 300'000 + 2'000'000);
  EXPECT_EQ(log.longest().due_ns, 4'000'000);
  EXPECT_EQ(log.longest().late_ns, 2'000'000);
  ASSERT_EQ(log.stalls().size(), 2u);
  EXPECT_EQ(log.stalls()[0].due_ns, 3'000'000);
  EXPECT_EQ(log.stalls()[1].due_ns, 4'000'000);
  EXPECT_EQ(log.Describe(),
            "2 of 5 wake-ups late by over 200 us (longest 2000 us, due at t=4.00 ms; 2.30 ms in "
            "all)");
}

// The stalls' time ([due, due + late]) inside a window: whole, cut at either end, or outside.
TEST(CanaryLogTest, StalledDuringCountsTheOverlapOnly) {
  CanaryLog log(100'000);
  log.Add(1'000'000, 1'500'000);  // stalled over [1.0, 1.5] ms
  log.Add(3'000'000, 4'000'000);  // [3.0, 4.0] ms
  EXPECT_EQ(log.StalledDuring(0, 10'000'000), 1'500'000);
  EXPECT_EQ(log.StalledDuring(1'250'000, 3'500'000), 250'000 + 500'000);
  EXPECT_EQ(log.StalledDuring(1'500'000, 3'000'000), 0);
  EXPECT_EQ(log.StalledDuring(5'000'000, 6'000'000), 0);
}

TEST(CanaryLogTest, KeepsTheFirstStallsAndCountsThemAll) {
  CanaryLog log(0);
  const int n = static_cast<int>(CanaryLog::kMaxStalls) + 10;
  for (int i = 0; i < n; ++i) log.Add(i * 1'000'000LL, i * 1'000'000LL + 5'000);
  EXPECT_EQ(log.stall_count(), n);
  EXPECT_EQ(log.late_total_ns(), n * 5'000LL);
  EXPECT_EQ(log.stalls().size(), CanaryLog::kMaxStalls);
  EXPECT_EQ(log.stalls().back().due_ns, (CanaryLog::kMaxStalls - 1) * 1'000'000LL);
}

TEST(CanaryLogTest, DescribesAQuietHost) {
  CanaryLog log(200'000);
  log.Add(0, 20'000);
  EXPECT_EQ(log.Describe(), "none of 1 wake-ups late by over 200 us");
}

// The thread wakes about once a period: never more often (each due time is a period past the
// last wake-up), and at least once over many periods.
TEST(HostCanaryTest, WakesOnceAPeriodUntilStopped) {
  const auto origin = std::chrono::steady_clock::now();
  HostCanary canary(origin, std::chrono::microseconds(1000), std::chrono::microseconds(200));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const CanaryLog& log = canary.Stop();
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin).count();
  EXPECT_GE(log.wakeups(), 1);
  EXPECT_LE(log.wakeups(), static_cast<std::int64_t>(elapsed_ms) + 1);
  EXPECT_LE(log.stall_count(), log.wakeups());
  EXPECT_EQ(&canary.Stop(), &log);  // a second Stop returns the same log
}

}  // namespace
}  // namespace attnrt::tools
