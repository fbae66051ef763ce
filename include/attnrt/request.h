// The public request and result types of attnrt (leaf types: no CUDA, nothing from another
// folder). The Runtime facade (attnrt/runtime.h) and the scheduler both use them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <span>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/export.h>
#include <attnrt/half.h>
#include <attnrt/status.h>

namespace attnrt {

namespace scheduler::internal {
struct HandleAccess;
struct Completion;
}  // namespace scheduler::internal

// Where a request's q, k, v, out and lse live.
enum class TensorMemory {
  // Host memory: q, k, v are copied during Submit (the caller's buffers are free on return);
  // the output goes to `out` or comes back in DecodeResult::output.
  kHost,
  // GPU memory of the runtime's device (the CUDA executor only; the CPU executor refuses it):
  // the batch's kernels read q, k, v and write out (and lse) in place, with no host copy, as a
  // serving engine whose model produced q/k/v on the GPU wants. `out` is required (and `lse`
  // when want_lse); every buffer must stay valid, and q/k/v unchanged, until the result is
  // delivered; check_finite does not look at them (the runtime never reads them on the host).
  // With q and out 16-byte aligned (cudaMalloc'd buffers are) a batch of such requests alone
  // runs the fastest graph: on the split-KV paths (the default) the decode kernel reads q and
  // writes out/lse where they are; otherwise they are gathered and scattered around the step
  // (correct, slower). A pointer that is not device memory fails its request with
  // InvalidArgument naming the field; the check asks the driver once per allocation (later
  // pointers into an allocation seen before are accepted by its range, also after the caller
  // frees it: pass only live buffers).
  kDevice,
};

// One decode step of one (sequence, layer): the new token's query, key and value.
struct DecodeRequest {
  SequenceId sequence_id = 0;
  int layer = 0;
  // 0 is the highest level; [0, num_priority_levels) of the runtime options.
  int priority = 0;
  // Overrides the default_timeout option for this request; it may only be shorter (a
  // longer one is rejected with InvalidArgument, never silently clamped). Must be > 0.
  std::optional<std::chrono::microseconds> timeout;
  // kHost: copied into scheduler-owned staging during Submit (the caller's buffers are free on
  // return). kDevice: read in place by the batch (see TensorMemory).
  std::span<const Half> q;  // [H][D]
  std::span<const Half> k;  // [Hkv][D]
  std::span<const Half> v;  // [Hkv][D]
  // Optional destinations, written before the result is delivered; they must stay valid until
  // then. Without `out` the output comes back in DecodeResult::output.
  Half* out = nullptr;   // [H][D]
  float* lse = nullptr;  // [H]
  // Without `lse`: return the log-sum-exp per head in DecodeResult::lse.
  bool want_lse = false;
  // Where q, k, v, out and lse live (kDevice: in the GPU's memory, nothing copied).
  TensorMemory memory = TensorMemory::kHost;
};

struct DecodeResult {
  Status status;
  std::vector<Half> output;  // [H][D] when OK and the request gave no `out`; else empty
  std::vector<float> lse;    // [H] when OK, want_lse and no `lse` destination; else empty
};

// Runs once per accepted request on a completion thread (never the batching thread, never the
// caller of Submit). An exception it throws is caught and logged.
using DoneCallback = std::function<void(DecodeResult)>;

// Names one accepted request for Scheduler::Cancel. Copyable; stays safe to use after the
// request completed (Cancel then returns false), but not after the Scheduler is destroyed.
class RequestHandle {
 public:
  RequestHandle() = default;
  bool valid() const { return record_ != nullptr; }
  friend bool operator==(const RequestHandle&, const RequestHandle&) = default;

 private:
  friend struct scheduler::internal::HandleAccess;
  RequestHandle(void* record, std::uint64_t generation)
      : record_(record), generation_(generation) {}
  void* record_ = nullptr;
  std::uint64_t generation_ = 0;
};


// The result of one request submitted in the future form: std::future's interface for it
// (get, wait, wait_for, valid) plus ready(), over completion state the runtime pools, so a
// Submit allocates nothing for it. Move-only; not shared between threads. get() takes the
// result (the future is then empty); a get() on an empty future returns a FailedPrecondition
// result instead of throwing. wait() and get() poll for a few microseconds, then sleep until
// the result is delivered. A future stays usable after the Runtime that made it is destroyed
// (every request completes before that, with its result or a Status).
class ATTNRT_EXPORT ResultFuture {
 public:
  ResultFuture() = default;
  ResultFuture(ResultFuture&& other) noexcept;
  ResultFuture& operator=(ResultFuture&& other) noexcept;
  ~ResultFuture();

  bool valid() const { return completion_ != nullptr; }
  // True once the result is there (get() will not wait).
  bool ready() const;
  void wait() const;
  template <typename Rep, typename Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period>& timeout) const {
    if (timeout >= std::chrono::hours(24 * 366)) return WaitForNs(std::chrono::nanoseconds::max());
    return WaitForNs(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout));
  }
  DecodeResult get();

 private:
  friend struct scheduler::internal::HandleAccess;
  explicit ResultFuture(scheduler::internal::Completion* c) : completion_(c) {}
  std::future_status WaitForNs(std::chrono::nanoseconds timeout) const;
  void Reset();
  scheduler::internal::Completion* completion_ = nullptr;
};

// A Submit that returns a future.
struct Submission {
  RequestHandle handle;
  ResultFuture result;
};

}  // namespace attnrt
