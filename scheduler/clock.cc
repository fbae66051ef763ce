// SteadyClock maps straight onto std::chrono::steady_clock; ManualClock notifies under its mutex
// so that RemoveListener can promise no call is in progress once it returns.
#include "scheduler/clock.h"

#include <algorithm>

namespace attnrt::scheduler {

ClockNanos SteadyClock::Now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::optional<std::chrono::steady_clock::time_point> SteadyClock::RealTimeOf(
    ClockNanos deadline) const {
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline));
}

SteadyClock* SteadyClock::Default() {
  static SteadyClock clock;
  return &clock;
}

void ManualClock::AddListener(ClockListener* listener) {
  MutexLock lock(&mu_);
  listeners_.push_back(listener);
}

void ManualClock::RemoveListener(ClockListener* listener) {
  MutexLock lock(&mu_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener), listeners_.end());
}

void ManualClock::Advance(std::chrono::nanoseconds delta) {
  MutexLock lock(&mu_);
  now_.fetch_add(std::max<std::int64_t>(0, delta.count()), std::memory_order_acq_rel);
  for (ClockListener* listener : listeners_) listener->OnClockAdvanced();
}

}  // namespace attnrt::scheduler
