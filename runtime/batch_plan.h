// The KV-cache side of a batch, shared by both executors: batch-level checks, per-request
// validation with a Status naming the field, one request per (sequence, layer), and advancing
// each accepted (sequence, layer) by one token (collecting copy-on-write copies). Internal to
// runtime/; no CUDA.
#pragma once

#include <functional>
#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "api/status.h"
#include "kvcache/kvcache.h"
#include "runtime/executor.h"

namespace attnrt::runtime {

// A request that passed validation and now owns a new token of its (sequence, layer).
struct PlannedRequest {
  int index = 0;      // position in Batch::requests
  int kv_length = 0;  // tokens attended, the new one included (position + 1)
};

struct BatchPlan {
  std::vector<Status> statuses;             // one per request; OK for the live ones
  std::vector<PlannedRequest> live;         // accepted requests, in batch order
  std::vector<kvcache::BlockCopy> copies;   // to apply before this batch's append, in order
  bool any_host = false;                    // some live request uses MemoryKind::kHost
  bool any_device = false;                  // some live request uses MemoryKind::kDevice
};

// Empty batches and batches over `max_batch_size` are malformed (InvalidArgument naming the
// size); the executor returns that and never calls done.
Status ValidateBatchShape(const Batch& batch, int max_batch_size);

// Bucket lists: non-empty, positive, strictly ascending (InvalidArgument naming the entry).
Status ValidateBuckets(const std::vector<int>& buckets);

// Prefill arguments (InvalidArgument/NotFound naming the field), before the cache is touched.
Status ValidatePrefill(const kvcache::SequenceTable& table, SequenceId id, int layer,
                       int num_tokens, const Half* k, const Half* v);

// The prompt's K/V for one layer: validates, appends `num_tokens` to the table, applies any
// copy-on-write copies and writes the tokens (synchronously). The caller has drained its
// running batches first. A write error after the append leaves the length advanced (the cache
// has no truncation); the Status says so.
Status PrefillCache(kvcache::KvCache& cache, SequenceId id, int layer, int num_tokens,
                    const Half* k, const Half* v);

// Checks a kDevice request's pointers; returns a Status naming the field (the CUDA executor
// passes one that asks the driver; null skips the check).
using DevicePointerCheck = std::function<Status(const BatchRequest& request, int index)>;

// Plans batches against one sequence table. Thread safety: none (the submitting thread owns it,
// as it owns the table).
// Thread safety: the planner owns the lock of the sequence table. Plan and FillBlockRow take it
// (the executor's submitting thread); sequence management and length queries from any other
// thread go through WithTable, so the scheduler may ask SequenceLength while batches are planned.
class BatchPlanner {
 public:
  BatchPlanner(kvcache::SequenceTable* table, bool allow_device_memory,
               DevicePointerCheck device_check)
      : table_(table), allow_device_memory_(allow_device_memory), device_check_(device_check) {}

  // Validates every request; the ones that pass get their token (AppendToken) and join
  // plan->live. A request that fails has a non-OK status and leaves the table untouched.
  void Plan(const Batch& batch, BatchPlan* plan);

  // Writes the block ids a request of `kv_length` tokens reads (ceil(kv_length / block_size))
  // into `row`; the rest of the row is left as is (kernels never read past kv_length).
  Status FillBlockRow(SequenceId id, int kv_length, std::int32_t* row) const;

  // Runs fn(table) under the table's lock and returns its result.
  template <typename Fn>
  auto WithTable(Fn&& fn) const {
    std::lock_guard<std::mutex> lock(table_mu_);
    return fn(*table_);
  }

 private:
  struct KeyHash {
    std::size_t operator()(const std::pair<SequenceId, int>& k) const {
      return std::hash<SequenceId>()(k.first * 0x9E3779B97F4A7C15ull ^
                                     static_cast<std::uint64_t>(k.second));
    }
  };

  mutable std::mutex table_mu_;
  kvcache::SequenceTable* table_;  // GUARDED_BY(table_mu_)
  bool allow_device_memory_;
  DevicePointerCheck device_check_;
  std::unordered_set<std::pair<SequenceId, int>, KeyHash> seen_;  // reused across batches
};

}  // namespace attnrt::runtime
