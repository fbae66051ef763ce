// A few helper threads that split one large host copy job with the calling thread: the
// executor packs a piece's q/k/v (24 KB per request at H=32, D=128: 3 MB for 128 requests)
// into pinned staging faster than one thread's memcpy bandwidth allows.
//
// Thread safety: Run() may be called from one thread at a time (the executor's submitting
// thread); the helpers only run work handed to them by Run().
#pragma once

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "api/internal/mutex.h"

namespace attnrt::runtime {

class CopyPool {
 public:
  // `helpers` threads besides the caller (0: Run() does everything on the caller).
  explicit CopyPool(int helpers);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Calls task(i) for every i in [0, n) exactly once, spread over the caller and the helpers;
  // returns when all are done. `task` must not throw.
  void Run(int n, const std::function<void(int)>& task) EXCLUDES(mu_);

 private:
  void HelperLoop() EXCLUDES(mu_);
  void Work() EXCLUDES(mu_);  // claims and runs items of the current job until none are left

  Mutex mu_;
  CondVar cv_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ GUARDED_BY(mu_) = nullptr;
  int n_ GUARDED_BY(mu_) = 0;
  int next_ GUARDED_BY(mu_) = 0;
  int unfinished_ GUARDED_BY(mu_) = 0;
  unsigned long long job_ GUARDED_BY(mu_) = 0;  // bumps once per Run()
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace attnrt::runtime
