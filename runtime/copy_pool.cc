#include "runtime/copy_pool.h"

#include "api/internal/thread_name.h"

namespace attnrt::runtime {
namespace {

using Clock = std::chrono::steady_clock;

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

inline std::uint32_t GenerationOf(std::uint64_t state) {
  return static_cast<std::uint32_t>(state >> 32);
}

// The claim half of a state while Run() sets the job up: nothing can be claimed.
constexpr std::uint32_t kClosed = 0xFFFFFFFFu;

}  // namespace

CopyPool::CopyPool(int helpers, std::chrono::microseconds spin) : spin_(spin) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.NotifyAll();
  for (std::thread& t : threads_) t.join();
}

void CopyPool::WakeSleepers() {
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (sleeping_ > 0) {
      ++wakes_;
      wake = true;
    }
  }
  if (wake) cv_.NotifyAll();
}

void CopyPool::Prepare() {
  if (!threads_.empty()) WakeSleepers();
}

void CopyPool::Run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  MutexLock job(&run_mu_);
  // The previous job is complete (its Run returned after every item), so no helper still
  // counts into done_. The state is closed first: a helper that reads the new n_ (acquire)
  // then sees a generation other than the one it works on, and its claim fails.
  const std::uint32_t generation = ++generation_;
  const std::uint64_t open = static_cast<std::uint64_t>(generation) << 32;
  state_.store(open | kClosed, std::memory_order_relaxed);
  task_.store(&task, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  n_.store(n, std::memory_order_release);
  state_.store(open, std::memory_order_release);
  WakeSleepers();
  Work(generation);
  while (done_.load(std::memory_order_acquire) < n) CpuRelax();
}

void CopyPool::Work(std::uint32_t generation) {
  // Read after the generation was seen (acquire): this job's task and size, or a newer job's,
  // whose claims then fail on the generation.
  const int n = n_.load(std::memory_order_acquire);
  const std::function<void(int)>* task = task_.load(std::memory_order_relaxed);
  std::uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (GenerationOf(s) != generation) return;
    const auto i = static_cast<std::uint32_t>(s);
    if (i >= static_cast<std::uint32_t>(n)) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // s reloaded
    }
    (*task)(static_cast<int>(i));
    done_.fetch_add(1, std::memory_order_release);
    s = state_.load(std::memory_order_acquire);
  }
}

void CopyPool::HelperLoop() {
  attnrt::internal::NameThisThread("attnrt-pack");
  std::uint32_t seen = 0;
  std::uint64_t seen_wakes = 0;
  for (;;) {
    // Spin: a job that follows within spin_ of the last (or of a Prepare) finds us awake.
    Clock::time_point until = Clock::now() + spin_;
    for (;;) {
      const std::uint64_t state = state_.load(std::memory_order_acquire);
      const std::uint32_t generation = GenerationOf(state);
      if (generation != seen && static_cast<std::uint32_t>(state) != kClosed) {
        seen = generation;
        Work(generation);
        until = Clock::now() + spin_;
        continue;
      }
      if (stop_.load(std::memory_order_acquire)) return;
      if (Clock::now() >= until) break;
      for (int k = 0; k < 16; ++k) CpuRelax();
    }
    // Sleep until the next job or Prepare().
    MutexLock lock(&mu_);
    ++sleeping_;
    while (!stop_.load(std::memory_order_acquire) &&
           GenerationOf(state_.load(std::memory_order_acquire)) == seen && wakes_ == seen_wakes) {
      cv_.Wait(lock);
    }
    --sleeping_;
    seen_wakes = wakes_;
    if (stop_.load(std::memory_order_acquire)) return;
  }
}

}  // namespace attnrt::runtime
