// A thread that sleeps a short period over and over and records how late each wake-up comes.
// On a core with nothing else to run a wake-up is late by the timer's slack and the kernel's
// wake-up latency (microseconds to tens of microseconds); one late by milliseconds means the
// host did not run the thread at all (the hypervisor preempted the virtual CPU, another tenant),
// which no code in this process caused. Open-loop runs (tools/open_loop.h) keep one beside the
// runtime to tell a stall of the host from a stall of the runtime: the lent GPU machines have
// stretches in which every thread of a run stops for milliseconds at a time (2026-11-29).
// Standard library only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace attnrt::tools {

// The canary the open-loop harness's callers run: a wake-up every 100 us; one later than 200 us
// (tens of microseconds on an idle core) is logged as a stall of the host.
inline constexpr std::chrono::microseconds kCanaryPeriod{100}, kCanaryThreshold{200};

// One wake-up later than the threshold: due at `due_ns` (from the log's origin), `late_ns` after.
struct CanaryStall {
  std::int64_t due_ns = 0;
  std::int64_t late_ns = 0;
};

// The wake-ups of a canary, kept as counts and the stalls (wake-ups later than the threshold).
// Thread safety: one writer (Add); read after it stops.
class CanaryLog {
 public:
  static constexpr std::size_t kMaxStalls = 4096;  // kept in order; the counts cover all

  explicit CanaryLog(std::int64_t threshold_ns) : threshold_ns_(threshold_ns) {}

  // A wake-up due at `due_ns` that came at `woke_ns` (both from the origin).
  void Add(std::int64_t due_ns, std::int64_t woke_ns) {
    ++wakeups_;
    const std::int64_t late = std::max<std::int64_t>(woke_ns - due_ns, 0);
    if (late <= threshold_ns_) return;
    ++stall_count_;
    late_total_ns_ += late;
    if (late > longest_.late_ns) longest_ = {due_ns, late};
    if (stalls_.size() < kMaxStalls) stalls_.push_back({due_ns, late});
  }

  std::int64_t threshold_ns() const { return threshold_ns_; }
  std::int64_t wakeups() const { return wakeups_; }
  std::int64_t stall_count() const { return stall_count_; }  // late by more than the threshold
  std::int64_t late_total_ns() const { return late_total_ns_; }  // their lateness, summed
  CanaryStall longest() const { return longest_; }
  const std::vector<CanaryStall>& stalls() const { return stalls_; }

  // How much of the stalls' time ([due, due + late]) lies in [from_ns, to_ns].
  std::int64_t StalledDuring(std::int64_t from_ns, std::int64_t to_ns) const {
    std::int64_t sum = 0;
    for (const CanaryStall& s : stalls_) {
      const std::int64_t a = std::max(from_ns, s.due_ns), b = std::min(to_ns, s.due_ns + s.late_ns);
      if (b > a) sum += b - a;
    }
    return sum;
  }

  // "N of W wake-ups late by over T us (longest L us, due at t=.. ms; S ms in all)".
  std::string Describe() const {
    char buffer[200];
    if (stall_count_ == 0) {
      std::snprintf(buffer, sizeof buffer, "none of %lld wake-ups late by over %.0f us",
                    static_cast<long long>(wakeups_), threshold_ns_ * 1e-3);
    } else {
      std::snprintf(buffer, sizeof buffer,
                    "%lld of %lld wake-ups late by over %.0f us (longest %.0f us, due at t=%.2f "
                    "ms; %.2f ms in all)",
                    static_cast<long long>(stall_count_), static_cast<long long>(wakeups_),
                    threshold_ns_ * 1e-3, longest_.late_ns * 1e-3, longest_.due_ns * 1e-6,
                    late_total_ns_ * 1e-6);
    }
    return buffer;
  }

 private:
  std::int64_t threshold_ns_;
  std::int64_t wakeups_ = 0, stall_count_ = 0, late_total_ns_ = 0;
  CanaryStall longest_;
  std::vector<CanaryStall> stalls_;
};

// The thread: from construction until Stop(), sleeps until `period` past its last due time
// (timer slack 1 us) and logs the wake-up against `origin`. Thread safety: Stop from the
// constructing thread.
class HostCanary {
 public:
  using Clock = std::chrono::steady_clock;

  HostCanary(Clock::time_point origin, std::chrono::microseconds period,
             std::chrono::microseconds threshold)
      : log_(std::chrono::duration_cast<std::chrono::nanoseconds>(threshold).count()),
        thread_([this, origin, period] { Run(origin, period); }) {}
  HostCanary(const HostCanary&) = delete;
  HostCanary& operator=(const HostCanary&) = delete;
  ~HostCanary() { Stop(); }

  // Joins the thread (at most one period) and returns the log.
  const CanaryLog& Stop() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
    return log_;
  }

 private:
  void Run(Clock::time_point origin, std::chrono::microseconds period) {
#if defined(__linux__)
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    auto since = [origin](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin).count();
    };
    Clock::time_point due = Clock::now() + period;
    while (!stop_.load(std::memory_order_acquire)) {
      std::this_thread::sleep_until(due);
      const Clock::time_point woke = Clock::now();
      log_.Add(since(due), since(woke));
      // The next due time from the wake-up: one stall is logged once, not as a burst of
      // wake-ups that are all behind.
      due = woke + period;
    }
  }

  CanaryLog log_;  // written by the thread only, read after it is joined
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace attnrt::tools
