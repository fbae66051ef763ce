// tools/thread_waits.h: per-thread run and run-queue times from /proc/self/task/*/schedstat.
#include "tools/thread_waits.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace attnrt::tools {
namespace {

const ThreadSample* Named(const std::vector<ThreadSample>& v, const std::string& name) {
  for (const ThreadSample& s : v) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

TEST(ThreadWaitsTest, DifferencesByThreadLongestWaitFirst) {
  const std::vector<ThreadSample> before = {{1, "main", 100, 10}, {2, "worker", 50, 5},
                                            {3, "gone", 7, 7}};
  const std::vector<ThreadSample> after = {{1, "main", 400, 30},      // ran 300, waited 20
                                           {2, "worker", 90, 2005},   // ran 40, waited 2000
                                           {4, "new", 11, 900}};      // started in between
  const std::vector<ThreadSample> d = ThreadWaitsBetween(before, after);
  ASSERT_EQ(d.size(), 3u);  // "gone" ended: left out
  EXPECT_EQ(d[0].name, "worker");
  EXPECT_EQ(d[0].waited_ns, 2000);
  EXPECT_EQ(d[0].ran_ns, 40);
  EXPECT_EQ(d[1].name, "new");
  EXPECT_EQ(d[1].waited_ns, 900);
  EXPECT_EQ(d[2].name, "main");
  EXPECT_EQ(d[2].waited_ns, 20);
  EXPECT_EQ(d[2].ran_ns, 300);
  const std::vector<ThreadSample> ms = {{1, "attnrt-gpu-done", 120'300'000, 2'610'000, 12, 0},
                                        {2, "x", 5'000'000, 1'000'000, 3, 1}};
  EXPECT_EQ(DescribeThreadWaits(ms, 1),
            "attnrt-gpu-done waited 2.61 ms (ran 120.3 ms, 12 page faults); 2 threads, 3.61 ms "
            "of waiting and 16 page faults in all");
  EXPECT_EQ(DescribeThreadWaits({}),
            "no per-thread scheduler statistics (/proc/self/task/*/schedstat)");
}

TEST(ThreadWaitsTest, ParsesFaultsAfterTheNameWhateverItHolds) {
  std::int64_t minor = -1, major = -1;
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt ...
  ASSERT_TRUE(internal::ParseFaults("12 (a (b) c) S 1 12 12 0 -1 4194560 345 0 7 0 5 6",
                                    &minor, &major));
  EXPECT_EQ(minor, 345);
  EXPECT_EQ(major, 7);
  EXPECT_FALSE(internal::ParseFaults("12 (x) S 1 2", &minor, &major));
  EXPECT_FALSE(internal::ParseFaults("no name here", &minor, &major));
}

TEST(ThreadWaitsTest, VmCountersDescribeTheirChange) {
  const std::vector<std::pair<std::string, std::int64_t>> before = {{"pgfault", 10},
                                                                    {"compact_stall", 2}};
  const std::vector<std::pair<std::string, std::int64_t>> after = {
      {"pgfault", 25}, {"compact_stall", 2}, {"thp_fault_alloc", 4}};
  EXPECT_EQ(DescribeVmCounters(before, after), "pgfault +15, compact_stall +0 (host-wide)");
  EXPECT_EQ(DescribeVmCounters({}, {}), "no /proc/vmstat");
#if defined(__linux__)
  EXPECT_GE(StolenCpuMs(), 0.0);
  const auto now = SampleVmCounters();
  ASSERT_FALSE(now.empty());
  EXPECT_EQ(now.front().first, "pgfault");
#endif
}

// A thread that touches fresh pages takes page faults, and its sample counts them.
TEST(ThreadWaitsTest, CountsAThreadsPageFaults) {
#if !defined(__linux__)
  GTEST_SKIP() << "per-thread fault counts are Linux's";
#else
  if (SampleThreads().empty()) GTEST_SKIP() << "this kernel keeps no per-thread schedstat";
  std::atomic<int> phase{0};
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "waits-test-pf");
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
    std::vector<char> fresh(std::size_t{64} << 20);  // 64 MiB: at least 32 faults (2 MiB pages)
    for (std::size_t i = 0; i < fresh.size(); i += 4096) fresh[i] = 1;
    phase.store(3);
    while (phase.load() != 4) std::this_thread::yield();
  });
  while (phase.load() != 1) std::this_thread::yield();
  const std::vector<ThreadSample> before = SampleThreads();
  phase.store(2);
  while (phase.load() != 3) std::this_thread::yield();
  const std::vector<ThreadSample> after = SampleThreads();
  phase.store(4);
  t.join();
  const std::vector<ThreadSample> d = ThreadWaitsBetween(before, after);
  const ThreadSample* s = Named(d, "waits-test-pf");
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->minor_faults + s->major_faults, 32) << DescribeThreadWaits(d);
#endif
}

// Two threads that spin on one CPU: each waits while the other runs, and the sample names them.
TEST(ThreadWaitsTest, ThreadsSharingOneCpuWaitForIt) {
#if !defined(__linux__)
  GTEST_SKIP() << "per-thread schedstat is Linux's";
#else
  if (SampleThreads().empty()) GTEST_SKIP() << "this kernel keeps no per-thread schedstat";
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  std::atomic<bool> stop{false};
  std::atomic<int> started{0}, pinned{0};
  auto hog = [&](const char* name) {
    pthread_setname_np(pthread_self(), name);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) pinned.fetch_add(1);
    started.fetch_add(1);
    while (!stop.load()) {
    }
  };
  std::thread c(hog, "waits-test-c"), d(hog, "waits-test-d");
  while (started.load() < 2) std::this_thread::yield();
  const std::vector<ThreadSample> from = SampleThreads();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::vector<ThreadSample> to = SampleThreads();
  stop.store(true);
  c.join();
  d.join();
  if (pinned.load() < 2) GTEST_SKIP() << "threads cannot be pinned to one CPU here";
  const std::vector<ThreadSample> waits = ThreadWaitsBetween(from, to);
  const ThreadSample* sc = Named(waits, "waits-test-c");
  const ThreadSample* sd = Named(waits, "waits-test-d");
  ASSERT_NE(sc, nullptr);
  ASSERT_NE(sd, nullptr);
  // 200 ms of one CPU shared by two spinners (and anything else the host puts there): together
  // they ran and waited about 2 x 200 ms, and each waited a good part of it.
  EXPECT_GT(sc->waited_ns, 20'000'000) << DescribeThreadWaits(waits);
  EXPECT_GT(sd->waited_ns, 20'000'000) << DescribeThreadWaits(waits);
  EXPECT_GT(sc->ran_ns + sd->ran_ns, 100'000'000) << DescribeThreadWaits(waits);
  EXPECT_NE(DescribeThreadWaits(waits).find("waits-test-"), std::string::npos);
#endif
}

}  // namespace
}  // namespace attnrt::tools
