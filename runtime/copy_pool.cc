#include "runtime/copy_pool.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "api/internal/thread_name.h"

namespace attnrt::runtime {

void StreamingCopy(void* to, const void* from, std::size_t bytes) {
#if defined(__x86_64__)
  if ((reinterpret_cast<std::uintptr_t>(to) & 15u) == 0) {
    auto* dst = static_cast<__m128i*>(to);
    const auto* src = static_cast<const __m128i*>(from);
    const std::size_t words = bytes / 16;
    std::size_t i = 0;
    for (; i + 4 <= words; i += 4) {
      const __m128i a = _mm_loadu_si128(src + i), b = _mm_loadu_si128(src + i + 1),
                    c = _mm_loadu_si128(src + i + 2), d = _mm_loadu_si128(src + i + 3);
      _mm_stream_si128(dst + i, a);
      _mm_stream_si128(dst + i + 1, b);
      _mm_stream_si128(dst + i + 2, c);
      _mm_stream_si128(dst + i + 3, d);
    }
    for (; i < words; ++i) _mm_stream_si128(dst + i, _mm_loadu_si128(src + i));
    std::memcpy(static_cast<char*>(to) + words * 16, static_cast<const char*>(from) + words * 16,
                bytes - words * 16);
    _mm_sfence();  // the streaming stores are weakly ordered: visible before the hand-off
    return;
  }
#endif
  std::memcpy(to, from, bytes);
}

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
