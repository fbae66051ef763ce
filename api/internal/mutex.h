// Mutex, MutexLock and CondVar: std::mutex, std::unique_lock and std::condition_variable with
// the capability annotations of api/internal/thread_annotations.h, so that clang's
// -Wthread-safety checks every GUARDED_BY member (libstdc++'s std::mutex carries none). Same
// code as the std types underneath: no extra state, no extra cost. Internal: not a public header.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "api/internal/thread_annotations.h"

namespace attnrt {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the calling thread holds the mutex (where it cannot see the lock:
  // a callback invoked under it). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction; Unlock() and Lock() release and retake it in
// between (the destructor releases it only if held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable waited on through a MutexLock. The analysis cannot see that a wait
// returns with the lock held again, nor into a predicate it calls: waits with a condition are
// written as loops in the caller (`while (!ready_) cv_.Wait(lock);`), where the reads of guarded
// members are checked.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // std::cv_status::timeout once `deadline` passed.
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(MutexLock& lock,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(lock.lock_, deadline);
  }
  template <typename Rep, typename Period>
  std::cv_status WaitFor(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout) {
    return cv_.wait_for(lock.lock_, timeout);
  }
  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace attnrt
