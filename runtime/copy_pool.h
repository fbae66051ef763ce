// A few helper threads that split one large host copy job with the calling thread: the
// executor packs a piece's q/k/v (12 KB per request at H=32, Hkv=8, D=128: 1.5 MB for 128
// requests) into pinned staging faster than one thread's memcpy bandwidth allows.
//
// Waking a sleeping thread takes tens of microseconds on a loaded host, longer than a whole
// B=32 copy (H100 host, bench/results/2026-11-26_h100_launcher-overlap/r2: helpers woken per
// job made a 384 KB copy 3x slower than one thread). So items are claimed and completed through
// atomics, the caller spins for the last item, and a helper spins for up to `spin` after each
// job (and after Prepare()) before it sleeps: back-to-back jobs find it awake.
//
// Thread safety: Run() and Prepare() from any thread. Jobs run one at a time: a Run() that
// finds another job running waits for it (the executor's launcher packs and its completion
// thread copies outputs out through one pool). The helpers only run work handed to them by Run().
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "api/internal/mutex.h"

namespace attnrt::runtime {

class CopyPool {
 public:
  // `helpers` threads besides the caller (0: Run() does everything on the caller), each
  // spinning up to `spin` for the next job before it sleeps.
  CopyPool(int helpers, std::chrono::microseconds spin);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Wakes sleeping helpers ahead of a Run() that will come soon (they spin for it).
  void Prepare() EXCLUDES(mu_);

  // Calls task(i) for every i in [0, n) exactly once, spread over the caller and the helpers;
  // returns when all are done. `task` must not throw.
  void Run(int n, const std::function<void(int)>& task) EXCLUDES(mu_, run_mu_);

 private:
  void HelperLoop() EXCLUDES(mu_);
  // Claims and runs items of job `generation` until none are left (or a newer job began).
  void Work(std::uint32_t generation);
  void WakeSleepers() EXCLUDES(mu_);

  const std::chrono::microseconds spin_;
  // (generation << 32) | next item to claim; a generation per Run().
  std::atomic<std::uint64_t> state_{0};
  std::atomic<const std::function<void(int)>*> task_{nullptr};
  std::atomic<int> n_{0};
  std::atomic<int> done_{0};  // items of the current job finished
  std::atomic<bool> stop_{false};
  Mutex run_mu_;  // one job at a time
  std::uint32_t generation_ GUARDED_BY(run_mu_) = 0;

  Mutex mu_;  // sleeping and waking only
  CondVar cv_;
  int sleeping_ GUARDED_BY(mu_) = 0;
  std::uint64_t wakes_ GUARDED_BY(mu_) = 0;  // bumps per wake-up of the sleepers
  std::vector<std::thread> threads_;
};

}  // namespace attnrt::runtime
