// Test-only fault points an executor consults at fixed places: a KV block allocation, a batch's
// copy-on-write copies, its launch, and the whole batch after it ran. An armed point fails there
// as the real fault would; disarmed (always, outside tests) a point costs one relaxed load.
// Internal to runtime/; no CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "api/internal/mutex.h"

namespace attnrt::runtime {

// One place where a fault can be injected. Arm(count, skip): of the hits that follow, the first
// `skip` pass and the next `count` fail; then the point disarms itself.
// Thread safety: every method from any thread, concurrently with hits.
class FaultPoint {
 public:
  void Arm(int count, int skip = 0) {
    MutexLock lock(&mu_);
    skip_ = skip < 0 ? 0 : skip;
    count_ = count < 0 ? 0 : count;
    armed_.store(count_ > 0, std::memory_order_release);
  }
  void Disarm() { Arm(0); }

  // One pass through the point: true when this one must fail.
  bool Hit() {
    if (!armed_.load(std::memory_order_acquire)) return false;
    MutexLock lock(&mu_);
    if (count_ == 0) return false;
    if (skip_ > 0) {
      --skip_;
      return false;
    }
    if (--count_ == 0) armed_.store(false, std::memory_order_release);
    injected_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  bool armed() const { return armed_.load(std::memory_order_acquire); }
  // Failures this point has injected so far.
  std::int64_t injected() const { return injected_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> armed_{false};
  Mutex mu_;
  int skip_ GUARDED_BY(mu_) = 0;
  int count_ GUARDED_BY(mu_) = 0;
  std::atomic<std::int64_t> injected_{0};
};

// The fault points of one executor (both executors consult all four).
struct FaultInjection {
  // kvcache::BlockAllocator::Allocate answers ResourceExhausted, as a full pool would: for a
  // decode (growth or copy-on-write) inside planning, so the request fails alone and leaves its
  // sequence untouched; for a prefill, which then fails the same way.
  FaultPoint block_allocation;
  // A batch's copy-on-write copies fail before any is applied (hit only by batches that have
  // copies). The batch fails as a whole; its tokens and the copied blocks' earlier tokens are
  // lost (runtime/executor.h).
  FaultPoint copy;
  // The batch fails at launch: nothing runs, nothing is written; its tokens are lost.
  FaultPoint launch;
  // The batch fails as a whole after it ran, as a device error reported at completion would;
  // its tokens are lost.
  FaultPoint batch;

  void DisarmAll() {
    block_allocation.Disarm();
    copy.Disarm();
    launch.Disarm();
    batch.Disarm();
  }
};

// While one lives, every executor created without its options naming `faults` shares its
// FaultInjection: how a test reaches the executor behind a Runtime, whose options carry no test
// field. One at a time per process; test code only.
class ScopedFaultInjectionForTesting {
 public:
  ScopedFaultInjectionForTesting();
  ~ScopedFaultInjectionForTesting();
  ScopedFaultInjectionForTesting(const ScopedFaultInjectionForTesting&) = delete;
  ScopedFaultInjectionForTesting& operator=(const ScopedFaultInjectionForTesting&) = delete;

  FaultInjection& faults() { return *faults_; }
  FaultInjection* operator->() { return faults_.get(); }

 private:
  std::shared_ptr<FaultInjection> faults_;
};

// The FaultInjection a new executor without its own uses: the scoped one if any, else a fresh
// one (never null).
std::shared_ptr<FaultInjection> FaultInjectionForNewExecutor();

}  // namespace attnrt::runtime
