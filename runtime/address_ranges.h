// The address ranges an allocator has handed out, so "does this pointer lie in my memory?" is a
// map lookup rather than a driver call. Header-only; no CUDA.
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
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
  bool Contains(const void* p) const {
    const std::uintptr_t a = Address(p);
    MutexLock lock(&mu_);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }
  std::size_t size() const {
    MutexLock lock(&mu_);
    return ranges_.size();
  }

 private:
  static std::uintptr_t Address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

  mutable Mutex mu_;
  std::map<std::uintptr_t, std::size_t> ranges_ GUARDED_BY(mu_);  // base -> bytes
};

}  // namespace attnrt::runtime
