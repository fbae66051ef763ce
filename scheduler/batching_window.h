// BatchingWindow: the pure dispatch decision of the dynamic batcher (no threads, no clock), so the
// rules documented in scheduler.h are tested directly: when to dispatch, and how many requests.
#pragma once

#include <cstdint>
#include <vector>

namespace attnrt::scheduler {

class BatchingWindow {
 public:
  // `buckets`: the executor's batch-size buckets (any order; those above max_batch_size are
  // ignored; none left means max_batch_size is the only bucket). Arguments are validated by
  // Scheduler::Create, not here.
  BatchingWindow(int max_batch_size, int min_batch_size, std::int64_t max_queue_delay_ns,
                 std::vector<int> buckets);

  // The largest bucket <= max_batch_size: the batch that dispatches at once.
  int full_bucket() const { return full_bucket_; }
  // Sizes that dispatch at once inside the delay (ascending): buckets in
  // [min_batch_size, max_batch_size], plus the full bucket. Its first element is the fewest
  // pending requests that can trigger a dispatch before the delay expires.
  const std::vector<int>& preferred_sizes() const { return preferred_; }
  int max_batch_size() const { return max_batch_size_; }
  std::int64_t max_queue_delay_ns() const { return max_queue_delay_ns_; }

  // How many of `available` dispatchable requests (taken in priority/FIFO order) to dispatch
  // now; 0 means wait. `oldest_wait_ns`: how long the oldest pending request has waited.
  // `flush`: Drain() in progress, so no request waits for company.
  int DispatchSize(int available, std::int64_t oldest_wait_ns, bool flush) const;
  // The bucket a batch of n requests is padded up to (n itself when above every bucket).
  int BucketFor(int n) const;

 private:
  int max_batch_size_;
  std::int64_t max_queue_delay_ns_;
  std::vector<int> executor_buckets_;  // ascending, every bucket the executor pads to
  std::vector<int> buckets_;           // ascending, <= max_batch_size, never empty
  std::vector<int> preferred_;  // ascending, never empty
  int full_bucket_;
};

}  // namespace attnrt::scheduler
