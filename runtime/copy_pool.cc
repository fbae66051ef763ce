#include "runtime/copy_pool.h"

namespace attnrt::runtime {

CopyPool::CopyPool(int helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void CopyPool::Run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    n_ = n;
    next_ = 0;
    unfinished_ = n;
    ++job_;
  }
  cv_.notify_all();
  Work();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return unfinished_ == 0; });
  task_ = nullptr;
}

void CopyPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (task_ != nullptr && next_ < n_) {
    const int i = next_++;
    const std::function<void(int)>* task = task_;
    lock.unlock();
    (*task)(i);
    lock.lock();
    if (--unfinished_ == 0) cv_.notify_all();
  }
}

void CopyPool::HelperLoop() {
  unsigned long long seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (job_ != seen && task_ != nullptr && next_ < n_); });
      if (stop_) return;
      seen = job_;
    }
    Work();
  }
}

}  // namespace attnrt::runtime
