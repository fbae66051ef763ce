// Log-linear histogram geometry, percentiles and the Prometheus exposition of MetricsSnapshot.
#include "scheduler/metrics.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>

namespace attnrt::scheduler {

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kInvalidArgument: return "invalid_argument";
    case RejectReason::kNonFinite: return "non_finite";
    case RejectReason::kUnknownSequence: return "unknown_sequence";
    case RejectReason::kQueueFull: return "queue_full";
    case RejectReason::kClosed: return "closed";
    case RejectReason::kCount: break;
  }
  return "unknown";
}

int Histogram::BucketOf(std::uint64_t value, int sub_bucket_bits) {
  const std::uint64_t sub = std::uint64_t{1} << sub_bucket_bits;
  if (value < sub) return static_cast<int>(value);
  const int e = 63 - std::countl_zero(value);  // e >= sub_bucket_bits
  const std::uint64_t mantissa = (value >> (e - sub_bucket_bits)) - sub;
  return static_cast<int>(((e - sub_bucket_bits + 1) << sub_bucket_bits) + mantissa);
}

std::uint64_t Histogram::BucketLower(int index, int sub_bucket_bits) {
  const std::uint64_t sub = std::uint64_t{1} << sub_bucket_bits;
  if (static_cast<std::uint64_t>(index) < sub) return index;
  const int k = index >> sub_bucket_bits;
  const std::uint64_t m = index & (sub - 1);
  return (sub + m) << (k - 1);
}

std::uint64_t Histogram::BucketUpper(int index, int sub_bucket_bits) {
  const std::uint64_t sub = std::uint64_t{1} << sub_bucket_bits;
  if (static_cast<std::uint64_t>(index) < sub) return index + 1;
  const int k = index >> sub_bucket_bits;
  return BucketLower(index, sub_bucket_bits) + (std::uint64_t{1} << (k - 1));
}

Histogram::Histogram(int sub_bucket_bits, int max_log2)
    : sub_bucket_bits_(sub_bucket_bits),
      counts_(max_log2 <= sub_bucket_bits
                  ? (std::size_t{1} << sub_bucket_bits)
                  : static_cast<std::size_t>(max_log2 - sub_bucket_bits + 1) << sub_bucket_bits) {}

void Histogram::Record(std::uint64_t value) {
  const int index =
      std::min<int>(BucketOf(value, sub_bucket_bits_), static_cast<int>(counts_.size()) - 1);
  counts_[index].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  RaiseMax(value);
}

void Histogram::RecordAll(std::span<const std::uint64_t> values) {
  if (values.empty()) return;
  const int last = static_cast<int>(counts_.size()) - 1;
  std::uint64_t sum = 0, max = 0, run = 0;
  int run_index = -1;
  for (const std::uint64_t v : values) {
    const int index = std::min<int>(BucketOf(v, sub_bucket_bits_), last);
    if (index != run_index) {
      if (run > 0) counts_[run_index].fetch_add(run, std::memory_order_relaxed);
      run_index = index;
      run = 0;
    }
    ++run;
    sum += v;
    max = std::max(max, v);
  }
  counts_[run_index].fetch_add(run, std::memory_order_relaxed);
  sum_.fetch_add(sum, std::memory_order_relaxed);
  RaiseMax(max);
}

void Histogram::RaiseMax(std::uint64_t value) {
  std::uint64_t seen = max_.load(std::memory_order_relaxed);
  while (value > seen &&
         !max_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.sub_bucket_bits = sub_bucket_bits_;
  s.counts.resize(counts_.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    total += s.counts[i];
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  s.max = max_.load(std::memory_order_relaxed);
  return s;
}

double HistogramSnapshot::Percentile(double p) const {
  if (count == 0) return 0.0;
  p = std::clamp(p, 0.0, 1.0);
  const double rank = p * static_cast<double>(count);
  double cumulative = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    const double next = cumulative + static_cast<double>(counts[i]);
    if (next >= rank) {
      const double lower = static_cast<double>(Histogram::BucketLower(i, sub_bucket_bits));
      double upper = static_cast<double>(Histogram::BucketUpper(i, sub_bucket_bits));
      upper = std::min(upper, static_cast<double>(max));  // the top bucket ends at max
      const double fraction = (rank - cumulative) / static_cast<double>(counts[i]);
      return std::max(lower, lower + (upper - lower) * fraction);
    }
    cumulative = next;
  }
  return static_cast<double>(max);
}

std::uint64_t HistogramSnapshot::CountAtMost(std::uint64_t bound) const {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (Histogram::BucketUpper(i, sub_bucket_bits) > bound + 1) break;
    total += counts[i];
  }
  return total;
}

std::uint64_t MetricsSnapshot::rejected_total() const {
  std::uint64_t total = 0;
  for (std::uint64_t r : rejected) total += r;
  return total;
}

SchedulerMetrics::SchedulerMetrics()
    // Times: 1/16 relative resolution up to 2^40 ns (18 minutes); batch sizes exact below 512.
    : queue_delay_ns(4, 40), batch_size(8, 16), executor_time_ns(4, 40), latency_ns(4, 40) {}

MetricsSnapshot SchedulerMetrics::Snapshot() const {
  MetricsSnapshot s;
  for (std::size_t i = 0; i < rejected.size(); ++i) {
    s.rejected[i] = rejected[i].load(std::memory_order_relaxed);
  }
  s.completed = completed.load(std::memory_order_relaxed);
  s.failed = failed.load(std::memory_order_relaxed);
  s.timed_out = timed_out.load(std::memory_order_relaxed);
  s.cancelled = cancelled.load(std::memory_order_relaxed);
  s.shut_down = shut_down.load(std::memory_order_relaxed);
  s.batches = batches.load(std::memory_order_relaxed);
  s.decoded_inline = decoded_inline.load(std::memory_order_relaxed);
  s.in_flight_requests = in_flight_requests.load(std::memory_order_relaxed);
  s.queue_delay_ns = queue_delay_ns.Snapshot();
  s.batch_size = batch_size.Snapshot();
  s.executor_time_ns = executor_time_ns.Snapshot();
  s.latency_ns = latency_ns.Snapshot();
  return s;
}

namespace {

void AppendLine(std::string* out, const char* format, auto... args) {
  char line[256];
  std::snprintf(line, sizeof(line), format, args...);
  out->append(line);
}

void AppendCounter(std::string* out, const char* name, const char* help, std::uint64_t value) {
  AppendLine(out, "# HELP attnrt_scheduler_%s %s\n# TYPE attnrt_scheduler_%s counter\n", name,
             help, name);
  AppendLine(out, "attnrt_scheduler_%s %" PRIu64 "\n", name, value);
}

void AppendGauge(std::string* out, const char* name, const char* help, std::int64_t value) {
  AppendLine(out, "# HELP attnrt_scheduler_%s %s\n# TYPE attnrt_scheduler_%s gauge\n", name, help,
             name);
  AppendLine(out, "attnrt_scheduler_%s %" PRId64 "\n", name, value);
}

// Time histograms: nanoseconds in, seconds out, buckets at 2^10 .. 2^35 ns (1 us .. 34 s).
void AppendTimeHistogram(std::string* out, const char* name, const char* help,
                         const HistogramSnapshot& h) {
  AppendLine(out, "# HELP attnrt_scheduler_%s %s\n# TYPE attnrt_scheduler_%s histogram\n", name,
             help, name);
  for (int e = 10; e <= 35; ++e) {
    const std::uint64_t bound = std::uint64_t{1} << e;
    AppendLine(out, "attnrt_scheduler_%s_bucket{le=\"%.9g\"} %" PRIu64 "\n", name, bound * 1e-9,
               h.CountAtMost(bound - 1));
  }
  AppendLine(out, "attnrt_scheduler_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h.count);
  AppendLine(out, "attnrt_scheduler_%s_sum %.9g\n", name, h.sum * 1e-9);
  AppendLine(out, "attnrt_scheduler_%s_count %" PRIu64 "\n", name, h.count);
}

void AppendSizeHistogram(std::string* out, const char* name, const char* help,
                         const HistogramSnapshot& h) {
  AppendLine(out, "# HELP attnrt_scheduler_%s %s\n# TYPE attnrt_scheduler_%s histogram\n", name,
             help, name);
  for (int e = 0; e <= 9; ++e) {
    const std::uint64_t bound = std::uint64_t{1} << e;
    AppendLine(out, "attnrt_scheduler_%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", name, bound,
               h.CountAtMost(bound));
  }
  AppendLine(out, "attnrt_scheduler_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h.count);
  AppendLine(out, "attnrt_scheduler_%s_sum %" PRIu64 "\n", name, h.sum);
  AppendLine(out, "attnrt_scheduler_%s_count %" PRIu64 "\n", name, h.count);
}

}  // namespace

std::string PrometheusText(const MetricsSnapshot& s) {
  std::string out;
  out.reserve(8192);
  AppendCounter(&out, "requests_submitted_total", "Requests accepted by Submit.", s.submitted);
  AppendLine(&out,
             "# HELP attnrt_scheduler_requests_rejected_total Requests refused by Submit.\n"
             "# TYPE attnrt_scheduler_requests_rejected_total counter\n");
  for (int r = 0; r < static_cast<int>(RejectReason::kCount); ++r) {
    AppendLine(&out, "attnrt_scheduler_requests_rejected_total{reason=\"%s\"} %" PRIu64 "\n",
               RejectReasonName(static_cast<RejectReason>(r)), s.rejected[r]);
  }
  AppendCounter(&out, "requests_completed_total", "Requests finished by the executor.",
                s.completed);
  AppendCounter(&out, "requests_failed_total", "Completed requests with a non-OK status.",
                s.failed);
  AppendCounter(&out, "requests_timed_out_total", "Requests past their deadline before dispatch.",
                s.timed_out);
  AppendCounter(&out, "requests_cancelled_total", "Requests cancelled before dispatch.",
                s.cancelled);
  AppendCounter(&out, "requests_shut_down_total", "Requests failed by Shutdown.", s.shut_down);
  AppendCounter(&out, "batches_total", "Batches handed to the executor.", s.batches);
  AppendCounter(&out, "decoded_inline_total",
                "Decode calls run on the caller's thread (of batches_total).", s.decoded_inline);
  AppendGauge(&out, "pending_requests", "Admitted requests not yet dispatched.", s.pending);
  AppendGauge(&out, "in_flight_batches", "Batches running on the executor.", s.in_flight_batches);
  AppendGauge(&out, "in_flight_requests", "Requests running on the executor.",
              s.in_flight_requests);
  AppendTimeHistogram(&out, "queue_delay_seconds", "Submit to dispatch, per request.",
                      s.queue_delay_ns);
  AppendSizeHistogram(&out, "batch_size", "Requests per dispatched batch.", s.batch_size);
  AppendTimeHistogram(&out, "executor_time_seconds", "Executor submit to done, per batch.",
                      s.executor_time_ns);
  AppendTimeHistogram(&out, "latency_seconds", "Submit to result, per request.", s.latency_ns);
  return out;
}

}  // namespace attnrt::scheduler
