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
  const std::vector<ThreadSample> ms = {{1, "attnrt-gpu-done", 120'300'000, 2'610'000},
                                        {2, "x", 5'000'000, 1'000'000}};
  EXPECT_EQ(DescribeThreadWaits(ms, 1),
            "attnrt-gpu-done waited 2.61 ms (ran 120.3 ms); 2 threads, 3.61 ms of waiting in all");
  EXPECT_EQ(DescribeThreadWaits({}),
            "no per-thread scheduler statistics (/proc/self/task/*/schedstat)");
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
