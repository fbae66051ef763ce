// Scheduler metrics: lock-free counters, gauges and log-linear histograms that any thread may
// record into, a consistent-enough snapshot (each value read atomically, not all at one instant),
// percentiles from the snapshot, and Prometheus text exposition (format 0.0.4).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace attnrt::scheduler {

// Why Submit refused a request (nothing was enqueued).
enum class RejectReason : int {
  kInvalidArgument = 0,  // sizes, layer, priority, timeout
  kNonFinite,            // q/k/v held Inf or NaN (check_finite)
  kUnknownSequence,      // the executor does not know the sequence
  kQueueFull,            // max_queue_size requests already queued
  kClosed,               // Drain() or Shutdown() has begun
  kCount,
};
const char* RejectReasonName(RejectReason reason);

// A histogram's contents at one moment. Buckets are log-linear: values below 2^sub_bucket_bits
// are exact; above, each power of two is split into 2^sub_bucket_bits equal buckets (relative
// width <= 2^-sub_bucket_bits).
struct HistogramSnapshot {
  int sub_bucket_bits = 0;
  std::vector<std::uint64_t> counts;  // per bucket
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
  std::uint64_t max = 0;

  double Mean() const { return count ? static_cast<double>(sum) / count : 0.0; }
  // The p-quantile (p in [0, 1]), interpolated linearly inside its bucket; 0 when empty.
  double Percentile(double p) const;
  // How many recorded values are <= bound (exact when bound + 1 is a bucket boundary, e.g. a
  // power of two minus one, or any value below 2^sub_bucket_bits).
  std::uint64_t CountAtMost(std::uint64_t bound) const;
};

// Thread safety: Record() and Snapshot() from any thread, lock-free.
class Histogram {
 public:
  // Values above 2^max_log2 - 1 are recorded in the last bucket (max stays exact).
  Histogram(int sub_bucket_bits, int max_log2);

  void Record(std::uint64_t value);
  // As Record of each value, with one atomic add per run of values in one bucket (a batch's
  // queue delays, a delivered part's latencies: three atomic adds a request cost the batching
  // thread ~a fifth of its time in scheduler_intake_bench).
  void RecordAll(std::span<const std::uint64_t> values);
  HistogramSnapshot Snapshot() const;

  // Bucket geometry, shared with HistogramSnapshot.
  static int BucketOf(std::uint64_t value, int sub_bucket_bits);
  static std::uint64_t BucketLower(int index, int sub_bucket_bits);
  static std::uint64_t BucketUpper(int index, int sub_bucket_bits);  // exclusive

 private:
  int sub_bucket_bits_;
  std::vector<std::atomic<std::uint64_t>> counts_;
  // Own cache line: histograms fed by different threads must not share one. The count is the
  // sum of the bucket counts (one atomic add fewer per record).
  alignas(64) std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> max_{0};

  void RaiseMax(std::uint64_t value);
};

// Everything the scheduler reports. Times are nanoseconds on the scheduler's clock.
struct MetricsSnapshot {
  // Counters (monotonic since Create).
  std::uint64_t submitted = 0;  // accepted by Submit (rejections not included)
  std::array<std::uint64_t, static_cast<int>(RejectReason::kCount)> rejected{};
  std::uint64_t completed = 0;  // finished by the executor, with OK or the executor's error
  std::uint64_t failed = 0;     // of `completed`, those whose Status was not OK
  std::uint64_t timed_out = 0;  // DeadlineExceeded before dispatch
  std::uint64_t cancelled = 0;  // Cancelled before dispatch
  std::uint64_t shut_down = 0;  // Unavailable: still queued at Shutdown()
  std::uint64_t batches = 0;    // handed to the executor
  std::uint64_t decoded_inline = 0;  // of `batches`: Decode calls run on the caller's thread
  // Gauges.
  std::int64_t pending = 0;             // admitted, not yet dispatched (intake + pending lists)
  std::int64_t in_flight_batches = 0;   // handed to the executor, not yet reported back
  std::int64_t in_flight_requests = 0;
  // Histograms.
  HistogramSnapshot queue_delay_ns;    // submit -> dispatch, per dispatched request
  HistogramSnapshot batch_size;        // requests per dispatched batch (before padding)
  HistogramSnapshot executor_time_ns;  // executor Submit -> done callback, per batch
  HistogramSnapshot latency_ns;        // submit -> result delivered, per request (every outcome)

  std::uint64_t rejected_total() const;
};

// Prometheus text exposition of a snapshot; every metric is named attnrt_scheduler_*, times in
// seconds. Histogram buckets are cumulative at powers of two.
std::string PrometheusText(const MetricsSnapshot& snapshot);

// The live metrics the scheduler records into. Thread safety: all members are atomics, grouped
// on cache lines by the thread that writes them (false sharing with a producer's hot path costs
// more than the whole rest of Submit).
struct SchedulerMetrics {
  SchedulerMetrics();

  // Intake (producers); `submitted` is filled by the scheduler from its admission counters.
  alignas(64) std::array<std::atomic<std::uint64_t>, static_cast<int>(RejectReason::kCount)>
      rejected{};
  // Completion threads.
  alignas(64) std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> failed{0};
  // Batching thread.
  alignas(64) std::atomic<std::uint64_t> timed_out{0};
  std::atomic<std::uint64_t> cancelled{0};
  std::atomic<std::uint64_t> shut_down{0};
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::int64_t> in_flight_requests{0};
  // Decode callers.
  alignas(64) std::atomic<std::uint64_t> decoded_inline{0};
  Histogram queue_delay_ns;
  Histogram batch_size;
  Histogram executor_time_ns;
  Histogram latency_ns;

  void Reject(RejectReason reason) {
    rejected[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  // Fills everything but what the scheduler owns (submitted, pending, in_flight_batches).
  MetricsSnapshot Snapshot() const;
};

}  // namespace attnrt::scheduler
