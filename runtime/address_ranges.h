// The address ranges an allocator has handed out, so "does this pointer lie in my memory?" is a
// map lookup rather than a driver call. Header-only; no CUDA.
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>

#include "api/internal/mutex.h"

namespace attnrt::runtime {

class AddressRanges {
 public:
  void Add(const void* base, std::size_t bytes) {
    MutexLock lock(&mu_);
    ranges_[Address(base)] = bytes;
  }
  void Remove(const void* base) {
    MutexLock lock(&mu_);
    ranges_.erase(Address(base));
  }
  void Clear() {
    MutexLock lock(&mu_);
    ranges_.clear();
  }
  bool Contains(const void* p) const {
    MutexLock lock(&mu_);
    return Find(Address(p)) != ranges_.end();
  }
  // Whether each non-null pointer lies in a range (false for all null), one lock and, where
  // they share the range of the first (a request's q/k/v/out/lse in one staged record), one map
  // lookup: a B=128 plan checked 640 pointers one lookup each (H100: plan 50 us against 21 for
  // host-memory pieces, 2026-11-26 r11).
  bool ContainsAll(std::initializer_list<const void*> pointers) const {
    MutexLock lock(&mu_);
    std::uintptr_t lo = 0, hi = 0;  // the last range found: [lo, hi)
    bool any = false;
    for (const void* p : pointers) {
      if (p == nullptr) continue;
      any = true;
      const std::uintptr_t a = Address(p);
      if (a >= lo && a < hi) continue;
      const auto it = Find(a);
      if (it == ranges_.end()) return false;
      lo = it->first;
      hi = it->first + it->second;
    }
    return any;
  }
  std::size_t size() const {
    MutexLock lock(&mu_);
    return ranges_.size();
  }

 private:
  static std::uintptr_t Address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  // The range holding address a, or end().
  std::map<std::uintptr_t, std::size_t>::const_iterator Find(std::uintptr_t a) const
      REQUIRES(mu_) {
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return ranges_.end();
    --it;
    return a < it->first + it->second ? it : ranges_.end();
  }

  mutable Mutex mu_;
  std::map<std::uintptr_t, std::size_t> ranges_ GUARDED_BY(mu_);  // base -> bytes
};

}  // namespace attnrt::runtime
