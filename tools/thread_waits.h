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
#include <utility>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace attnrt::tools {

// One thread's scheduler counters at one time (nanoseconds since the thread started).
struct ThreadSample {
  std::int64_t tid = 0;
  std::string name;
  std::int64_t ran_ns = 0;     // on a CPU
  std::int64_t waited_ns = 0;  // runnable on a run queue, not running
  // Page faults it took (/proc/self/task/<tid>/stat): a minor one maps a page, and can wait on
  // the process's memory-map lock behind another thread's mmap, munmap or huge-page collapse.
  std::int64_t minor_faults = 0;
  std::int64_t major_faults = 0;
};

namespace internal {
// minflt and majflt of a /proc/.../stat line (fields 10 and 12; the name in field 2 may hold
// spaces and parentheses, so count from the last ')').
inline bool ParseFaults(const std::string& stat, std::int64_t* minor, std::int64_t* major) {
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::size_t at = close + 1;
  std::int64_t fields[10] = {};
  for (int field = 3; field <= 12; ++field) {  // state is field 3
    while (at < stat.size() && stat[at] == ' ') ++at;
    const std::size_t end = stat.find(' ', at);
    if (at >= stat.size()) return false;
    if (field >= 10) {
      try {
        fields[field - 3] = std::stoll(stat.substr(at, end - at));
      } catch (...) {
        return false;
      }
    }
    at = end == std::string::npos ? stat.size() : end;
  }
  *minor = fields[10 - 3];
  *major = fields[12 - 3];
  return true;
}
}  // namespace internal

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
    std::ifstream stat_line(entry.path() / "stat");
    std::string line;
    if (std::getline(stat_line, line)) {
      (void)internal::ParseFaults(line, &s.minor_faults, &s.major_faults);
    }
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
        d.minor_faults = std::max<std::int64_t>(0, a.minor_faults - b.minor_faults);
        d.major_faults = std::max<std::int64_t>(0, a.major_faults - b.major_faults);
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

// "attnrt-gpu-done waited 2.61 ms for a CPU (ran 120.3 ms, 12 page faults), ..." for the
// first `most` threads of ThreadWaitsBetween's order, and the sums over all of them.
inline std::string DescribeThreadWaits(const std::vector<ThreadSample>& waits, int most = 4) {
  if (waits.empty()) return "no per-thread scheduler statistics (/proc/self/task/*/schedstat)";
  std::int64_t total = 0, faults = 0;
  for (const ThreadSample& w : waits) {
    total += w.waited_ns;
    faults += w.minor_faults + w.major_faults;
  }
  std::string out;
  char b[200];
  for (int i = 0; i < most && i < static_cast<int>(waits.size()); ++i) {
    const ThreadSample& w = waits[static_cast<std::size_t>(i)];
    std::snprintf(b, sizeof b, "%s%s waited %.2f ms (ran %.1f ms, %lld page faults)",
                  i == 0 ? "" : ", ", w.name.c_str(), w.waited_ns * 1e-6, w.ran_ns * 1e-6,
                  static_cast<long long>(w.minor_faults + w.major_faults));
    out += b;
  }
  std::snprintf(b, sizeof b, "; %zu threads, %.2f ms of waiting and %lld page faults in all",
                waits.size(), total * 1e-6, static_cast<long long>(faults));
  return out + b;
}

// Host-wide memory-management counters of /proc/vmstat that stall a faulting thread: page
// faults, and transparent huge pages allocated at a fault (zeroing 2 MiB), collapsed by
// khugepaged (the memory-map lock held for writing meanwhile) or compacted for (direct
// compaction). Empty where /proc/vmstat is missing.
inline std::vector<std::pair<std::string, std::int64_t>> SampleVmCounters() {
  static const char* const kNames[] = {"pgfault",          "pgmajfault",   "thp_fault_alloc",
                                       "thp_collapse_alloc", "compact_stall", "compact_fail"};
  std::vector<std::pair<std::string, std::int64_t>> out;
  std::ifstream in("/proc/vmstat");
  std::string name;
  std::int64_t value = 0;
  while (in >> name >> value) {
    for (const char* k : kNames) {
      if (name == k) out.emplace_back(name, value);
    }
  }
  return out;
}

// The host's CPU time stolen by the hypervisor, summed over every CPU (ms; the `steal` column of
// /proc/stat's "cpu" line, in clock ticks), or -1 without it. A thread whose virtual CPU the
// hypervisor does not run counts as running in its own schedstat, and only steal shows it.
inline double StolenCpuMs() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  std::int64_t v[8] = {};
  if (!(in >> cpu) || cpu != "cpu") return -1;
  for (std::int64_t& x : v) {
    if (!(in >> x)) return -1;
  }
#if defined(__linux__)
  const long ticks = sysconf(_SC_CLK_TCK);  // USER_HZ, the unit of /proc/stat
#else
  const long ticks = 100;
#endif
  return ticks > 0 ? static_cast<double>(v[7]) * 1000.0 / ticks : -1;
}

// "pgfault +1234, thp_fault_alloc +0, ..." from `before` to `after` (names in both).
inline std::string DescribeVmCounters(
    const std::vector<std::pair<std::string, std::int64_t>>& before,
    const std::vector<std::pair<std::string, std::int64_t>>& after) {
  std::string out;
  for (const auto& [name, value] : after) {
    for (const auto& [b_name, b_value] : before) {
      if (b_name != name) continue;
      out += (out.empty() ? "" : ", ") + name + " +" + std::to_string(value - b_value);
    }
  }
  return out.empty() ? "no /proc/vmstat" : out + " (host-wide)";
}

}  // namespace attnrt::tools
