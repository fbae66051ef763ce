// RequestRecord: the scheduler-owned state of one request from Submit to completion (metadata,
// the q/k/v staging it was copied into, its output staging, its promise or callback), and
// RecordPool, the slab allocator that recycles them so that Submit allocates nothing in the steady
// state. Internal to scheduler/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include "api/internal/mutex.h"
#include "runtime/executor.h"
#include "scheduler/clock.h"
#include "scheduler/free_list.h"
#include "scheduler/request.h"

namespace attnrt::scheduler::internal {

struct Completion;

// RequestRecord::state packs a generation (bumped on every release, so stale handles miss) with a
// phase and the cancel-requested bit. The CAS kQueued -> kDispatched is the point of no return.
inline constexpr std::uint64_t kPhaseFree = 0;
inline constexpr std::uint64_t kPhaseQueued = 1;
inline constexpr std::uint64_t kPhaseDispatched = 2;
inline constexpr std::uint64_t kPhaseDone = 3;  // result being delivered
inline constexpr std::uint64_t kPhaseMask = 3;
inline constexpr std::uint64_t kCancelBit = 4;
inline constexpr int kGenerationShift = 8;

inline std::uint64_t GenerationOf(std::uint64_t state) { return state >> kGenerationShift; }

struct RequestRecord {
  // Written by the submitting thread before the record is enqueued.
  runtime::SequenceId sequence_id = 0;
  int layer = 0;
  int priority = 0;
  ClockNanos submit_ns = 0;
  ClockNanos deadline_ns = kNever;
  Half* out_dest = nullptr;
  float* lse_dest = nullptr;
  bool want_lse = false;
  // TensorMemory::kDevice: the caller's q/k/v (and out_dest, lse_dest) are device memory the
  // batch reads and writes in place; the record's staging is not used.
  bool caller_device = false;
  const Half* device_q = nullptr;
  const Half* device_k = nullptr;
  const Half* device_v = nullptr;
  Completion* completion = nullptr;  // the future form (no callback given): its pooled state
  DoneCallback callback;

  // Staging, fixed for the record's life (owned by its slab). device_visible: it lies in the
  // executor's staging memory (the device reads and writes it in place: kDevice requests).
  bool device_visible = false;
  Half* q = nullptr;
  Half* k = nullptr;
  Half* v = nullptr;
  Half* out = nullptr;
  float* lse = nullptr;

  std::atomic<std::uint64_t> state{0};

  // Touched by the batching thread only.
  RequestRecord* prev = nullptr;
  RequestRecord* next = nullptr;
  bool in_pending = false;
  std::uint64_t pending_token = 0;
};

// Thread safety: Acquire*/Release* from any thread. Records are never returned to the system
// before the pool dies, so a stale pointer (in a RequestHandle) stays dereferenceable.
class RecordPool {
 public:
  // Element counts of each staging region; `slab_records` records are allocated at a time. With
  // `staging`, at least `staged_records` records are allocated at once from it (device-visible:
  // the working set of requests in flight); growth past them uses the heap.
  RecordPool(std::size_t q_elems, std::size_t kv_elems, std::size_t lse_elems, int slab_records,
             runtime::StagingMemory* staging = nullptr, std::size_t staged_records = 0);
  ~RecordPool();
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;

  // A record in phase kFree; grows when none is free (ShardedFreeList: per-thread-shard caches
  // refilled in bulk). Device-visible records are handed out before heap ones: once a backlog
  // that overflowed onto the heap drains, requests are staged where the device reads them in
  // place again (heap records cost the executor a copy per request).
  RequestRecord* Acquire();
  // Fills out[0..n) (growing as needed); for per-producer caches.
  void AcquireBulk(RequestRecord** out, std::size_t n);
  // The record must hold no completion or callback. Bumps its generation.
  void Release(RequestRecord* record);
  void ReleaseBulk(RequestRecord* const* records, std::size_t n);

  std::size_t capacity() const;
  // Records the per-thread caches may hold at once.
  static constexpr std::size_t kCachedRecords = ShardedFreeList<RequestRecord>::kCached;
  std::size_t staging_bytes_per_record() const { return stride_; }
  // A record's staging bytes for these element counts (q, k, v, out, lse; each region 64-byte
  // aligned).
  static std::size_t StrideFor(std::size_t q_elems, std::size_t kv_elems, std::size_t lse_elems);

 private:
  struct Slab;
  void Grow(RequestRecord** out, std::size_t n) EXCLUDES(grow_mu_);
  // n free heap records into out (growing as needed): where the staged list runs short.
  void TakeHeap(RequestRecord** out, std::size_t n);
  // Carves a slab of `count` records (staging from `memory`, or the heap when null or out of
  // memory); hands the first n to out, frees the rest.
  void AddSlab(std::size_t count, runtime::StagingMemory* memory, RequestRecord** out,
               std::size_t n) REQUIRES(grow_mu_);

  std::size_t q_elems_, kv_elems_, lse_elems_, stride_;
  int slab_records_;
  runtime::StagingMemory* staging_ GUARDED_BY(grow_mu_);  // null once it refused an allocation
  bool has_staged_ = false;  // set once, in the constructor: staged_free_ ever held a record
  ShardedFreeList<RequestRecord> staged_free_;  // device-visible records: taken first
  ShardedFreeList<RequestRecord> heap_free_;
  mutable Mutex grow_mu_;
  std::vector<std::unique_ptr<Slab>> slabs_ GUARDED_BY(grow_mu_);
};

}  // namespace attnrt::scheduler::internal
