// ManualClock moves only when advanced and notifies listeners; SteadyClock tracks steady_clock.
#include "scheduler/clock.h"

#include <gtest/gtest.h>

namespace attnrt::scheduler {
namespace {

struct CountingListener : ClockListener {
  void OnClockAdvanced() override { ++calls; }
  int calls = 0;
};

TEST(ManualClockTest, AdvanceMovesTimeAndNotifiesListenersUntilRemoved) {
  ManualClock clock(1000);
  CountingListener listener;
  clock.AddListener(&listener);
  EXPECT_EQ(clock.Now(), 1000);
  clock.Advance(std::chrono::microseconds(5));
  EXPECT_EQ(clock.Now(), 6000);
  EXPECT_EQ(listener.calls, 1);
  EXPECT_FALSE(clock.RealTimeOf(7000).has_value());  // no real instant: sleep until woken
  clock.RemoveListener(&listener);
  clock.Advance(std::chrono::nanoseconds(1));
  EXPECT_EQ(listener.calls, 1);
  EXPECT_EQ(clock.Now(), 6001);
}

TEST(SteadyClockTest, NowIsMonotonicAndMapsToSteadyClock) {
  SteadyClock clock;
  const ClockNanos a = clock.Now();
  const ClockNanos b = clock.Now();
  EXPECT_LE(a, b);
  auto real = clock.RealTimeOf(b + 1000);
  ASSERT_TRUE(real.has_value());
  EXPECT_EQ(real->time_since_epoch().count() * 1, std::chrono::duration_cast<
      std::chrono::steady_clock::duration>(std::chrono::nanoseconds(b + 1000)).count());
}

}  // namespace
}  // namespace attnrt::scheduler
