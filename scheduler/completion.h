// Completion: the pooled state behind one ResultFuture (attnrt/request.h), from the Submit that
// made the future to the later of (result delivered, future done with it). CompletionPool
// recycles them, so the future form of Submit allocates nothing per request in the steady state
// (a std::promise allocated a shared state per request, and set_value another).
//
// Contract
//   - Acquire() hands out a Completion holding two references: the scheduler's (dropped by
//     Fulfil) and the future's (dropped by ResultFuture's get() or destructor). The last one
//     returns it to the pool.
//   - Fulfil() stores the result and wakes a waiter; it is called exactly once per Completion.
//   - The pool outlives its owner: Orphan() drops the owner's reference, and the pool deletes
//     itself when the last outstanding Completion is released (a future may outlive the
//     scheduler that made it).
//   - Waiting: a waiter polls for the pool's `spin` (SchedulerOptions::result_spin), then sleeps
//     on a futex (Linux; elsewhere it polls with short sleeps). At most `max_spinners` waiters
//     poll that long at once; the others poll kShortPoll only, so many waiting threads cannot
//     take every core from the threads that produce their results. Fulfil makes a system call
//     only when a waiter is asleep.
// Thread safety: every method from any thread; one Completion is waited on by one thread at a
// time (a future is not shared).
// Internal to scheduler/ (and the ResultFuture methods in completion.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <attnrt/request.h>

#include "api/internal/mutex.h"
#include "scheduler/free_list.h"

namespace attnrt::scheduler::internal {

class CompletionPool;

struct Completion {
  // kPending -> kReady once; kSleeping while a waiter sleeps on a pending result.
  static constexpr std::uint32_t kPending = 0, kReady = 1, kSleeping = 2;
  std::atomic<std::uint32_t> state{kPending};
  std::atomic<int> refs{0};
  DecodeResult result;  // written by Fulfil before state becomes kReady
  CompletionPool* pool = nullptr;

  // Waits until the result is ready or `timeout` has passed (a negative timeout: no limit).
  // True when ready.
  bool Wait(std::chrono::nanoseconds timeout);
  bool ready() const { return state.load(std::memory_order_acquire) == kReady; }
};

class CompletionPool {
 public:
  // What a waiter beyond max_spinners polls before it sleeps.
  static constexpr std::chrono::nanoseconds kShortPoll = std::chrono::microseconds(4);

  // `spin`: how long a waiter polls before it sleeps; `max_spinners` (>= 1): how many may poll
  // that long at once.
  explicit CompletionPool(std::chrono::nanoseconds spin = kShortPoll, int max_spinners = 1);
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  Completion* Acquire();
  void Fulfil(Completion* c, DecodeResult result);
  // Drops one reference; the last returns `c` to the pool.
  void Release(Completion* c);
  // The owner is done with the pool: it deletes itself once nothing is outstanding.
  void Orphan();

  // How long the calling waiter may poll: `spin` when a spinner slot is free (taken: give it
  // back with EndSpin(true)), else kShortPoll.
  std::chrono::nanoseconds BeginSpin(bool* took_slot);
  void EndSpin(bool took_slot) {
    if (took_slot) spinners_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  ~CompletionPool() = default;
  // Drops n counts of refs_; the one that reaches 0 deletes the pool.
  void Unref(std::int64_t n);
  // Makes n Completions into out[0..n) (a slab of at least kSlab; the rest go to the free list).
  void Grow(Completion** out, std::size_t n) EXCLUDES(grow_mu_);

  static constexpr std::size_t kSlab = 256;
  // 1 for the owner + the Completions outside free_'s shared queue (handed out, or in its shard
  // caches until Orphan closes them): counted a refill or a spill (32) at a time, so a request
  // touches no pool-wide atomic (it cost 11% of the 8-producer intake benchmark's CPU).
  std::atomic<std::int64_t> refs_{1};
  const std::chrono::nanoseconds spin_;
  const int max_spinners_;
  alignas(64) std::atomic<int> spinners_{0};
  ShardedFreeList<Completion> free_;
  Mutex grow_mu_;
  std::vector<std::unique_ptr<Completion[]>> slabs_ GUARDED_BY(grow_mu_);
};

}  // namespace attnrt::scheduler::internal
