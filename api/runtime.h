// attnrt's public face: the Runtime a serving binary links. Threads submit single-query decode
// requests; the runtime batches them (scheduler), runs them on the GPU through CUDA Graph replays
// (or on the CPU executor where no GPU is present) and completes each with its output.
// Includes no CUDA header.
//
// Thread safety: every method may be called from any thread, except that Create, Drain and
// Shutdown are not concurrent with each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/half.h"
#include "api/request.h"
#include "api/status.h"

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
  int max_batch_size = 64;                         // B: most requests in one batch
  std::chrono::microseconds max_queue_delay{100};  // longest wait of the oldest request; 0 = none
  int min_batch_size = 0;                          // smallest early dispatch within the delay
  int max_queue_size = 65536;                      // queued requests; more are rejected at once
  std::chrono::microseconds default_timeout{std::chrono::seconds(10)};  // 0 = no deadline
  int num_priority_levels = 2;
  bool check_finite = false;                       // reject non-finite q/k/v at submit
  int completion_threads = 2;                      // threads running callbacks / futures

  // CUDA executor: batch buckets captured as graphs (empty = 1,2,4,...,256), eager mode for
  // debugging, decode kernel variant by name (empty = production default).
  std::vector<int> buckets;
  bool use_graphs = true;
  std::string decode_variant;
};

class Runtime {
 public:
  static StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeOptions& options);
  virtual ~Runtime() = default;

  // "NVIDIA H100 80GB HBM3 (CUDA executor)" or "CPU executor".
  virtual std::string device_description() const = 0;
  virtual const ModelShape& shape() const = 0;

  virtual Status CreateSequence(std::uint64_t id) = 0;
  virtual Status ForkSequence(std::uint64_t parent, std::uint64_t child) = 0;
  virtual Status FreeSequence(std::uint64_t id) = 0;
  // Writes a prompt's K and V ([num_tokens][Hkv][D] each) for one layer.
  virtual Status Prefill(std::uint64_t id, int layer, int num_tokens, std::span<const Half> k,
                         std::span<const Half> v) = 0;
  virtual StatusOr<int> SequenceLength(std::uint64_t id, int layer) const = 0;

  // Submits one decode request (see api/request.h). q, k, v are copied before Submit returns. A
  // malformed request is rejected here with a Status naming the field (nothing is enqueued);
  // every accepted request completes exactly once, with its output or a Status. Requests of one
  // (sequence, layer) run in submission order when submitted from one thread at one priority;
  // across threads, submit the next only after the previous completed (scheduler/scheduler.h).
  virtual StatusOr<Submission> Submit(const DecodeRequest& request) = 0;
  // Callback form: `done` runs on a completion thread (never the caller's, never the batcher's).
  virtual StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback done) = 0;
  // True when the request will complete with Cancelled; false once it was dispatched.
  virtual bool Cancel(const RequestHandle& handle) = 0;

  // Stops intake (later submits fail with Unavailable), finishes every admitted request, returns.
  virtual void Drain() = 0;
  // Fails what is still queued with Unavailable; later submits fail with Unavailable.
  virtual void Shutdown() = 0;

  // Prometheus text exposition of the scheduler's and executor's metrics.
  virtual std::string MetricsText() const = 0;
};

}  // namespace attnrt
