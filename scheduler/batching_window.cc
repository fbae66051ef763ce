// The dispatch rule (see scheduler.h, "Batching window"): a preferred size fills -> dispatch it at
// once; the oldest has waited max_queue_delay (or delay 0, or a flush) -> dispatch what is there.
#include "scheduler/batching_window.h"

#include <algorithm>

namespace attnrt::scheduler {

BatchingWindow::BatchingWindow(int max_batch_size, int min_batch_size,
                               std::int64_t max_queue_delay_ns, std::vector<int> buckets)
    : max_batch_size_(max_batch_size), max_queue_delay_ns_(max_queue_delay_ns) {
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  for (int b : buckets) {
    if (b >= 1) executor_buckets_.push_back(b);
    if (b >= 1 && b <= max_batch_size) buckets_.push_back(b);
  }
  if (buckets_.empty()) buckets_.push_back(max_batch_size);
  full_bucket_ = buckets_.back();
  if (min_batch_size > 0) {
    for (int b : buckets_) {
      if (b >= min_batch_size) preferred_.push_back(b);
    }
  }
  if (preferred_.empty() || preferred_.back() != full_bucket_) preferred_.push_back(full_bucket_);
}

int BatchingWindow::DispatchSize(int available, std::int64_t oldest_wait_ns, bool flush) const {
  if (available <= 0) return 0;
  if (flush || oldest_wait_ns >= max_queue_delay_ns_) return std::min(available, max_batch_size_);
  // Inside the delay: the largest preferred size that the pending requests fill.
  auto it = std::upper_bound(preferred_.begin(), preferred_.end(), available);
  return it == preferred_.begin() ? 0 : *std::prev(it);
}

int BatchingWindow::BucketFor(int n) const {
  auto it = std::lower_bound(executor_buckets_.begin(), executor_buckets_.end(), n);
  return it == executor_buckets_.end() ? n : *it;
}

}  // namespace attnrt::scheduler
