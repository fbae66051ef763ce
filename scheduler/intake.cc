// The scheduler's intake (scheduler_impl.h): Submit from any thread, Cancel, producers.
#include "scheduler/scheduler_impl.h"

#include <cstring>
#include <span>
#include <string>
#include <tuple>

#include "api/internal/finite.h"

namespace attnrt::scheduler {

namespace {
Status NonFiniteError(const char* tensor, std::ptrdiff_t element) {
  return InvalidArgumentError(std::string(tensor) + " holds a non-finite value at element " +
                              std::to_string(element));
}
}  // namespace

StatusOr<RequestHandle> Scheduler::Impl::Submit(const DecodeRequest& request,
                                                DoneCallback* done, ResultFuture* future,
                                                Producer::State* producer, bool validated) {
  if (done != nullptr && !*done) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("done callback is empty (pass a callable, or use the "
                                       "future form of Submit)"));
  }
  // Validate's checks in its order, with check_finite's scan fused into the copy into the
  // request's record (Decode's submitted route ran Validate whole), then admission.
  if (!validated) {
    if (Status s = ValidateFields(request); !s.ok()) return s;
  }
  RequestRecord* record;
  if (producer != nullptr) {
    if (producer->cache.empty()) {
      producer->cache.resize(kProducerCacheRefill);
      pool_.AcquireBulk(producer->cache.data(), kProducerCacheRefill);
    }
    record = producer->cache.back();
    producer->cache.pop_back();
  } else {
    record = pool_.Acquire();
  }
  auto give_back = [&] {  // a record never published: nothing else was touched
    if (producer != nullptr) {
      producer->cache.push_back(record);
    } else {
      pool_.Release(record);
    }
  };
  record->caller_device = request.memory == TensorMemory::kDevice;
  if (record->caller_device) {  // read in place by the batch: nothing to copy
    record->device_q = request.q.data();
    record->device_k = request.k.data();
    record->device_v = request.v.data();
  } else {
    // Copied into the staging and tested for Inf/NaN with check_finite; large requests in one
    // streaming pass.
    const bool check = options_.check_finite && !validated;
    const bool streaming = (q_elems_ + 2 * kv_elems_) * sizeof(Half) >= kStreamingCopyMinBytes;
    std::ptrdiff_t bad = -1;
    const char* bad_tensor = nullptr;
    for (auto [name, src, dst] : {std::tuple{"q", request.q, record->q},
                                  std::tuple{"k", request.k, record->k},
                                  std::tuple{"v", request.v, record->v}}) {
      bad = CopyCheckingFinite(dst, src, check, streaming);
      if (bad >= 0) {
        bad_tensor = name;
        break;
      }
    }
    if (streaming) StreamingCopiesDone();
    if (bad >= 0) {
      give_back();
      return Reject(RejectReason::kNonFinite, NonFiniteError(bad_tensor, bad));
    }
  }
  if (!validated) {
    if (Status s = CheckSequence(request); !s.ok()) {
      give_back();
      return s;
    }
  }

  const ClockNanos now = clock_->Now();
  ClockNanos timeout_ns = default_timeout_ns_;
  if (request.timeout) {
    timeout_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(*request.timeout).count();
  }

  // Admission: counted before the closed check so that Drain/Shutdown, which set closed_ and
  // then wait for the queue depth to reach zero, cannot miss a request admitted concurrently.
  const std::int64_t admitted = admitted_.fetch_add(1, std::memory_order_seq_cst) + 1;
  const std::int64_t depth = admitted - refused_.load(std::memory_order_relaxed) -
                             left_.load(std::memory_order_relaxed);
  if (closed_.load(std::memory_order_seq_cst)) {
    give_back();
    Refuse();
    metrics_.Reject(RejectReason::kClosed);
    return UnavailableError("scheduler is draining or shut down; request not accepted");
  }
  if (depth > options_.max_queue_size) {
    give_back();
    Refuse();
    metrics_.Reject(RejectReason::kQueueFull);
    return ResourceExhaustedError("queue full: max_queue_size = " +
                                  std::to_string(options_.max_queue_size) +
                                  " requests already queued");
  }

  activity_.Add(request.sequence_id);  // removed in Deliver, before the caller sees the result
  record->sequence_id = request.sequence_id;
  record->layer = request.layer;
  record->priority = request.priority;
  record->submit_ns = now;
  record->deadline_ns = timeout_ns > 0 ? now + timeout_ns : kNever;
  record->out_dest = request.out;
  record->lse_dest = request.lse;
  record->want_lse = request.want_lse;
  if (done != nullptr) {
    record->callback = std::move(*done);
  } else {
    record->completion = completions_->Acquire();
    *future = HandleAccess::MakeFuture(record->completion);
  }
  const std::uint64_t generation =
      internal::GenerationOf(record->state.load(std::memory_order_relaxed));
  record->state.store((generation << internal::kGenerationShift) | internal::kPhaseQueued,
                    std::memory_order_relaxed);
  const ClockNanos deadline = record->deadline_ns;  // the record is not ours after the enqueue
  if (producer != nullptr) {
    intake_.enqueue(producer->token, record);
  } else {
    intake_.enqueue(record);
  }

  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_acquire) &&
      (depth >= wake_depth_.load(std::memory_order_relaxed) ||
       now + window_.max_queue_delay_ns() < wake_window_before_.load(std::memory_order_relaxed) ||
       deadline < wake_deadline_before_.load(std::memory_order_relaxed))) {
    Wake();
  }
  return HandleAccess::Make(record, generation);
}

DecodeResult Scheduler::Impl::Decode(const DecodeRequest& request) {
  DecodeResult result;
  if (Status s = Validate(request); !s.ok()) {
    result.status = std::move(s);
    return result;
  }
  // Inline only when the executor has nothing of ours and nothing waits for a batch: then no
  // queued request is overtaken, and a request submitted meanwhile waits for this one's step
  // (the batching thread takes dispatch_mu_) as it would wait behind a batch in flight.
  if (dispatch_mu_.TryLock()) {
    if (Depth() == 0 && in_flight_.load(std::memory_order_seq_cst) == 0) {
      return DecodeInline(request);
    }
    dispatch_mu_.Unlock();
  }
  ResultFuture future;
  StatusOr<RequestHandle> handle = Submit(request, nullptr, &future, nullptr, /*validated=*/true);
  if (!handle.ok()) {
    result.status = handle.status();
    return result;
  }
  return future.get();
}

DecodeResult Scheduler::Impl::DecodeInline(const DecodeRequest& request) {
  DecodeResult result;
  const ClockNanos now = clock_->Now();
  // Admitted as Submit admits (Drain and Shutdown see it), then at once out of the queue and in
  // flight: each counter raised before the previous one is lowered.
  admitted_.fetch_add(1, std::memory_order_seq_cst);
  if (closed_.load(std::memory_order_seq_cst)) {
    dispatch_mu_.Unlock();
    Refuse();
    metrics_.Reject(RejectReason::kClosed);
    result.status = UnavailableError("scheduler is draining or shut down; request not accepted");
    return result;
  }
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  left_.fetch_add(1, std::memory_order_seq_cst);
  activity_.Add(request.sequence_id);
  metrics_.queue_delay_ns.Record(0);
  metrics_.batch_size.Record(1);
  metrics_.in_flight_requests.fetch_add(1, std::memory_order_relaxed);

  runtime::BatchRequest r;
  r.sequence_id = request.sequence_id;
  r.layer = request.layer;
  r.memory = request.memory == TensorMemory::kDevice ? runtime::MemoryKind::kDevice
                                                     : runtime::MemoryKind::kHost;
  // The caller's own buffers throughout: they outlive the call, so nothing is staged.
  r.q = request.q.data();
  r.k = request.k.data();
  r.v = request.v.data();
  r.out = request.out;
  r.lse = request.lse;
  if (r.memory == runtime::MemoryKind::kHost) {
    if (r.out == nullptr) {
      result.output.resize(q_elems_);
      r.out = result.output.data();
    }
    if (r.lse == nullptr && request.want_lse) {
      result.lse.resize(static_cast<std::size_t>(shape_.num_q_heads));
      r.lse = result.lse.data();
    }
  }
  runtime::Batch batch;
  batch.requests.push_back(r);
  StatusOr<std::vector<Status>> per_request = executor_->Run(std::move(batch));
  const ClockNanos done = clock_->Now();
  if (!per_request.ok()) {
    result.status = per_request.status();
  } else if (per_request->size() != 1) {
    result.status = InternalError("executor reported " + std::to_string(per_request->size()) +
                                  " statuses for a batch of 1");
  } else {
    result.status = std::move((*per_request)[0]);
  }
  if (!result.status.ok()) {
    result.output.clear();
    result.lse.clear();
  }
  if (per_request.ok()) {  // as the batching thread counts: batches the executor took
    metrics_.batches.fetch_add(1, std::memory_order_relaxed);
    metrics_.decoded_inline.fetch_add(1, std::memory_order_relaxed);
  }
  metrics_.executor_time_ns.Record(static_cast<std::uint64_t>(std::max<ClockNanos>(0, done - now)));
  metrics_.completed.fetch_add(1, std::memory_order_relaxed);
  if (!result.status.ok()) metrics_.failed.fetch_add(1, std::memory_order_relaxed);
  metrics_.latency_ns.Record(static_cast<std::uint64_t>(std::max<ClockNanos>(0, done - now)));
  metrics_.in_flight_requests.fetch_sub(1, std::memory_order_relaxed);
  activity_.Remove(request.sequence_id);  // before the caller sees the result, as Deliver
  dispatch_mu_.Unlock();
  // The batching thread waits for this slot only if it found every slot taken (an executor of
  // one batch in flight): wake it then, and only then (a futex call on the caller's path).
  bool wake = false;
  {
    MutexLock lock(&mu_);
    wake = in_flight_.fetch_sub(1, std::memory_order_acq_rel) >= max_in_flight_;
    if (wake) wake_flag_ = true;
  }
  if (wake) {
    wake_hint_.store(true, std::memory_order_release);
    cv_.NotifyOne();
  }
  if (IdleWaited() && Idle()) NotifyIdle();
  return result;
}

bool Scheduler::Impl::Cancel(const RequestHandle& handle) {
  RequestRecord* record = HandleAccess::RecordOf(handle);
  if (record == nullptr) return false;
  const std::uint64_t generation = HandleAccess::GenerationOf(handle);
  std::uint64_t state = record->state.load(std::memory_order_acquire);
  while (true) {
    if (internal::GenerationOf(state) != generation ||
        (state & internal::kPhaseMask) != internal::kPhaseQueued) {
      return false;
    }
    if (state & internal::kCancelBit) return true;  // already requested
    if (record->state.compare_exchange_weak(state, state | internal::kCancelBit,
                                          std::memory_order_acq_rel)) {
      break;
    }
  }
  cancel_epoch_.fetch_add(1, std::memory_order_release);
  Wake();
  return true;
}

std::unique_ptr<Scheduler::Producer::State> Scheduler::Impl::NewProducerState() {
  return std::make_unique<Producer::State>(this, &intake_);
}

void Scheduler::Impl::ReleaseProducerState(Producer::State* state) {
  if (!state->cache.empty()) pool_.ReleaseBulk(state->cache.data(), state->cache.size());
  state->cache.clear();
}

Status Scheduler::Impl::Reject(RejectReason reason, Status status) {
  metrics_.Reject(reason);
  return status;
}

Status Scheduler::Impl::Validate(const DecodeRequest& r) {
  if (Status s = ValidateFields(r); !s.ok()) return s;
  // The runtime never reads device memory on the host: check_finite is for host requests.
  if (options_.check_finite && r.memory == TensorMemory::kHost) {
    for (auto [name, span] : {std::pair{"q", r.q}, std::pair{"k", r.k}, std::pair{"v", r.v}}) {
      if (const std::ptrdiff_t i = FirstNonFinite(span); i >= 0) {
        return Reject(RejectReason::kNonFinite, NonFiniteError(name, i));
      }
    }
  }
  return CheckSequence(r);
}

Status Scheduler::Impl::CheckSequence(const DecodeRequest& r) {
  if (!executor_->HasSequence(r.sequence_id)) {
    return Reject(RejectReason::kUnknownSequence,
                  NotFoundError("sequence_id " + std::to_string(r.sequence_id) +
                                " is unknown to the executor"));
  }
  return Status::Ok();
}

Status Scheduler::Impl::ValidateFields(const DecodeRequest& r) {
  if (r.q.size() != q_elems_) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("q has " + std::to_string(r.q.size()) +
                                       " elements, expected H*D = " + std::to_string(q_elems_)));
  }
  if (r.k.size() != kv_elems_) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("k has " + std::to_string(r.k.size()) +
                                       " elements, expected Hkv*D = " +
                                       std::to_string(kv_elems_)));
  }
  if (r.v.size() != kv_elems_) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("v has " + std::to_string(r.v.size()) +
                                       " elements, expected Hkv*D = " +
                                       std::to_string(kv_elems_)));
  }
  if (r.layer < 0 || r.layer >= shape_.num_layers) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("layer " + std::to_string(r.layer) +
                                       " out of range [0, " +
                                       std::to_string(shape_.num_layers) + ")"));
  }
  if (r.priority < 0 || r.priority >= options_.num_priority_levels) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("priority " + std::to_string(r.priority) +
                                       " out of range [0, " +
                                       std::to_string(options_.num_priority_levels) + ")"));
  }
  if (r.timeout) {
    if (r.timeout->count() <= 0 || *r.timeout > kMaxTimeout) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("timeout " + Us(*r.timeout) + " must be > 0 and <= " +
                                         Us(kMaxTimeout)));
    }
    if (options_.default_timeout.count() > 0 && *r.timeout > options_.default_timeout) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("timeout " + Us(*r.timeout) +
                                         " exceeds default_timeout " +
                                         Us(options_.default_timeout) +
                                         " (a request may only shorten it)"));
    }
  }
  if (r.memory == TensorMemory::kDevice) {
    if (!executor_->accepts_device_memory()) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("memory is kDevice but this executor reads host memory "
                                         "only (the CUDA executor takes device memory)"));
    }
    if (r.out == nullptr) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("out is required when memory is kDevice (the output "
                                         "is written in place, never returned)"));
    }
    if (r.want_lse && r.lse == nullptr) {
      return Reject(RejectReason::kInvalidArgument,
                    InvalidArgumentError("want_lse needs an lse destination when memory is "
                                         "kDevice"));
    }
  } else if (r.memory != TensorMemory::kHost) {
    return Reject(RejectReason::kInvalidArgument,
                  InvalidArgumentError("memory " + std::to_string(static_cast<int>(r.memory)) +
                                       " is neither kHost nor kDevice"));
  }

  return Status::Ok();
}

void Scheduler::Impl::Wake() {
  {
    MutexLock lock(&mu_);
    wake_flag_ = true;
  }
  wake_hint_.store(true, std::memory_order_release);
  cv_.NotifyOne();
}

}  // namespace attnrt::scheduler
