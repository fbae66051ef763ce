// The scheduler's completion (scheduler_impl.h): a batch's statuses to each request's future
// or callback, inline for small batches of futures, else on the Asio pool.
#include "scheduler/scheduler_impl.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include <boost/asio/post.hpp>

#include "api/internal/log.h"

namespace attnrt::scheduler {

void Scheduler::Impl::OnBatchDone(InFlightBatch* batch, std::vector<Status> per_request) {
  std::unique_ptr<InFlightBatch> owned(batch);
  metrics_.executor_time_ns.Record(static_cast<std::uint64_t>(clock_->Now() - batch->dispatch_ns));
  const std::size_t size = owned->records.size();
  if (per_request.size() != size) {
    per_request.assign(size, InternalError("executor reported " +
                                           std::to_string(per_request.size()) +
                                           " statuses for a batch of " + std::to_string(size)));
  }
  // A small batch of futures only is delivered here: fulfilling a future runs no user code, and
  // it saves the hand-off to a pool thread (a wake-up, several microseconds) on the latency
  // path. Callbacks, and large batches, go to the pool, a large batch in parts delivered
  // concurrently: its last request otherwise waits for every callback before it (a B=128
  // batch's ~128 callbacks on one thread, tens of microseconds).
  const bool inline_delivery =
      size <= kInlineDeliveryMax &&
      std::none_of(owned->records.begin(), owned->records.end(),
                   [](const RequestRecord* r) { return static_cast<bool>(r->callback); });
  if (inline_delivery) {
    completion_tasks_.fetch_add(1, std::memory_order_acq_rel);
  } else {
    const std::size_t parts = std::clamp<std::size_t>(
        size / kDeliveryPartMin, 1, static_cast<std::size_t>(options_.completion_threads));
    completion_tasks_.fetch_add(static_cast<std::int64_t>(parts), std::memory_order_acq_rel);
    auto state = std::shared_ptr<InFlightBatch>(std::move(owned));
    auto per = std::make_shared<std::vector<Status>>(std::move(per_request));
    for (std::size_t p = 0; p < parts; ++p) {
      const std::size_t begin = size * p / parts, end = size * (p + 1) / parts;
      boost::asio::post(completion_pool_, [this, state, per, begin, end] {
        DeliverBatch(state.get(), *per, begin, end);
      });
    }
  }
  metrics_.in_flight_requests.fetch_sub(static_cast<std::int64_t>(size),
                                        std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    wake_flag_ = true;
  }
  wake_hint_.store(true, std::memory_order_release);
  cv_.NotifyOne();
  if (inline_delivery) DeliverBatch(owned.get(), per_request, 0, size);
}

void Scheduler::Impl::DeliverBatch(InFlightBatch* batch, std::vector<Status>& per_request,
                                   std::size_t begin, std::size_t end) {
  const ClockNanos now = clock_->Now();
  // Counted before delivery, so a caller holding its result sees itself counted.
  std::uint64_t failed = 0;
  for (std::size_t i = begin; i < end; ++i) failed += per_request[i].ok() ? 0 : 1;
  metrics_.completed.fetch_add(end - begin, std::memory_order_relaxed);
  if (failed) metrics_.failed.fetch_add(failed, std::memory_order_relaxed);
  RecordLatencies(batch->records.data() + begin, end - begin, now);
  for (std::size_t i = begin; i < end; ++i) {
    Deliver(batch->records[i], std::move(per_request[i]));
  }
  pool_.ReleaseBulk(batch->records.data() + begin, end - begin);
  FinishTask();
}

void Scheduler::Impl::RecordLatencies(RequestRecord* const* records, std::size_t n,
                                      ClockNanos now) {
  std::array<std::uint64_t, 64> chunk;
  for (std::size_t i = 0; i < n; i += chunk.size()) {
    const std::size_t m = std::min(chunk.size(), n - i);
    for (std::size_t j = 0; j < m; ++j) {
      chunk[j] = static_cast<std::uint64_t>(std::max<ClockNanos>(0, now - records[i + j]->submit_ns));
    }
    metrics_.latency_ns.RecordAll(std::span<const std::uint64_t>(chunk.data(), m));
  }
}

void Scheduler::Impl::Deliver(RequestRecord* record, Status status) {
  DecodeResult result;
  if (status.ok() && !record->caller_device) {  // a device request's output is in place
    if (record->device_visible && record->out_dest != nullptr) {
      std::memcpy(record->out_dest, record->out, q_elems_ * sizeof(Half));
    }
    if (record->device_visible && record->lse_dest != nullptr) {
      std::memcpy(record->lse_dest, record->lse, shape_.num_q_heads * sizeof(float));
    }
    // resize + memcpy: Half is not trivial (default member initialiser), so assign() would
    // copy element by element.
    if (record->out_dest == nullptr) {
      result.output.resize(q_elems_);
      std::memcpy(result.output.data(), record->out, q_elems_ * sizeof(Half));
    }
    if (record->lse_dest == nullptr && record->want_lse) {
      result.lse.assign(record->lse, record->lse + shape_.num_q_heads);
    }
  }
  result.status = std::move(status);
  activity_.Remove(record->sequence_id);
  // From here on Cancel() of this request returns false.
  record->state.fetch_or(internal::kPhaseDone, std::memory_order_acq_rel);
  if (record->callback) {
    try {
      record->callback(std::move(result));
    } catch (const std::exception& e) {
      Logger().error("scheduler: a done callback threw: {}", e.what());
    } catch (...) {
      Logger().error("scheduler: a done callback threw a non-std exception");
    }
    record->callback = nullptr;
  } else {
    completions_->Fulfil(record->completion, std::move(result));
    record->completion = nullptr;
  }
}

}  // namespace attnrt::scheduler
