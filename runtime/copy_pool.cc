#include "runtime/copy_pool.h"

#include "api/internal/thread_name.h"

namespace attnrt::runtime {

CopyPool::CopyPool(int helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (std::thread& t : threads_) t.join();
}

void CopyPool::Run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  {
    MutexLock lock(&mu_);
    task_ = &task;
    n_ = n;
    next_ = 0;
    unfinished_ = n;
    ++job_;
  }
  cv_.NotifyAll();
  Work();
  MutexLock lock(&mu_);
  while (unfinished_ != 0) cv_.Wait(lock);
  task_ = nullptr;
}

void CopyPool::Work() {
  MutexLock lock(&mu_);
  while (task_ != nullptr && next_ < n_) {
    const int i = next_++;
    const std::function<void(int)>* task = task_;
    lock.Unlock();
    (*task)(i);
    lock.Lock();
    if (--unfinished_ == 0) cv_.NotifyAll();
  }
}

void CopyPool::HelperLoop() {
  attnrt::internal::NameThisThread("attnrt-pack");
  unsigned long long seen = 0;
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (!(stop_ || (job_ != seen && task_ != nullptr && next_ < n_))) cv_.Wait(lock);
      if (stop_) return;
      seen = job_;
    }
    Work();
  }
}

}  // namespace attnrt::runtime
