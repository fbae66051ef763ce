// Requests outstanding per sequence (submitted, not yet completed), so that a call that changes
// a sequence's cache (free, fork, prefill) can refuse while decodes of it are in flight instead
// of racing them. Internal to scheduler/.
//
// Thread safety: every method from any thread. Sharded by sequence id; one short lock per call.
// A sequence whose count returns to 0 keeps its entry (a sequence decoding one request at a time
// would otherwise allocate and free a map node per request: the intake benchmark's malloc/free);
// zero entries are erased by RunIfIdle for its sequence (free, fork, prefill) and by a sweep when
// a shard holds twice the entries it kept at its last sweep, so memory follows the sequences that
// were active lately.
#pragma once

#include <algorithm>
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
    auto [it, inserted] = s.outstanding.try_emplace(id, 0);
    ++it->second;
    if (inserted && s.outstanding.size() > s.sweep_at) Sweep(s);
  }

  void Remove(SequenceId id) {
    Shard& s = ShardOf(id);
    MutexLock lock(&s.mu);
    auto it = s.outstanding.find(id);
    if (it != s.outstanding.end() && it->second > 0) --it->second;
  }

  // Entries held (with a count of 0 or more), for tests.
  std::size_t EntriesForTesting() {
    std::size_t n = 0;
    for (Shard& s : shards_) {
      MutexLock lock(&s.mu);
      n += s.outstanding.size();
    }
    return n;
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
      if (it != s.outstanding.end() && it->second == 0) {
        s.outstanding.erase(it);
        it = s.outstanding.end();
      }
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
  static constexpr std::size_t kMinSweepAt = 64;
  struct alignas(64) Shard {
    Mutex mu;
    std::unordered_map<SequenceId, int> outstanding GUARDED_BY(mu);
    std::size_t sweep_at GUARDED_BY(mu) = kMinSweepAt;  // sweep when the map grows past this
  };
  // Erases the shard's zero entries; the next sweep waits until it holds twice what is left.
  static void Sweep(Shard& s) REQUIRES(s.mu) {
    std::erase_if(s.outstanding, [](const auto& entry) { return entry.second == 0; });
    s.sweep_at = std::max(kMinSweepAt, 2 * s.outstanding.size());
  }
  Shard& ShardOf(SequenceId id) {
    return shards_[(id * 0x9E3779B97F4A7C15ull) >> 58];  // top 6 bits: 64 shards
  }
  std::array<Shard, kShards> shards_;
};

}  // namespace attnrt::scheduler::internal
