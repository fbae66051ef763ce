// The KV-cache side of a batch, shared by both executors: batch-level checks, per-request
// validation with a Status naming the field, one request per (sequence, layer), and advancing
// each accepted (sequence, layer) by one token (collecting copy-on-write copies). Internal to
// runtime/; no CUDA.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <attnrt/status.h>
#include "api/internal/mutex.h"
#include "api/internal/sequence_layer_set.h"
#include "kvcache/kvcache.h"
#include "runtime/executor.h"

namespace attnrt::runtime {

class BatchPlanner;

// A request that passed validation and now owns a new token of its (sequence, layer).
struct PlannedRequest {
  int index = 0;      // position in Batch::requests
  int kv_length = 0;  // tokens attended, the new one included (position + 1)
  bool copied = false;  // its token's block is copied on write by this batch (plan.copies)
  // Its table entry: the block row is read from it when the batch is packed (valid until then:
  // sequence calls wait for the planned batches to launch; see the class comment).
  const kvcache::SequenceTable::Sequence* sequence = nullptr;
};

struct BatchPlan {
  std::vector<Status> statuses;             // one per request; OK for the live ones
  std::vector<PlannedRequest> live;         // accepted requests, in batch order
  std::vector<kvcache::BlockCopy> copies;   // to apply before this batch's append, in order
  bool any_host = false;                    // some live request uses MemoryKind::kHost
  bool any_device = false;                  // some live request uses MemoryKind::kDevice
  // The executor clears it when the batch failed before every copy was applied: Settle then
  // counts the copied blocks' earlier tokens as lost too, on every layer.
  bool copies_applied = true;
};

// Empty batches and batches over `max_batch_size` are malformed (InvalidArgument naming the
// size); the executor returns that and never calls done. `parted` requests handed over before
// by SubmitPart count with the batch's own (which may then be none).
Status ValidateBatchShape(const Batch& batch, int max_batch_size, int parted = 0);

// A part of the batch being formed (Executor::SubmitPart) that joins `parted` requests handed
// over before: malformed (InvalidArgument, nothing changed) when empty, when the batch would
// then exceed `max_batch_size`, or when it sets ready_event (which only the closing Submit may).
Status ValidatePart(const Batch& part, int max_batch_size, int parted);

// The batch being formed through Executor::SubmitPart, for both executors: their batch state
// (a pointer to a struct with `Batch batch` and `BatchPlan plan`) and the submission lock it
// holds from the first part to the Submit that closes it (the submitting thread's alone; see
// the BatchPlanner comment). `open(&hold)` makes a fresh state and takes the lock into `hold`.
template <typename StatePtr>
class OpenBatch {
 public:
  // Requests handed over by the parts so far (0: no batch open).
  int parted() const {
    return state_ == nullptr ? 0 : static_cast<int>(state_->batch.requests.size());
  }
  bool is_open() const { return state_ != nullptr; }

  // A part: validated (ValidatePart; nothing changes on an error), the batch opened on the
  // first, its requests appended; the caller then plans state() from parted() as it was before.
  template <typename Open>
  Status Add(const Batch& part, int max_batch_size, Open&& open) {
    ATTNRT_RETURN_IF_ERROR(ValidatePart(part, max_batch_size, parted()));
    if (state_ == nullptr) state_ = open(&hold_);
    state_->batch.requests.insert(state_->batch.requests.end(), part.requests.begin(),
                                  part.requests.end());
    return Status::Ok();
  }
  auto& state() { return *state_; }

  // The closing Submit's state and lock: the open batch with `batch`'s requests appended (and
  // its ready_event), or, with none open, a fresh one holding `batch`.
  template <typename Open>
  StatePtr Close(Batch batch, std::unique_lock<std::mutex>* hold, Open&& open) {
    if (state_ == nullptr) {
      StatePtr state = open(hold);
      state->batch = std::move(batch);
      return state;
    }
    *hold = std::move(hold_);
    state_->batch.requests.insert(state_->batch.requests.end(), batch.requests.begin(),
                                  batch.requests.end());
    state_->batch.ready_event = batch.ready_event;
    return std::move(state_);
  }

  // An executor destroyed with a batch open drops it (its requests' tokens are taken, never
  // written) and releases the lock: the requests dropped.
  int Drop() {
    const int dropped = parted();
    hold_ = {};
    state_ = nullptr;
    return dropped;
  }

 private:
  StatePtr state_;
  std::unique_lock<std::mutex> hold_;
};

// Bucket lists: non-empty, positive, strictly ascending (InvalidArgument naming the entry).
Status ValidateBuckets(const std::vector<int>& buckets);

// Prefill arguments (InvalidArgument/NotFound naming the field), before the cache is touched.
Status ValidatePrefill(const kvcache::SequenceTable& table, SequenceId id, int layer,
                       int num_tokens, const Half* k, const Half* v);

// The prompt's K/V for one layer: validates, appends `num_tokens` to the table, applies any
// copy-on-write copies and writes the tokens (synchronously). The caller has drained its
// running batches first and holds the submission lock. A write error after the append leaves
// the length advanced (the cache has no truncation); the Status says so.
Status PrefillCache(kvcache::KvCache& cache, SequenceId id, int layer, int num_tokens,
                    const Half* k, const Half* v);

// The KV fields of ExecutorStats, read under the planner's table lock.
void FillKvStats(const BatchPlanner& planner, const kvcache::KvCache& cache, ExecutorStats* stats);

// Checks a kDevice request's pointers; returns a Status naming the field (the CUDA executor
// passes one that asks the driver; null skips the check).
using DevicePointerCheck = std::function<Status(const BatchRequest& request, int index)>;

// Plans batches against one sequence table, and keeps the two facts about in-flight work that
// make sequence calls safe beside it.
// Thread safety: the planner owns the lock of the sequence table. Plan and FillBlockRow take it
// (the executor's submitting thread); sequence management and length queries from any other
// thread go through WithTable, so the scheduler may ask SequenceLength while batches are planned.
//
// Submission lock: an executor holds LockSubmission() from Plan until the batch's work is queued
// in order (copy-on-write copies applied or queued; kernels launched, or the batch queued for
// the one thread that launches batches in plan order, or the job queued), and every call that
// changes the cache (create, fork, free, prefill) holds it too and, under it, waits for such a
// launch queue to drain. So no such call lands between a batch's plan and its launch: a block
// freed by it is reused only by work ordered after every queued batch (stream or worker order;
// Prefill drains first), and a copy-on-write source cannot be freed and rewritten before its
// copy. A batch queued for launch reads its block rows when it is packed: a later plan only
// appends to the rows it reads (a sequence in a batch owns its last block after that batch's
// plan, so no later plan copies it on write), and copy-on-write waits for the launch queue.
//
// Lost tokens: a request that passed Plan has taken its token; if its batch then fails, the K/V
// at that position is undefined. The executor reports the batch's outcome with Settle before its
// done callback; from then on requests and prefills of that (sequence, layer) fail with
// FailedPrecondition saying why (as do results of later batches already in flight that attended
// over the lost position), until the sequence is freed.
class BatchPlanner {
 public:
  BatchPlanner(kvcache::SequenceTable* table, bool allow_device_memory,
               DevicePointerCheck device_check)
      : table_(table), allow_device_memory_(allow_device_memory), device_check_(device_check) {}

  // Validates every request; the ones that pass get their token (AppendToken) and join
  // plan->live. A request that fails has a non-OK status and leaves the table untouched.
  void Plan(const Batch& batch, BatchPlan* plan) EXCLUDES(table_mu_) { PlanFrom(batch, 0, plan); }
  // Plan for requests [first, end) of `batch` only, onto the plan of the requests before them
  // (first = 0: a fresh plan): a batch planned part by part as its requests arrive (SubmitPart).
  // A (sequence, layer) planned in an earlier part counts as seen. Between the parts of one
  // batch the caller holds the submission lock and plans nothing else; `capacity` is the most
  // requests the batch may reach.
  void PlanFrom(const Batch& batch, int first, BatchPlan* plan, int capacity = 0)
      EXCLUDES(table_mu_);

  // Writes the block ids planned request `p` (of `batch`) reads, ceil(p.kv_length / block_size)
  // of its sequence's entry, into `row`; the rest of the row is left as is (kernels never read
  // past kv_length).
  Status FillBlockRow(const Batch& batch, const PlannedRequest& p, std::int32_t* row) const
      EXCLUDES(table_mu_);
  // FillBlockRow for each of `planned` (requests of `batch`) into rows + i * row_stride, under
  // one lock; a row that cannot be filled (cannot happen after a successful AppendToken) sets
  // (*statuses)[planned[i].index] to why.
  void FillBlockRows(const Batch& batch, std::span<const PlannedRequest> planned,
                     std::size_t row_stride, std::int32_t* rows,
                     std::vector<Status>* statuses) const EXCLUDES(table_mu_);

  // Runs fn(table) under the table's lock and returns its result.
  template <typename Fn>
  auto WithTable(Fn&& fn) const EXCLUDES(table_mu_) {
    MutexLock lock(&table_mu_);
    return fn(*table_);
  }

  // See the class comment. Taken before table_mu_ when both are held.
  [[nodiscard]] std::unique_lock<std::mutex> LockSubmission() {
    return std::unique_lock<std::mutex>(submission_mu_);
  }

  // After a batch ran, before its done callback: each live request that failed lost its token
  // (marked) — and, when its block was copied on write but plan->copies_applied is false, the
  // whole block on every layer (the new block never received the shared one's tokens); each
  // that succeeded but attended over a token lost earlier fails with that FailedPrecondition
  // instead. Call in completion order.
  void Settle(const Batch& batch, BatchPlan* plan) EXCLUDES(table_mu_);
  // Create, free and fork under the table lock, keeping the lost-token marks and the directory
  // of live ids in step.
  Status Create(SequenceId id) EXCLUDES(table_mu_);
  Status Free(SequenceId id) EXCLUDES(table_mu_);
  Status Fork(SequenceId parent, SequenceId child) EXCLUDES(table_mu_);
  // Whether `id` is live, without the table lock (sharded; Submit asks it on every request).
  bool Contains(SequenceId id) const;
  // PrefillCache under the table lock, refused on a (sequence, layer) that lost a token.
  Status Prefill(kvcache::KvCache& cache, SequenceId id, int layer, int num_tokens,
                 const Half* k, const Half* v) EXCLUDES(table_mu_);

 private:
  struct KeyHash {
    std::size_t operator()(const std::pair<SequenceId, int>& k) const {
      return std::hash<SequenceId>()(k.first * 0x9E3779B97F4A7C15ull ^
                                     static_cast<std::uint64_t>(k.second));
    }
  };

  struct LostToken {
    int position = 0;
    Status cause;
  };

  // The Status a request or prefill of (id, layer) gets, or OK.
  Status FillBlockRowLocked(const Batch& batch, const PlannedRequest& p, std::int32_t* row) const
      REQUIRES(table_mu_);
  Status LostTokenStatus(SequenceId id, int layer) const REQUIRES(table_mu_);
  void MarkTokenLost(SequenceId id, int layer, int position, const Status& cause)
      EXCLUDES(table_mu_);
  // Every layer of `id` holding a token in the block of `position` lost it from the block's start.
  void MarkBlockLost(SequenceId id, int position, const Status& cause) EXCLUDES(table_mu_);
  // Records a loss at `position` unless an earlier one is recorded.
  void RecordLost(SequenceId id, int layer, int position, const Status& cause)
      REQUIRES(table_mu_);
  Status CheckTokensIntact(SequenceId id, int layer, int kv_length) const EXCLUDES(table_mu_);

  // Live ids, sharded so that the scheduler's per-request existence check never waits for a
  // batch being planned. Written under table_mu_; each shard under its own lock.
  static constexpr int kDirectoryShards = 64;
  struct alignas(64) DirectoryShard {
    mutable Mutex mu;
    std::unordered_set<SequenceId> ids GUARDED_BY(mu);
  };
  DirectoryShard& ShardOf(SequenceId id) const {
    return directory_[(id * 0x9E3779B97F4A7C15ull) >> 58];
  }
  mutable std::array<DirectoryShard, kDirectoryShards> directory_;

  // Orders submissions against sequence calls (see the class comment); guards no data itself.
  std::mutex submission_mu_;
  mutable Mutex table_mu_;
  kvcache::SequenceTable* table_ PT_GUARDED_BY(table_mu_);
  // lost_count_ lets the completion path skip the lock when lost_ is empty.
  std::unordered_map<std::pair<SequenceId, int>, LostToken, KeyHash> lost_ GUARDED_BY(table_mu_);
  std::atomic<int> lost_count_{0};
  bool allow_device_memory_;
  DevicePointerCheck device_check_;
  // The (sequence, layer) pairs of the batch being planned.
  attnrt::internal::SequenceLayerSet seen_ GUARDED_BY(table_mu_);
  int seen_room_ GUARDED_BY(table_mu_) = 0;  // the pairs seen_ was sized for
  // Plan's scratch: each request's entry (null: unknown sequence), looked up before the loop.
  std::vector<kvcache::SequenceTable::Sequence*> found_ GUARDED_BY(table_mu_);
};

}  // namespace attnrt::runtime
