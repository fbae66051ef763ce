// How long each thread of this process waited for a CPU: Linux keeps, per thread, the time it
// ran and the time it spent runnable on a run queue without running (/proc/self/task/<tid>/
// schedstat). A thread that is woken (a futex, a timer) and then waits milliseconds for a core
// shows here and nowhere else: the host canary (host_canary.h), a thread that sleeps and wakes
// on whatever core is free, stays punctual while the runtime's completion thread, woken onto a
// core a spinning thread holds, waits its turn (H200 host, 2026-11-29: pieces taken 2.6 ms
// after their launch with the canary quiet). Open-loop runs (tools/open_loop.h) sample every
// thread before and after and report the ones that waited longest.
// Standard library only; elsewhere than Linux (or with schedstats off) samples are empty.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace attnrt::tools {

// One thread's scheduler counters at one time (nanoseconds since the thread started).
struct ThreadSample {
  std::int64_t tid = 0;
  std::string name;
  std::int64_t ran_ns = 0;     // on a CPU
  std::int64_t waited_ns = 0;  // runnable on a run queue, not running
};

// Every thread of this process, in no particular order; empty when /proc has no schedstat.
inline std::vector<ThreadSample> SampleThreads() {
  std::vector<ThreadSample> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    ThreadSample s;
    try {
      s.tid = std::stoll(entry.path().filename().string());
    } catch (...) {
      continue;
    }
    std::ifstream stat(entry.path() / "schedstat");
    if (!(stat >> s.ran_ns >> s.waited_ns)) continue;  // ended meanwhile, or no schedstats
    std::ifstream comm(entry.path() / "comm");
    std::getline(comm, s.name);
    out.push_back(std::move(s));
  }
  return out;
}

// Each thread's counters from `before` to `after` (a thread missing from `before` started in
// between and counts from zero; one missing from `after` ended and is left out), the longest
// waits first.
inline std::vector<ThreadSample> ThreadWaitsBetween(const std::vector<ThreadSample>& before,
                                                    const std::vector<ThreadSample>& after) {
  std::vector<ThreadSample> out;
  out.reserve(after.size());
  for (const ThreadSample& a : after) {
    ThreadSample d = a;
    for (const ThreadSample& b : before) {
      if (b.tid == a.tid) {
        d.ran_ns = std::max<std::int64_t>(0, a.ran_ns - b.ran_ns);
        d.waited_ns = std::max<std::int64_t>(0, a.waited_ns - b.waited_ns);
        break;
      }
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const ThreadSample& x, const ThreadSample& y) {
    return x.waited_ns != y.waited_ns ? x.waited_ns > y.waited_ns : x.tid < y.tid;
  });
  return out;
}

// "attnrt-gpu-done waited 2.61 ms for a CPU (ran 120.3 ms), ..." for the first `most`
// threads of ThreadWaitsBetween's order, and the sum over all of them.
inline std::string DescribeThreadWaits(const std::vector<ThreadSample>& waits, int most = 4) {
  if (waits.empty()) return "no per-thread scheduler statistics (/proc/self/task/*/schedstat)";
  std::int64_t total = 0;
  for (const ThreadSample& w : waits) total += w.waited_ns;
  std::string out;
  char b[160];
  for (int i = 0; i < most && i < static_cast<int>(waits.size()); ++i) {
    std::snprintf(b, sizeof b, "%s%s waited %.2f ms (ran %.1f ms)", i == 0 ? "" : ", ",
                  waits[static_cast<std::size_t>(i)].name.c_str(),
                  waits[static_cast<std::size_t>(i)].waited_ns * 1e-6,
                  waits[static_cast<std::size_t>(i)].ran_ns * 1e-6);
    out += b;
  }
  std::snprintf(b, sizeof b, "; %zu threads, %.2f ms of waiting in all", waits.size(),
                total * 1e-6);
  return out + b;
}

}  // namespace attnrt::tools
