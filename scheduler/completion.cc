// CompletionPool and the ResultFuture methods (scheduler/completion.h, attnrt/request.h).
#include "scheduler/completion.h"

#include <algorithm>
#include <climits>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attnrt {
namespace scheduler::internal {
namespace {

using Clock = std::chrono::steady_clock;

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

#if defined(__linux__)
// Sleeps while *word == expected, for at most `timeout` (negative: no limit). Spurious returns
// are fine: the caller re-checks.
void FutexWait(const std::atomic<std::uint32_t>* word, std::uint32_t expected,
               std::chrono::nanoseconds timeout) {
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout.count() >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    tsp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
          tsp, nullptr, 0);
}

void FutexWakeAll(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}
#endif

}  // namespace

bool Completion::Wait(std::chrono::nanoseconds timeout) {
  if (ready()) return true;
  const Clock::time_point start = Clock::now();
  const bool bounded = timeout.count() >= 0;
  const Clock::time_point deadline =
      bounded ? start + std::chrono::duration_cast<Clock::duration>(timeout)
              : Clock::time_point::max();
  // Polling before sleeping: a result due within the poll is taken without the sleep and the
  // wake-up, which cost several microseconds each (the caller's share of a B=1 round trip).
  bool took_slot = false;
  const std::chrono::nanoseconds poll = pool->BeginSpin(&took_slot);
  const Clock::time_point poll_until =
      std::min(deadline, start + std::chrono::duration_cast<Clock::duration>(poll));
  bool polled_ready = false;
  while (Clock::now() < poll_until) {
    if (ready()) {
      polled_ready = true;
      break;
    }
    CpuRelax();
  }
  pool->EndSpin(took_slot);
  if (polled_ready) return true;
  std::atomic<std::uint32_t>& word = state;
  while (true) {
    std::uint32_t s = word.load(std::memory_order_acquire);
    if (s == kReady) return true;
    const Clock::time_point now = Clock::now();
    if (bounded && now >= deadline) return false;
    // Tell Fulfil that someone sleeps (kPending -> kSleeping); it then makes the wake call.
    if (s == kPending && !word.compare_exchange_strong(s, kSleeping, std::memory_order_acq_rel)) {
      if (s == kReady) return true;
    }
#if defined(__linux__)
    FutexWait(&word, kSleeping,
              bounded ? std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now)
                      : std::chrono::nanoseconds(-1));
#else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
#endif
  }
}

CompletionPool::CompletionPool(std::chrono::nanoseconds spin, int max_spinners)
    : spin_(std::max(spin, kShortPoll)), max_spinners_(std::max(1, max_spinners)) {}

std::chrono::nanoseconds CompletionPool::BeginSpin(bool* took_slot) {
  *took_slot = false;
  if (spin_ <= kShortPoll) return kShortPoll;
  if (spinners_.fetch_add(1, std::memory_order_relaxed) < max_spinners_) {
    *took_slot = true;
    return spin_;
  }
  spinners_.fetch_sub(1, std::memory_order_relaxed);
  return kShortPoll;
}

Completion* CompletionPool::Acquire() {
  // Items leaving the shared queue are counted a refill at a time (refs_: see completion.h).
  Completion* c = free_.Pop([this](Completion** out, std::size_t n) { Grow(out, n); },
                            [this](std::size_t n) {
                              refs_.fetch_add(static_cast<std::int64_t>(n),
                                              std::memory_order_relaxed);
                            });
  c->state.store(Completion::kPending, std::memory_order_relaxed);
  c->refs.store(2, std::memory_order_relaxed);  // the scheduler's and the future's
  return c;
}

void CompletionPool::Fulfil(Completion* c, DecodeResult result) {
  c->result = std::move(result);
  const std::uint32_t before = c->state.exchange(Completion::kReady, std::memory_order_acq_rel);
#if defined(__linux__)
  if (before == Completion::kSleeping) FutexWakeAll(&c->state);
#else
  (void)before;
#endif
  Release(c);
}

void CompletionPool::Release(Completion* c) {
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  c->result = DecodeResult();  // frees the output of a result nobody took
  // Into this thread's cache, still counted; a spill to the shared queue uncounts a refill's
  // worth. refs_ cannot reach 0 there: the owner's reference goes only in Orphan, after Close
  // has taken every shard's lock. Once closed, the slow path: uncount one, maybe the last.
  if (free_.PushToShard(c, [this](std::size_t n) {
        refs_.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_acq_rel);
      })) {
    return;
  }
  free_.Push(c);
  Unref(1);
}

void CompletionPool::Grow(Completion** out, std::size_t n) {
  const std::size_t count = std::max(kSlab, n);
  auto slab = std::make_unique<Completion[]>(count);
  std::vector<Completion*> spare;
  spare.reserve(count - n);
  for (std::size_t i = 0; i < count; ++i) {
    slab[i].pool = this;
    if (i < n) {
      out[i] = &slab[i];
    } else {
      spare.push_back(&slab[i]);
    }
  }
  free_.PushBulk(spare.data(), spare.size());
  MutexLock lock(&grow_mu_);
  slabs_.push_back(std::move(slab));
}

void CompletionPool::Orphan() {
  const std::size_t cached = free_.Close();
  Unref(static_cast<std::int64_t>(cached) + 1);  // the cached ones and the owner's
}

void CompletionPool::Unref(std::int64_t n) {
  if (refs_.fetch_sub(n, std::memory_order_acq_rel) == n) delete this;
}

}  // namespace scheduler::internal

// ---- ResultFuture -------------------------------------------------------------------------------

ResultFuture::ResultFuture(ResultFuture&& other) noexcept
    : completion_(std::exchange(other.completion_, nullptr)) {}

ResultFuture& ResultFuture::operator=(ResultFuture&& other) noexcept {
  if (this != &other) {
    Reset();
    completion_ = std::exchange(other.completion_, nullptr);
  }
  return *this;
}

ResultFuture::~ResultFuture() { Reset(); }

void ResultFuture::Reset() {
  if (completion_ != nullptr) {
    completion_->pool->Release(completion_);
    completion_ = nullptr;
  }
}

bool ResultFuture::ready() const { return completion_ != nullptr && completion_->ready(); }

void ResultFuture::wait() const {
  if (completion_ != nullptr) completion_->Wait(std::chrono::nanoseconds(-1));
}

std::future_status ResultFuture::WaitForNs(std::chrono::nanoseconds timeout) const {
  if (completion_ == nullptr) return std::future_status::ready;  // get() then says why
  // nanoseconds::max() means no limit (wait_for of a year or more); a negative timeout polls.
  const std::chrono::nanoseconds limit = timeout == std::chrono::nanoseconds::max()
                                             ? std::chrono::nanoseconds(-1)
                                             : std::max(timeout, std::chrono::nanoseconds(0));
  return completion_->Wait(limit) ? std::future_status::ready : std::future_status::timeout;
}

DecodeResult ResultFuture::get() {
  if (completion_ == nullptr) {
    DecodeResult r;
    r.status = FailedPreconditionError(
        "ResultFuture::get() on a future without a result (default-constructed, moved from, or "
        "already taken)");
    return r;
  }
  completion_->Wait(std::chrono::nanoseconds(-1));
  DecodeResult r = std::move(completion_->result);
  Reset();
  return r;
}

}  // namespace attnrt
