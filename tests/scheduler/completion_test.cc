// ResultFuture over the pooled completion state (scheduler/completion.h): delivery across
// threads (polled and slept-through), timeouts, empty futures, a future outliving its pool's
// owner, and reuse under concurrency.
#include "scheduler/completion.h"

#include <gtest/gtest.h>

#include "scheduler/handle_access.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace attnrt::scheduler::internal {
namespace {

using namespace std::chrono_literals;

DecodeResult ResultWith(std::size_t n, float value) {
  DecodeResult r;
  r.output.assign(n, FloatToHalf(value));
  return r;
}

// An owner that orphans its pool when it goes, like the scheduler.
struct Owner {
  CompletionPool* pool = new CompletionPool();
  ~Owner() { pool->Orphan(); }
};

TEST(ResultFutureTest, DeliveredFromAnotherThreadAfterTheWaiterSleeps) {
  Owner owner;
  Completion* c = owner.pool->Acquire();
  ResultFuture f = HandleAccess::MakeFuture(c);
  ASSERT_TRUE(f.valid());
  EXPECT_FALSE(f.ready());
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);  // well past the poll: the waiter sleeps on the futex
    owner.pool->Fulfil(c, ResultWith(8, 1.5f));
  });
  DecodeResult r = f.get();
  producer.join();
  EXPECT_TRUE(r.status.ok());
  ASSERT_EQ(r.output.size(), 8u);
  EXPECT_EQ(HalfToFloat(r.output[7]), 1.5f);
  EXPECT_FALSE(f.valid()) << "get() takes the result";
}

// The long poll goes to at most max_spinners waiters at once; the others poll briefly, and a
// slot given back is taken again.
TEST(CompletionPoolTest, LongPollIsRationedAmongWaiters) {
  CompletionPool* pool = new CompletionPool(200us, 2);
  bool a = false, b = false, c = false;
  EXPECT_EQ(pool->BeginSpin(&a), 200us);
  EXPECT_EQ(pool->BeginSpin(&b), 200us);
  EXPECT_EQ(pool->BeginSpin(&c), CompletionPool::kShortPoll);
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(c);
  pool->EndSpin(c);
  pool->EndSpin(a);
  bool d = false;
  EXPECT_EQ(pool->BeginSpin(&d), 200us);
  EXPECT_TRUE(d);
  pool->EndSpin(d);
  pool->EndSpin(b);
  pool->Orphan();
}

// A result due within the long poll is taken while polling; one past it after a sleep, and the
// slot is free again afterwards either way.
TEST(CompletionPoolTest, WaiterGivesItsPollSlotBack) {
  CompletionPool* pool = new CompletionPool(50ms, 1);
  for (auto delay : {1ms, 100ms}) {
    Completion* c = pool->Acquire();
    ResultFuture f = HandleAccess::MakeFuture(c);
    std::thread producer([&] {
      std::this_thread::sleep_for(delay);
      pool->Fulfil(c, ResultWith(4, 2.0f));
    });
    EXPECT_EQ(HalfToFloat(f.get().output[3]), 2.0f);
    producer.join();
    bool slot = false;
    EXPECT_EQ(pool->BeginSpin(&slot), 50ms) << "the waiter kept its poll slot";
    pool->EndSpin(slot);
  }
  pool->Orphan();
}

TEST(ResultFutureTest, ReadyResultIsTakenWithoutWaiting) {
  Owner owner;
  Completion* c = owner.pool->Acquire();
  ResultFuture f = HandleAccess::MakeFuture(c);
  DecodeResult delivered;
  delivered.status = CancelledError("request cancelled before dispatch");
  owner.pool->Fulfil(c, std::move(delivered));
  EXPECT_TRUE(f.ready());
  EXPECT_EQ(f.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(f.get().status.code(), StatusCode::kCancelled);
}

TEST(ResultFutureTest, WaitForTimesOutThenSeesTheResult) {
  Owner owner;
  Completion* c = owner.pool->Acquire();
  ResultFuture f = HandleAccess::MakeFuture(c);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(f.wait_for(5ms), std::future_status::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 5ms);
  EXPECT_EQ(f.wait_for(0s), std::future_status::timeout);
  EXPECT_EQ(f.wait_for(-1s), std::future_status::timeout) << "a negative timeout polls";
  std::thread producer([&] {
    std::this_thread::sleep_for(10ms);
    owner.pool->Fulfil(c, ResultWith(4, 2.0f));
  });
  EXPECT_EQ(f.wait_for(std::chrono::hours::max()), std::future_status::ready)
      << "an unbounded wait must not overflow the deadline";
  producer.join();
  EXPECT_EQ(f.get().output.size(), 4u);
}

TEST(ResultFutureTest, EmptyFutureAnswersWithAStatus) {
  ResultFuture f;
  EXPECT_FALSE(f.valid());
  EXPECT_FALSE(f.ready());
  EXPECT_EQ(f.wait_for(1s), std::future_status::ready) << "nothing to wait for";
  DecodeResult r = f.get();
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status.message().find("ResultFuture::get()"), std::string::npos);
}

TEST(ResultFutureTest, MoveLeavesTheSourceEmpty) {
  Owner owner;
  Completion* c = owner.pool->Acquire();
  ResultFuture a = HandleAccess::MakeFuture(c);
  ResultFuture b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the contract under test
  ASSERT_TRUE(b.valid());
  owner.pool->Fulfil(c, ResultWith(2, 3.0f));
  ResultFuture d;
  d = std::move(b);
  EXPECT_EQ(d.get().output.size(), 2u);
}

TEST(ResultFutureTest, FutureOutlivesThePoolsOwner) {
  ResultFuture f;
  {
    Owner owner;
    Completion* c = owner.pool->Acquire();
    f = HandleAccess::MakeFuture(c);
    owner.pool->Fulfil(c, ResultWith(16, 0.25f));
  }  // the owner is gone; the pool lives while f holds its completion (ASan: no use after free)
  DecodeResult r = f.get();
  ASSERT_EQ(r.output.size(), 16u);
  EXPECT_EQ(HalfToFloat(r.output[0]), 0.25f);
}

TEST(ResultFutureTest, DroppedFuturesAndConcurrentDeliveryRecycleTheState) {
  Owner owner;
  constexpr int kThreads = 4, kPerThread = 20000;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Completion* c = owner.pool->Acquire();
        ResultFuture f = HandleAccess::MakeFuture(c);
        const float value = static_cast<float>((t * kPerThread + i) % 1024);
        std::thread deliver;
        if (i % 1000 == 0) {  // now and then across threads, the waiter asleep
          deliver = std::thread([&, c, value] { owner.pool->Fulfil(c, ResultWith(1, value)); });
        } else {
          owner.pool->Fulfil(c, ResultWith(1, value));
        }
        if (i % 3 == 0) {
          if (deliver.joinable()) deliver.join();
          continue;  // dropped without get(): released by the destructor
        }
        DecodeResult r = f.get();
        if (deliver.joinable()) deliver.join();
        if (r.output.size() != 1 || HalfToFloat(r.output[0]) != value) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0) << "a recycled completion delivered another request's result";
}

// The pool counts its completions a refill or spill at a time through per-thread caches: many
// futures fulfilled on one thread and released on others (caches spill), the owner leaving while
// some are outstanding and others sit in the caches, then the rest released from several threads
// concurrently: every result is right and the pool is freed exactly once (ASan/LSan: no leak, no
// use after free; TSan: no race).
TEST(ResultFutureTest, OwnerLeavesWhileFuturesAreSpreadOverThreads) {
  constexpr int kThreads = 4, kPerThread = 300;  // > two refills per thread: caches spill
  std::vector<std::vector<ResultFuture>> futures(kThreads);
  {
    Owner owner;
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < kPerThread; ++i) {
        Completion* c = owner.pool->Acquire();
        futures[t].push_back(HandleAccess::MakeFuture(c));
        owner.pool->Fulfil(c, ResultWith(1, static_cast<float>(t * kPerThread + i)));
      }
    }
    // Half of them released while the owner lives, from other threads (into their caches).
    std::vector<std::thread> early;
    for (int t = 0; t < kThreads; ++t) {
      early.emplace_back([&, t] {
        for (int i = 0; i < kPerThread / 2; ++i) futures[t][i] = ResultFuture();
      });
    }
    for (std::thread& th : early) th.join();
  }  // Orphan: the caches close; the pool lives on for the outstanding half
  std::atomic<int> wrong{0};
  std::vector<std::thread> late;
  for (int t = 0; t < kThreads; ++t) {
    late.emplace_back([&, t] {
      for (int i = kPerThread / 2; i < kPerThread; ++i) {
        DecodeResult r = futures[t][i].get();
        if (r.output.size() != 1 ||
            HalfToFloat(r.output[0]) != static_cast<float>(t * kPerThread + i)) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& th : late) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace attnrt::scheduler::internal
