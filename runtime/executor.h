// The Executor interface: turns a formed batch of decode requests into work on a device (or the
// CPU) and reports each request's completion. The scheduler depends only on this header, which
// includes no CUDA header. Implementations: CpuExecutor (reference kernel over host pools) and
// CudaExecutor (one CUDA Graph replay per batch bucket).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>

// The CUDA runtime's event type (cudaEvent_t is CUevent_st*), declared, not included.
struct CUevent_st;

namespace attnrt::runtime {

using attnrt::SequenceId;

// Where a request's q/k/v/out buffers live.
enum class MemoryKind {
  kHost,    // copied through the executor's pinned staging buffers (the RPC-style default)
  // Pointers the device dereferences: device memory, or host memory from the executor's
  // staging_memory(); gathered/scattered by the graph's kernels, no staging copy (GPU executors
  // only).
  kDevice,
};

// Host memory the executor's device reads and writes in place (CUDA: pinned and mapped), for
// callers that stage requests themselves: requests whose buffers lie in it are submitted as
// kDevice and skip both host copies (into the executor's staging and back out of it).
// Thread safety: Allocate and Free from any thread.
class StagingMemory {
 public:
  virtual ~StagingMemory() = default;
  // Null when it cannot (the caller then uses ordinary memory and kHost).
  virtual void* Allocate(std::size_t bytes) = 0;
  virtual void Free(void* p) = 0;
};

// One request of a batch. The buffers stay valid and untouched by the caller until the batch's
// completion callback has run.
struct BatchRequest {
  SequenceId sequence_id = 0;
  int layer = 0;
  MemoryKind memory = MemoryKind::kHost;
  const Half* q = nullptr;  // [H][D]
  const Half* k = nullptr;  // [Hkv][D] the new token's key
  const Half* v = nullptr;  // [Hkv][D] the new token's value
  Half* out = nullptr;      // [H][D]
  float* lse = nullptr;     // [H] optional
};

// A CUDA event with its own type (what cudaEvent_t names), while this interface stays free of
// CUDA headers.
using DeviceEvent = ::CUevent_st*;

struct Batch {
  std::vector<BatchRequest> requests;
  // kDevice mode only: an event the batch waits on before reading q/k/v; null means no wait.
  DeviceEvent ready_event = nullptr;
};

// Called exactly once per submitted batch, on an executor-owned thread (never the submitter's),
// with one Status per request in batch order. Keep it short: it runs on the completion path.
using BatchDoneFn = std::function<void(std::vector<Status> per_request)>;

// The default batch-size buckets of both executors: 1, 2, 4, ..., 256.
inline std::vector<int> DefaultBuckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256}; }

struct ExecutorStats {
  std::int64_t batches = 0;
  std::int64_t requests = 0;
  std::int64_t failed_batches = 0;
  // The KV cache: blocks in the pools (K and V of every layer share a block id), blocks held by
  // sequences (shared blocks count once), live sequences.
  std::int64_t kv_blocks_total = 0;
  std::int64_t kv_blocks_in_use = 0;
  std::int64_t sequences = 0;
};

// Thread safety: Submit() may be called from one thread at a time (the scheduler's batching
// thread); done callbacks arrive on other threads; every other method from any thread.
class Executor {
 public:
  virtual ~Executor() = default;

  virtual const ModelShape& shape() const = 0;
  // Largest batch one Submit() accepts; larger ones are rejected with InvalidArgument.
  virtual int max_batch_size() const = 0;
  // Batch-size buckets (ascending) a batch is padded up to; the scheduler dispatches at once
  // when a full bucket is ready.
  virtual std::vector<int> buckets() const = 0;
  // How many batches may be in flight at once (>= 2 for pipelining).
  virtual int max_in_flight() const = 0;
  // Null when the executor has none (a CPU executor reads host memory anyway). Lives as long as
  // the executor; memory from it must be freed before the executor is destroyed.
  virtual StagingMemory* staging_memory() { return nullptr; }
  // Whether Submit accepts MemoryKind::kDevice requests (pointers its device dereferences).
  virtual bool accepts_device_memory() const { return false; }

  // Validates the batch (a malformed batch returns its error and `done` is not called), then
  // runs it asynchronously and calls `done` once. Blocks while max_in_flight() batches run.
  // Do not call Submit() from a done callback.
  // A request that fails validation (bad field, unknown sequence, duplicate, cache full) leaves
  // its sequence untouched. A request that passed validation but then fails (launch or device
  // error, or a path that cannot run the piece) has already taken its token: its (sequence,
  // layer) length has advanced by one and the K/V at that position is undefined, so later
  // requests and prefills of that (sequence, layer) fail with FailedPrecondition saying so (as
  // do requests of later batches already in flight that attended over it) until the sequence
  // is freed. The cache cannot truncate.
  virtual Status Submit(Batch batch, BatchDoneFn done) = 0;
  // Batches formed while their requests arrive. SubmitPart hands over requests of the batch
  // being formed, and the next Submit adds its own (none is allowed then) and runs them all as
  // one batch: `done` reports every part's requests first, in the order handed over, then the
  // Submit's. The requests belong to the executor from SubmitPart on, as with Submit; an
  // executor plans them then (validation, each request's token), so that the Submit that closes
  // the batch has only the rest to plan. A malformed part (empty; the batch over
  // max_batch_size; ready_event set: only the closing Submit may) returns InvalidArgument and
  // changes nothing; a malformed closing Submit returns its error and leaves the batch open
  // (submit it again). Called like Submit (the same thread, and Run never while a batch is open:
  // FailedPrecondition); sequence calls wait while a batch is open, so close it within the
  // batching window. An executor destroyed with a batch open drops it (its requests' tokens are
  // taken, never written).
  virtual bool accepts_parts() const { return false; }
  virtual Status SubmitPart(Batch part) {
    (void)part;
    return UnimplementedError("this executor does not take a batch in parts");
  }
  // The fewest requests a part should hold for SubmitPart to pay on this executor (0: it does
  // not pay; the scheduler then submits whole batches).
  virtual int preferred_part_size() const { return 0; }

  // Runs one batch to completion and returns its per-request statuses (or, for a malformed
  // batch, Submit's error): what Submit and waiting for `done` give, under the same rules, for a
  // caller that wants the result on its own thread. Called like Submit (one thread at a time,
  // never beside a Submit); it waits for batches submitted earlier. The CUDA executor plans,
  // launches, waits for the GPU and copies the outputs on the calling thread (no hand-off to
  // its launcher or completion thread), the CPU executor plans and computes there; this default
  // submits and waits.
  virtual StatusOr<std::vector<Status>> Run(Batch batch) {
    std::promise<std::vector<Status>> done;
    std::future<std::vector<Status>> result = done.get_future();
    ATTNRT_RETURN_IF_ERROR(Submit(std::move(batch), [&done](std::vector<Status> per_request) {
      done.set_value(std::move(per_request));
    }));
    return result.get();
  }
  // Blocks until every submitted batch has completed (its callback returned).
  virtual void Wait() = 0;

  // Sequence management over the executor's KV cache, from any thread. Each call is serialised
  // with Submit() (never between a batch's plan and its launch), and a block a call frees is
  // reused only by work ordered after every batch already submitted, so no call corrupts a
  // running batch. Whether a sequence still has requests queued is the caller's to check (the
  // scheduler refuses such calls).
  virtual Status CreateSequence(SequenceId id) = 0;
  virtual Status ForkSequence(SequenceId parent, SequenceId child) = 0;
  virtual Status FreeSequence(SequenceId id) = 0;
  // Appends `num_tokens` tokens of K and V ([num_tokens][Hkv][D], host memory) to one layer of a
  // sequence: the prompt's cache, written outside any batch.
  virtual Status Prefill(SequenceId id, int layer, int num_tokens, const Half* k,
                         const Half* v) = 0;
  // Tokens stored for (sequence, layer).
  virtual StatusOr<int> SequenceLength(SequenceId id, int layer) const = 0;
  // Whether the sequence exists; called by the scheduler on every Submit, from many threads at
  // once, so an executor should answer it without the lock its batches are planned under.
  virtual bool HasSequence(SequenceId id) const { return SequenceLength(id, 0).ok(); }

  virtual ExecutorStats stats() const = 0;
};

}  // namespace attnrt::runtime
