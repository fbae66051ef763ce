// Clock: the scheduler's only source of time, injected so that the batching window, deadlines and
// latency metrics can be tested deterministically. SteadyClock is the real one; ManualClock only
// moves when a test advances it, and wakes its listeners (the batching thread) when it does.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "api/internal/mutex.h"

namespace attnrt::scheduler {

// Nanoseconds on one clock's own time line; only differences and comparisons are meaningful.
using ClockNanos = std::int64_t;
inline constexpr ClockNanos kNever = INT64_MAX;

// Notified after a ManualClock moves (never by SteadyClock, whose time moves by itself).
class ClockListener {
 public:
  virtual ~ClockListener() = default;
  virtual void OnClockAdvanced() = 0;
};

// Thread safety: every method may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual ClockNanos Now() const = 0;
  // The real (steady_clock) instant at which `deadline` on this clock will have passed, for a
  // timed sleep; nullopt means "unknowable: sleep until woken" (a manual clock wakes its
  // listeners when advanced).
  virtual std::optional<std::chrono::steady_clock::time_point> RealTimeOf(
      ClockNanos deadline) const = 0;
  virtual void AddListener(ClockListener* listener) = 0;
  // After it returns, `listener` is not being called and will not be called again.
  virtual void RemoveListener(ClockListener* listener) = 0;
};

class SteadyClock final : public Clock {
 public:
  ClockNanos Now() const override;
  std::optional<std::chrono::steady_clock::time_point> RealTimeOf(
      ClockNanos deadline) const override;
  void AddListener(ClockListener*) override {}
  void RemoveListener(ClockListener*) override {}

  // A process-wide instance (what Scheduler::Create uses when given no clock).
  static SteadyClock* Default();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(ClockNanos start = 0) : now_(start) {}

  ClockNanos Now() const override { return now_.load(std::memory_order_acquire); }
  std::optional<std::chrono::steady_clock::time_point> RealTimeOf(ClockNanos) const override {
    return std::nullopt;
  }
  void AddListener(ClockListener* listener) override EXCLUDES(mu_);
  void RemoveListener(ClockListener* listener) override EXCLUDES(mu_);

  // Moves time forward by `delta` (>= 0) and notifies every listener.
  void Advance(std::chrono::nanoseconds delta) EXCLUDES(mu_);

 private:
  std::atomic<ClockNanos> now_;
  Mutex mu_;  // also serialises notifications against RemoveListener
  std::vector<ClockListener*> listeners_ GUARDED_BY(mu_);
};

}  // namespace attnrt::scheduler
