// CopyPool: every item of every job runs exactly once, on the caller and the helpers, and Run()
// returns only when all are done; helpers that spin between jobs, and ones that sleep (spin 0)
// and are woken by Run() or Prepare().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/copy_pool.h"

namespace attnrt::runtime {
namespace {

using std::chrono::microseconds;

TEST(CopyPoolTest, EveryItemRunsExactlyOncePerJob) {
  for (microseconds spin : {microseconds(0), microseconds(200)}) {
    for (int helpers : {0, 1, 3}) {
      CopyPool pool(helpers, spin);
      EXPECT_EQ(pool.helpers(), helpers);
      for (int n : {0, 1, 2, 7, 128, 1000}) {
        for (int job = 0; job < 20; ++job) {
          if (job % 3 == 1) pool.Prepare();
          std::vector<std::atomic<int>> hits(n);
          pool.Run(n, [&](int i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
          for (int i = 0; i < n; ++i) {
            ASSERT_EQ(hits[i].load(), 1) << "helpers " << helpers << " n " << n << " item " << i
                                         << " spin " << spin.count();
          }
        }
      }
    }
  }
}

// Jobs of different sizes back to back: a helper still finishing one job never claims an item
// of the next under the old job's size, and Run() never returns before its own items are done.
TEST(CopyPoolTest, BackToBackJobsOfChangingSizeStayApart) {
  CopyPool pool(3, microseconds(500));
  for (int job = 0; job < 2000; ++job) {
    const int n = 2 + (job * 37) % 61;
    std::vector<std::atomic<int>> hits(n);
    pool.Run(n, [&](int i) {
      ASSERT_LT(i, n);
      hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " item " << i;
  }
}

// Two threads submitting jobs at once (the executor's launcher and completion thread): each
// job still runs every item exactly once, with its own task, and Run() returns only after them.
TEST(CopyPoolTest, JobsFromTwoThreadsStayApart) {
  for (microseconds spin : {microseconds(0), microseconds(300)}) {
    CopyPool pool(3, spin);
    auto submitter = [&pool](int seed) {
      for (int job = 0; job < 1000; ++job) {
        const int n = 2 + (job * 31 + seed) % 67;
        std::vector<std::atomic<int>> hits(n);
        pool.Run(n, [&](int i) {
          ASSERT_LT(i, n);
          hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        for (int i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "seed " << seed << " job " << job << " item " << i;
        }
      }
    };
    std::thread other(submitter, 7);
    submitter(0);
    other.join();
  }
}

TEST(CopyPoolTest, HelpersShareTheWork) {
  for (microseconds spin : {microseconds(0), microseconds(200)}) {
    CopyPool pool(3, spin);
    std::mutex mu;
    std::set<std::thread::id> ids;
    // Items slow enough that the helpers wake before the caller finishes them all.
    pool.Run(64, [&](int) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_GE(ids.size(), 2u) << "no helper took an item (spin " << spin.count() << " us)";
    EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u) << "the caller must work too";
  }
}

TEST(CopyPoolTest, CopiesLandWhereAsked) {
  CopyPool pool(2, microseconds(100));
  constexpr int kRows = 200;
  constexpr int kRowBytes = 24 * 1024;
  std::vector<char> src(kRows * kRowBytes), dst(kRows * kRowBytes, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 7);
  pool.Run(kRows, [&](int j) {
    std::memcpy(dst.data() + j * kRowBytes, src.data() + j * kRowBytes, kRowBytes);
  });
  EXPECT_EQ(src, dst);
}

}  // namespace
}  // namespace attnrt::runtime
