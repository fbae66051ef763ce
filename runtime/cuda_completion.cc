// The CUDA executor's completion path (cuda_executor_impl.h): waits for each piece, copies
// host requests' outputs back, settles the plan and calls the batch's callback; on the
// completion thread, or on Run's caller.
#include "runtime/cuda_executor_impl.h"

#include "api/internal/thread_name.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace attnrt::runtime {

// Only samples the thread saw complete while spinning update an estimate (one that was already
// complete says only that the step took no longer); a wait that overslept shortens it by a
// tenth, so the estimate errs towards spinning. A step's GPU time starts at its launch or at
// the previous piece's completion, whichever is later (the computes run in launch order).
cudaError_t StepEstimates::Wait(cudaEvent_t done, std::size_t key, Clock::time_point launched_at) {
  cudaError_t err = cudaEventQuery(done);
  if (err != cudaErrorNotReady) {  // complete (or failed): nothing learnt
    if (err == cudaSuccess) last_done_ = Clock::now();
    return err;
  }
  double& expected = expected_us_[key];
  const Clock::time_point began = std::max(launched_at, last_done_);
  if (expected > 0) {
    const Clock::time_point wake_at =
        began + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::micro>(expected) - kSpinTail);
    if (wake_at - Clock::now() > kMinSleep) {
      std::this_thread::sleep_until(wake_at);
      err = cudaEventQuery(done);
      if (err != cudaErrorNotReady) {
        if (err == cudaSuccess) {
          expected *= 0.9;  // overslept
          last_done_ = Clock::now();
        }
        return err;
      }
    }
  }
  err = cudaEventSynchronize(done);  // spins (the default device schedule with few contexts)
  if (err == cudaSuccess) {
    last_done_ = Clock::now();
    const double took = std::chrono::duration<double, std::micro>(last_done_ - began).count();
    expected = expected == 0 ? took : 0.8 * expected + 0.2 * took;
  }
  return err;
}

void CudaExecutor::Impl::CompletionLoop() {
  attnrt::internal::NameThisThread("attnrt-gpu-done");
#if defined(__linux__)
  // Timed sleeps (sleep_through_steps) wake within ~1 us of their time, not the default 50 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  std::vector<int> copy_rows;  // rows of the piece whose outputs come back by memcpy
  copy_rows.reserve(static_cast<std::size_t>(options.buckets.back()));
  FinishTimes previous;
  for (;;) {
    Piece piece;
    {
      MutexLock lock(&mu);
      while (!stop && completions.empty()) completion_cv.Wait(lock);
      if (completions.empty()) return;
      piece = std::move(completions.front());
      completions.pop_front();
    }
    previous = CompletePiece(piece, copy_rows, previous);
  }
}

CudaExecutor::Impl::FinishTimes CudaExecutor::Impl::CompletePiece(Piece& piece,
                                                                  std::vector<int>& copy_rows,
                                                                  FinishTimes previous) {
  const std::size_t q_row =
      static_cast<std::size_t>(options.shape.num_q_heads) * options.shape.head_dim;
  const int h = options.shape.num_q_heads;
  const Clock::time_point taken = Clock::now();
  BatchState& b = *piece.batch;
  Status status = piece.launch_status;
  if (piece.buffer >= 0) {
    PipelineBuffer& buf = buffers[piece.buffer];
    if (piece.event_recorded || piece.StreamWait()) {
      const cudaError_t err =
          piece.StreamWait()      ? cudaStreamSynchronize(buf.stream.get())
          : step_estimates != nullptr
              ? step_estimates->Wait(buf.done.get(),
                                     static_cast<std::size_t>(piece.path) * num_buckets() +
                                         piece.bucket_index,
                                     piece.launched_at)
              : cudaEventSynchronize(buf.done.get());
      if (status.ok()) {
        status = CudaStatus(err, piece.StreamWait() ? "cudaStreamSynchronize(solo piece)"
                                                    : "cudaEventSynchronize(piece done)",
                            __FILE__, __LINE__);
      }
      if (err == cudaSuccess && piece.event_recorded && options.record_timings &&
          piece.launch_status.ok()) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, buf.start.get(), buf.done.get()) == cudaSuccess) {
          piece.timings.gpu_us = ms * 1000.0;
        }
      }
      if (status.ok() && faults->batch.Hit()) {
        status = InternalError("injected batch failure (FaultInjection::batch)");
      }
    }
    const Clock::time_point observed = Clock::now();
    const BufferLayout& l = layouts[piece.bucket_index];
    // Pack marked the rows of the host path (outputs in the pinned staging) with q_ptrs 0.
    const auto* q_ptrs = reinterpret_cast<const std::uint64_t*>(buf.in.as<char>() + l.q_ptrs);
    copy_rows.clear();
    for (int j = 0; j < piece.count; ++j) {
      Status& rs = b.plan.statuses[b.plan.live[piece.first + j].index];
      if (!rs.ok()) continue;
      if (!status.ok()) {
        rs = status;
      } else if (q_ptrs[j] == 0) {  // else scattered on the device
        copy_rows.push_back(j);
      }
    }
    auto copy_out = [&](int i) {
      const int j = copy_rows[i];
      const BatchRequest& r = b.batch.requests[b.plan.live[piece.first + j].index];
      std::memcpy(r.out, buf.out.as<Half>(l.out) + j * q_row, q_row * sizeof(Half));
      if (r.lse != nullptr) {
        std::memcpy(r.lse, buf.out.as<float>(l.lse) + static_cast<std::size_t>(j) * h,
                    h * sizeof(float));
      }
    };
    // Cold destinations copy at one core's DRAM latency bound (~10 GB/s: 1 MB of a B=128
    // piece took ~100 us, as long as a third of the buffer's turn): large ones share the
    // pack pool with the launcher.
    const int rows = static_cast<int>(copy_rows.size());
    if (static_cast<std::size_t>(rows) * q_row * sizeof(Half) >= kParallelCopyBytes) {
      pack_pool->Run(rows, copy_out);
    } else {
      for (int i = 0; i < rows; ++i) copy_out(i);
    }
    if (options.record_timings) {
      piece.timings.handoff_us =
          std::chrono::duration<double, std::micro>(taken - piece.launched_at).count();
      piece.timings.wait_us =
          std::chrono::duration<double, std::micro>(observed - taken).count();
      piece.timings.copy_out_us = MicrosSince(observed);
      piece.timings.previous_settle_us = previous.settle_us;
      piece.timings.previous_done_callback_us = previous.done_callback_us;
    }
    MutexLock lock(&mu);
    buf.busy = false;
    if (options.record_timings) timings.push_back(piece.timings);
  } else if (!status.ok()) {
    for (int j = 0; j < piece.count; ++j) {
      Status& rs = b.plan.statuses[b.plan.live[piece.first + j].index];
      if (rs.ok()) rs = status;
    }
  }
  cv.NotifyAll();  // a buffer is free
  if (!status.ok()) {
    b.failed = true;
    Logger().error("cuda executor: a piece of {} requests failed: {}", piece.count,
                   status.ToString());
  }
  FinishTimes finish;
  if (--b.pieces_left == 0) {
    const Clock::time_point settling = Clock::now();
    planner->Settle(b.batch, &b.plan);
    const Clock::time_point settled = Clock::now();
    b.done(std::move(b.plan.statuses));
    finish.settle_us = std::chrono::duration<double, std::micro>(settled - settling).count();
    finish.done_callback_us = MicrosSince(settled);
    const bool failed = b.failed;
    const auto requests = static_cast<std::int64_t>(b.batch.requests.size());
    piece.batch.reset();
    MutexLock lock(&mu);
    ++stats.batches;
    stats.requests += requests;
    if (failed) ++stats.failed_batches;
    --pending_batches;
  }
  cv.NotifyAll();
  return finish;
}

}  // namespace attnrt::runtime
