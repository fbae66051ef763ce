// attnrt's public face: the Runtime a serving binary links. Threads submit single-query decode
// requests; the runtime batches them (scheduler), runs them on the GPU through CUDA Graph replays
// (or on the CPU executor where no GPU is present) and completes each with its output.
// Includes no CUDA header.
//
// Thread safety: every method may be called from any thread, concurrently with any other
// (Drain and Shutdown too; later calls wait for the first).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/export.h>
#include <attnrt/half.h>
#include <attnrt/request.h>
#include <attnrt/status.h>

namespace attnrt {

enum class DeviceKind {
  kAuto,  // CUDA when a device is present, else CPU
  kCuda,
  kCpu,
};

struct RuntimeOptions {
  ModelShape shape;
  DeviceKind device = DeviceKind::kAuto;
  // KV cache capacity: kv_cache_bytes (K+V, all layers) if non-zero; else kv_cache_fraction of
  // the GPU's free memory, or 256 MiB on the CPU executor.
  std::size_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.5;

  // Batching window and queue policy (exact semantics in scheduler/scheduler.h, after Triton's
  // dynamic batcher).
  int max_batch_size = defaults::kMaxBatchSize;  // B: most requests in one batch
  // Longest wait of the oldest request; 0 = none.
  std::chrono::microseconds max_queue_delay{defaults::kMaxQueueDelayUs};
  int min_batch_size = defaults::kMinBatchSize;  // smallest early dispatch within the delay
  int max_queue_size = defaults::kMaxQueueSize;  // queued requests; more are rejected at once
  std::chrono::microseconds default_timeout{defaults::kTimeoutUs};  // 0 = no deadline
  int num_priority_levels = defaults::kNumPriorityLevels;
  // Reject non-finite q/k/v at Submit (InvalidArgument naming the tensor and element). On by
  // default: with it off, a NaN/Inf in k or v is stored and poisons every later output of that
  // sequence. Host-memory requests only: a TensorMemory::kDevice request is never read on the
  // host.
  bool check_finite = defaults::kCheckFinite;
  int completion_threads = defaults::kCompletionThreads;  // threads running callbacks / futures
  // How long the batching thread polls for new requests before it sleeps (while requests wait
  // for their window: its last batcher_spin, sleeping before); 0 = sleep at once;
  // -1 (the default) = 100 us on a machine with 4 or more hardware threads, else 0.
  std::chrono::microseconds batcher_spin{defaults::kBatcherSpinAuto};
  // How long a thread waiting on a ResultFuture polls before it sleeps (every waiter polls at
  // least 4 us); -1 (the default) = 200 us on a machine with 4 or more hardware threads (at most
  // one waiter per 4 hardware threads polls that long at once, the others 4 us), else 4 us.
  std::chrono::microseconds result_spin{defaults::kResultSpinAuto};
  // Requests handed to the executor at a time while a batch waits for its full bucket, so that
  // the executor validates and plans them during the window (a request handed over counts as
  // dispatched: Cancel returns false); 0 = whole batches only; -1 (the default) = the executor's
  // preferred part size (32 on the CUDA executor) where the smallest batch that dispatches
  // early (the full bucket; with min_batch_size, its bucket) holds two parts or more, else 0.
  // See "Batches in parts" in scheduler/scheduler.h.
  int part_size = defaults::kPartSizeAuto;

  // CUDA executor: batch buckets captured as graphs (empty = 1,2,4,...,256), eager mode for
  // debugging, and the decode path by name: "split_kv" (the fused flash-decoding kernel, the
  // default when empty: tensor-core or SIMT kernels per shape and bucket, as the tuned launch
  // table says; with max_context past 8192 tokens its graphs are captured twice, one path for
  // pieces of rows up to 8192 tokens and one for longer), "split_kv_simt" (the same two paths),
  // "simple", or "gemm" (the cuBLAS strided-batched GEMM
  // path, in context chunks within its workspace budget at any length; FP16 caches only: with
  // shape.kv_cache_type = fp8_e4m3 Create refuses it, on every device). The other three read an
  // fp8_e4m3 cache.
  std::vector<int> buckets;
  bool use_graphs = true;
  std::string decode_path;
  // CUDA executor: its completion thread sleeps through the expected part of each GPU step and
  // spin-waits only the end (a step of B=1 is spun whole); false spins every step whole, a
  // core busy whenever the GPU works, for a few microseconds less completion latency at
  // large batch.
  bool sleep_through_steps = true;
  // CUDA executor: host-memory requests are copied once, during Submit, into pinned host memory
  // the GPU reads and writes in place (the step's gather and scatter kernels cross PCIe), so no
  // thread copies them a second time into the step's staging or copies the output back out of
  // it (H100: half the runtime's CPU per request at B=128, and a 70%-load step ~40% shorter).
  // Requests past mapped_staging_bytes (at least the working set: the batches in flight and two
  // forming) are staged on the heap and take the copy path. false: every request takes the
  // copy path.
  bool stage_in_mapped_memory = true;
  // The pinned memory those requests are staged in, allocated at Create: each takes
  // 2 x H x D + 2 x Hkv x D halves + H floats (each region 64-byte aligned); at least the
  // working set's records ((max_in_flight + 2) x max_batch_size + 512), at most max_queue_size
  // more. More absorbs a longer stall or burst before a backlog spills onto the heap, whose
  // pieces are slower. >= 0, or -1 (the default, auto: the whole queue and the working set, at
  // most defaults::kMappedStagingAutoMaxBytes).
  std::int64_t mapped_staging_bytes = defaults::kMappedStagingAuto;
};

// How much of the KV cache is in use (Runtime::kv_cache_usage, and gauges in MetricsText).
struct KvCacheUsage {
  std::int64_t blocks_total = 0;
  std::int64_t blocks_in_use = 0;   // held by sequences; a block shared by forks counts once
  std::int64_t sequences = 0;
  std::int64_t block_bytes = 0;     // K + V bytes of one block, all layers
  // K + V bytes one token takes, all layers (ModelShape::kv_bytes_per_token): half as many with
  // an fp8_e4m3 cache as with fp16, so the same kv_cache_bytes holds twice the tokens.
  std::int64_t kv_bytes_per_token = 0;
  KvCacheType kv_cache_type = KvCacheType::kFp16;
};

class ATTNRT_EXPORT Runtime {
 public:
  static StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options);
  virtual ~Runtime() = default;

  // "NVIDIA H100 80GB HBM3 (CUDA executor)" or "CPU executor".
  virtual std::string device_description() const = 0;
  virtual const ModelShape& shape() const = 0;

  // Sequence management. FreeSequence, ForkSequence (of the parent) and Prefill change what a
  // sequence's decodes read, so they fail with FailedPrecondition while any decode request of
  // that sequence is outstanding (submitted, not yet completed: its result not yet visible) —
  // wait for the results first. They never corrupt another sequence's cache.
  // A decode that fails after its batch was formed (a device error) has taken its token, whose
  // K/V is then undefined: later decodes and prefills of that (sequence, layer) fail with
  // FailedPrecondition saying so until the sequence is freed.
  virtual Status CreateSequence(SequenceId id) = 0;
  virtual Status ForkSequence(SequenceId parent, SequenceId child) = 0;
  virtual Status FreeSequence(SequenceId id) = 0;
  // Writes a prompt's K and V ([num_tokens][Hkv][D] each) for one layer; with check_finite
  // (the default), non-finite K/V are refused with InvalidArgument naming the element.
  virtual Status Prefill(SequenceId id, int layer, int num_tokens, std::span<const Half> k,
                         std::span<const Half> v) = 0;
  // Tokens stored for (sequence, layer); InvalidArgument naming a layer out of range.
  virtual StatusOr<int> SequenceLength(SequenceId id, int layer) const = 0;
  virtual KvCacheUsage kv_cache_usage() const = 0;

  // Submits one decode request (see attnrt/request.h). q, k, v are copied before Submit returns
  // (TensorMemory::kHost) or read in place by the batch (kDevice, the CUDA executor). A
  // malformed request is rejected here with a Status naming the field (nothing is enqueued);
  // every accepted request completes exactly once, with its output or a Status. Requests of one
  // (sequence, layer) run in submission order when submitted from one thread at one priority;
  // across threads, submit the next only after the previous completed (scheduler/scheduler.h).
  virtual StatusOr<Submission> Submit(const DecodeRequest& request) = 0;
  // Callback form: `done` runs on a completion thread (never the caller's, never the batcher's);
  // an empty `done` is rejected with InvalidArgument.
  virtual StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback done) = 0;
  // One request, its result returned on the calling thread (a rejection in
  // DecodeResult::status). When nothing is queued or running, the calling thread runs the step
  // itself: no hand-off to the runtime's threads, the lowest latency a lone caller gets (a
  // caller that decodes one sequence at a time wants this). Otherwise the request is submitted
  // and awaited, batched with the others. Same validation and rules as Submit; the caller's
  // buffers are read in place. Not from a done callback (like waiting on a future there, it
  // may wait for a result that callback's thread has to deliver).
  virtual DecodeResult Decode(const DecodeRequest& request) = 0;
  // True when the request will complete with Cancelled; false once it was dispatched.
  virtual bool Cancel(const RequestHandle& handle) = 0;

  // Stops decode intake (later submits fail with Unavailable), finishes every admitted request,
  // returns. Sequence calls still work.
  virtual void Drain() = 0;
  // Fails what is still queued with Unavailable, waits for what is running, returns. From the
  // moment it begins every call above answers Unavailable (Submit, sequence management and
  // SequenceLength alike); MetricsText and kv_cache_usage stay readable.
  virtual void Shutdown() = 0;

  // Prometheus text exposition of the scheduler's and executor's metrics.
  virtual std::string MetricsText() const = 0;
};

}  // namespace attnrt
