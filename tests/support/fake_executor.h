// FakeExecutor: a runtime::Executor without kernels, for scheduler tests and benchmarks. It runs
// batches in submission order on its own thread, one at a time like a device stream, each taking
// a configurable time (or none); writes out = q and lse[h] = layer * 1000 + h so that routing can
// be checked; records what it was given; checks the scheduler's batch invariants; and injects
// failures on request. Header-only; include as "tests/support/fake_executor.h".
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "runtime/address_ranges.h"
#include "runtime/executor.h"

namespace attnrt::testing {

struct FakeExecutorOptions {
  ModelShape shape = [] {
    ModelShape s;
    s.num_layers = 4;
    s.num_q_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    return s;
  }();
  int max_batch_size = 128;
  std::vector<int> buckets = {1, 2, 4, 8, 16, 32, 64, 128};
  int max_in_flight = 2;
  // Device time of one batch padded to `bucket` requests; null = no time at all. Batches run one
  // after another, so a batch starts when the previous one ends (or when submitted, if later).
  std::function<std::chrono::nanoseconds(int bucket)> step_time;
  // Record every batch (sequence, layer, tag) for inspection; off for long benchmarks.
  bool record = true;
  // Write out = q and lse per request (a memcpy each); off to measure the scheduler alone.
  bool write_outputs = true;
  // Sequence ids [0, max_sequences) may be created.
  int max_sequences = 4096;
  // Offer staging_memory() (heap-backed, ranges tracked): the scheduler then stages requests in
  // it and submits them as kDevice, as with a GPU executor.
  bool offer_staging_memory = false;
  // Answer accepts_device_memory() with true (the fake reads "device" pointers as host memory).
  bool accept_device_memory = false;
  // Take batches in parts (Executor::SubmitPart) and report this preferred part size (0: the
  // scheduler's auto setting uses none). Parts are recorded (parts()) and run with the Submit
  // that closes their batch, as one recorded batch.
  bool accept_parts = false;
  int preferred_part_size = 0;
  // Run() runs the batch on the calling thread, after every batch submitted before it, as the
  // CUDA executor's Run does (no hand-off to the worker; step_time is not slept).
  bool run_inline = false;
};

// Heap memory standing in for a GPU executor's mapped staging: counts allocations and knows
// whether a pointer lies in memory it handed out.
class FakeStagingMemory final : public runtime::StagingMemory {
 public:
  void* Allocate(std::size_t bytes) override {
    void* p = ::operator new(bytes);
    ranges_.Add(p, bytes);
    allocations_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  void Free(void* p) override {
    ranges_.Remove(p);
    ::operator delete(p);
  }
  // Bytes handed out so far (frees not subtracted).
  std::size_t allocated_bytes() const { return bytes_.load(std::memory_order_relaxed); }
  bool Contains(const void* p) const { return ranges_.Contains(p); }
  int allocations() const { return allocations_.load(std::memory_order_relaxed); }
  std::size_t live() const { return ranges_.size(); }

 private:
  runtime::AddressRanges ranges_;
  std::atomic<int> allocations_{0};
  std::atomic<std::size_t> bytes_{0};
};

struct RecordedRequest {
  runtime::SequenceId sequence_id = 0;
  int layer = 0;
  std::uint64_t tag = 0;  // q[0..3] bits: tests put a request id there
  runtime::MemoryKind memory = runtime::MemoryKind::kHost;
  bool in_staging = false;  // q, k, v and out all lie in the fake staging memory
};

struct RecordedBatch {
  std::vector<RecordedRequest> requests;
};

// The 64-bit tag a test writes into q[0..3] (and reads back from RecordedRequest::tag).
inline void WriteTag(Half* q, std::uint64_t tag) {
  for (int i = 0; i < 4; ++i) q[i].bits = static_cast<std::uint16_t>(tag >> (16 * i));
}
inline std::uint64_t ReadTag(const Half* q) {
  std::uint64_t tag = 0;
  for (int i = 0; i < 4; ++i) tag |= static_cast<std::uint64_t>(q[i].bits) << (16 * i);
  return tag;
}

// Thread safety: as runtime::Executor; the test controls may be called from any thread.
class FakeExecutor final : public runtime::Executor {
 public:
  explicit FakeExecutor(FakeExecutorOptions options = {})
      : options_(std::move(options)),
        lengths_(static_cast<std::size_t>(options_.max_sequences) * options_.shape.num_layers) {
    for (auto& l : lengths_) l.store(-1, std::memory_order_relaxed);
    worker_ = std::thread([this] { Work(); });
  }

  ~FakeExecutor() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paused_ = false;
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  const ModelShape& shape() const override { return options_.shape; }
  int max_batch_size() const override { return options_.max_batch_size; }
  std::vector<int> buckets() const override { return options_.buckets; }
  int max_in_flight() const override { return options_.max_in_flight; }
  bool accepts_device_memory() const override { return options_.accept_device_memory; }
  runtime::StagingMemory* staging_memory() override {
    return options_.offer_staging_memory ? &staging_ : nullptr;
  }
  const FakeStagingMemory& fake_staging() const { return staging_; }

  bool accepts_parts() const override { return options_.accept_parts; }
  int preferred_part_size() const override { return options_.preferred_part_size; }
  Status SubmitPart(runtime::Batch part) override {
    if (!options_.accept_parts) return Executor::SubmitPart(std::move(part));
    std::lock_guard<std::mutex> lock(mu_);
    const int n = static_cast<int>(part.requests.size() + open_.requests.size());
    if (part.requests.empty() || n > options_.max_batch_size) {
      return InvalidArgumentError("part makes the batch " + std::to_string(n) + " requests");
    }
    RecordedBatch rec;
    for (const auto& r : part.requests) rec.requests.push_back(Record(r));
    parts_.push_back(std::move(rec));
    open_.requests.insert(open_.requests.end(), part.requests.begin(), part.requests.end());
    return Status::Ok();
  }

  Status Submit(runtime::Batch batch, runtime::BatchDoneFn done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!open_.requests.empty()) {  // the parts first, in the order handed over
        batch.requests.insert(batch.requests.begin(), open_.requests.begin(),
                              open_.requests.end());
        open_.requests.clear();
      }
    }
    const int n = static_cast<int>(batch.requests.size());
    ATTNRT_RETURN_IF_ERROR(CheckBatchSize(n));
    std::unique_lock<std::mutex> lock(mu_);
    if (fail_next_submit_) {
      Status s = std::move(*fail_next_submit_);
      fail_next_submit_.reset();
      ++failed_batches_;
      return s;
    }
    // The scheduler's invariant: never two requests of one (sequence, layer) in a batch.
    keys_.clear();
    for (const auto& r : batch.requests) keys_.emplace_back(r.sequence_id, r.layer);
    std::sort(keys_.begin(), keys_.end());
    if (std::adjacent_find(keys_.begin(), keys_.end()) != keys_.end()) ++duplicate_key_batches_;
    if (options_.record) {
      RecordedBatch rec;
      rec.requests.reserve(n);
      for (const auto& r : batch.requests) rec.requests.push_back(Record(r));
      recorded_.push_back(std::move(rec));
    }
    ++submitted_batches_;
    submitted_requests_ += n;
    // Executor contract: block while max_in_flight batches run.
    cv_.wait(lock, [&] { return in_flight_ < options_.max_in_flight; });
    ++in_flight_;
    max_in_flight_seen_ = std::max(max_in_flight_seen_, in_flight_);
    jobs_.push_back({std::move(batch), std::move(done), std::chrono::steady_clock::now()});
    lock.unlock();
    cv_.notify_all();
    return Status::Ok();
  }

  StatusOr<std::vector<Status>> Run(runtime::Batch batch) override {
    if (!options_.run_inline) return Executor::Run(std::move(batch));
    const int n = static_cast<int>(batch.requests.size());
    ATTNRT_RETURN_IF_ERROR(CheckBatchSize(n));
    std::map<runtime::SequenceId, Status> failing;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!open_.requests.empty()) return FailedPreconditionError("Run with a batch open");
      cv_.wait(lock, [&] { return in_flight_ == 0; });
      ++submitted_batches_;
      submitted_requests_ += n;
      if (!failing_sequences_.empty()) failing = failing_sequences_;
    }
    return RunRequests(batch, failing);
  }

  void Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
  }

  Status CreateSequence(runtime::SequenceId id) override {
    if (id >= static_cast<runtime::SequenceId>(options_.max_sequences)) {
      return ResourceExhaustedError("sequence_id " + std::to_string(id) + " >= max_sequences");
    }
    for (int l = 0; l < options_.shape.num_layers; ++l) {
      int expected = -1;
      if (!Length(id, l).compare_exchange_strong(expected, 0)) {
        return AlreadyExistsError("sequence_id " + std::to_string(id) + " exists");
      }
    }
    return Status::Ok();
  }
  Status ForkSequence(runtime::SequenceId parent, runtime::SequenceId child) override {
    ATTNRT_RETURN_IF_ERROR(SequenceLength(parent, 0).status());
    ATTNRT_RETURN_IF_ERROR(CreateSequence(child));
    for (int l = 0; l < options_.shape.num_layers; ++l) {
      Length(child, l).store(Length(parent, l).load());
    }
    return Status::Ok();
  }
  Status FreeSequence(runtime::SequenceId id) override {
    ATTNRT_RETURN_IF_ERROR(SequenceLength(id, 0).status());
    for (int l = 0; l < options_.shape.num_layers; ++l) Length(id, l).store(-1);
    return Status::Ok();
  }
  Status Prefill(runtime::SequenceId id, int layer, int num_tokens, const Half*,
                 const Half*) override {
    ATTNRT_RETURN_IF_ERROR(SequenceLength(id, layer).status());
    Length(id, layer).fetch_add(num_tokens);
    return Status::Ok();
  }
  StatusOr<int> SequenceLength(runtime::SequenceId id, int layer) const override {
    if (id >= static_cast<runtime::SequenceId>(options_.max_sequences) || layer < 0 ||
        layer >= options_.shape.num_layers) {
      return NotFoundError("sequence_id " + std::to_string(id) + " not found");
    }
    const int len = lengths_[id * options_.shape.num_layers + layer].load(
        std::memory_order_relaxed);
    if (len < 0) return NotFoundError("sequence_id " + std::to_string(id) + " not found");
    return len;
  }

  runtime::ExecutorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    runtime::ExecutorStats s;
    s.batches = submitted_batches_;
    s.requests = submitted_requests_;
    s.failed_batches = failed_batches_;
    return s;
  }

  // ---- test controls ----

  // While paused, submitted batches stay in flight (not run) until Resume().
  void Pause() {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
  }
  void Resume() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paused_ = false;
    }
    cv_.notify_all();
  }
  // The next Submit returns `status` (nothing runs).
  void FailNextSubmit(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_submit_ = std::move(status);
  }
  // Requests of `id` complete with `status` (the rest of their batch is unaffected).
  void FailSequence(runtime::SequenceId id, Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_sequences_[id] = std::move(status);
  }
  // Blocks until at least n batches were submitted.
  void WaitForSubmitted(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return submitted_batches_ >= n; });
  }

  std::vector<RecordedBatch> batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return recorded_;
  }
  // Every part handed over by SubmitPart, in order (accept_parts).
  std::vector<RecordedBatch> parts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return parts_;
  }
  int submitted_batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_batches_;
  }
  int in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  int max_in_flight_seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_seen_;
  }
  int duplicate_key_batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return duplicate_key_batches_;
  }
  // Creates sequences [0, n).
  Status CreateSequences(int n) {
    for (int i = 0; i < n; ++i) ATTNRT_RETURN_IF_ERROR(CreateSequence(i));
    return Status::Ok();
  }

 private:
  FakeStagingMemory staging_;  // first member: outlives nothing that uses it

  RecordedRequest Record(const runtime::BatchRequest& r) const {
    const bool in_staging = staging_.Contains(r.q) && staging_.Contains(r.k) &&
                            staging_.Contains(r.v) && staging_.Contains(r.out);
    return {r.sequence_id, r.layer, ReadTag(r.q), r.memory, in_staging};
  }

  struct Job {
    runtime::Batch batch;
    runtime::BatchDoneFn done;
    std::chrono::steady_clock::time_point submitted;
  };

  std::atomic<int>& Length(runtime::SequenceId id, int layer) {
    return lengths_[id * options_.shape.num_layers + layer];
  }

  int BucketFor(int n) const {
    for (int b : options_.buckets) {
      if (b >= n) return b;
    }
    return n;
  }

  Status CheckBatchSize(int n) const {
    if (n == 0 || n > options_.max_batch_size) {
      return InvalidArgumentError("batch has " + std::to_string(n) + " requests, expected [1, " +
                                  std::to_string(options_.max_batch_size) + "]");
    }
    return Status::Ok();
  }

  // Each request's token and output (out = q, lse[h] = layer * 1000 + h), or its sequence's
  // injected failure.
  std::vector<Status> RunRequests(const runtime::Batch& batch,
                                  const std::map<runtime::SequenceId, Status>& failing) {
    const ModelShape& s = options_.shape;
    const std::size_t q_elems = static_cast<std::size_t>(s.num_q_heads) * s.head_dim;
    std::vector<Status> per(batch.requests.size());
    for (std::size_t i = 0; i < batch.requests.size(); ++i) {
      const runtime::BatchRequest& r = batch.requests[i];
      if (auto it = failing.find(r.sequence_id); it != failing.end()) {
        per[i] = it->second;
        continue;
      }
      Length(r.sequence_id, r.layer).fetch_add(1, std::memory_order_relaxed);
      if (options_.write_outputs) {
        std::memcpy(r.out, r.q, q_elems * sizeof(Half));
        if (r.lse != nullptr) {
          for (int h = 0; h < s.num_q_heads; ++h) r.lse[h] = static_cast<float>(r.layer * 1000 + h);
        }
      }
    }
    return per;
  }

  void Work() {
#if defined(__linux__)
    // Simulated step times are tens of microseconds: sleep with 1 us timer slack, not 50 us.
    if (options_.step_time) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    std::chrono::steady_clock::time_point device_free{};
    while (true) {
      Job job;
      std::map<runtime::SequenceId, Status> failing;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return (!jobs_.empty() && !paused_) || (stop_ && jobs_.empty()); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        if (!failing_sequences_.empty()) failing = failing_sequences_;
      }
      const int n = static_cast<int>(job.batch.requests.size());
      if (options_.step_time) {
        const auto start = std::max(device_free, job.submitted);
        device_free = start + options_.step_time(BucketFor(n));
        std::this_thread::sleep_until(device_free);
      }
      job.done(RunRequests(job.batch, failing));
      {
        std::lock_guard<std::mutex> lock(mu_);
        --in_flight_;
      }
      cv_.notify_all();
    }
  }

  const FakeExecutorOptions options_;
  std::vector<std::atomic<int>> lengths_;  // [sequence][layer]; -1 = no such sequence

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool paused_ = false;
  bool stop_ = false;
  int in_flight_ = 0;
  int max_in_flight_seen_ = 0;
  int submitted_batches_ = 0;
  std::int64_t submitted_requests_ = 0;
  std::int64_t failed_batches_ = 0;
  int duplicate_key_batches_ = 0;
  std::optional<Status> fail_next_submit_;
  std::map<runtime::SequenceId, Status> failing_sequences_;
  std::vector<RecordedBatch> recorded_;
  std::vector<RecordedBatch> parts_;
  runtime::Batch open_;  // the parts of the batch being formed
  std::vector<std::pair<runtime::SequenceId, int>> keys_;  // scratch for Submit
  std::thread worker_;
};

}  // namespace attnrt::testing
