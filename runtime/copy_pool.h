// A few helper threads that split one large host copy job with the calling thread: the
// executor packs a piece's q/k/v (24 KB per request at H=32, D=128: 3 MB for 128 requests)
// into pinned staging faster than one thread's memcpy bandwidth allows.
//
// Thread safety: Run() may be called from one thread at a time (the executor's submitting
// thread); the helpers only run work handed to them by Run().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  void Run(int n, const std::function<void(int)>& task);

 private:
  void HelperLoop();
  void Work();  // claims and runs items of the current job until none are left

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;  // GUARDED_BY(mu_)
  int n_ = 0;                                       // GUARDED_BY(mu_)
  int next_ = 0;                                    // GUARDED_BY(mu_)
  int unfinished_ = 0;                              // GUARDED_BY(mu_)
  unsigned long long job_ = 0;                      // GUARDED_BY(mu_): bumps once per Run()
  bool stop_ = false;                               // GUARDED_BY(mu_)
};

}  // namespace attnrt::runtime
