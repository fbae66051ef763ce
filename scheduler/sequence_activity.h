// Requests outstanding per sequence (submitted, not yet completed), so that a call that changes
// a sequence's cache (free, fork, prefill) can refuse while decodes of it are in flight instead
// of racing them. Internal to scheduler/.
//
// Thread safety: every method from any thread. Sharded by sequence id; one short lock per call.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "api/internal/mutex.h"

namespace attnrt::scheduler::internal {

class SequenceActivity {
 public:
  void Add(SequenceId id) {
    Shard& s = ShardOf(id);
    MutexLock lock(&s.mu);
    ++s.outstanding[id];
  }

  void Remove(SequenceId id) {
    Shard& s = ShardOf(id);
    MutexLock lock(&s.mu);
    auto it = s.outstanding.find(id);
    if (it != s.outstanding.end() && --it->second == 0) s.outstanding.erase(it);
  }

  // Runs fn() if no request of `id` is outstanding; FailedPrecondition naming `call` and the
  // count otherwise. fn runs without the shard lock held: it may wait for the executor, whose
  // completion path calls Remove. A Submit racing the call lands on either side of it (the
  // executor keeps that safe; see runtime/executor.h).
  template <typename Fn>
  Status RunIfIdle(SequenceId id, const char* call, Fn&& fn) {
    {
      Shard& s = ShardOf(id);
      MutexLock lock(&s.mu);
      auto it = s.outstanding.find(id);
      if (it != s.outstanding.end()) {
        return FailedPreconditionError(std::string(call) + ": sequence_id " + std::to_string(id) +
                                       " has " + std::to_string(it->second) +
                                       " decode request(s) submitted and not yet completed; "
                                       "call it after they complete");
      }
    }
    return std::forward<Fn>(fn)();
  }

 private:
  static constexpr int kShards = 64;
  struct alignas(64) Shard {
    Mutex mu;
    std::unordered_map<SequenceId, int> outstanding GUARDED_BY(mu);
  };
  Shard& ShardOf(SequenceId id) {
    return shards_[(id * 0x9E3779B97F4A7C15ull) >> 58];  // top 6 bits: 64 shards
  }
  std::array<Shard, kShards> shards_;
};

}  // namespace attnrt::scheduler::internal
