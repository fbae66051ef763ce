// The CUDA executor's completion thread (cuda_executor_impl.h): waits for each piece, copies
// host requests' outputs back, settles the plan and calls the batch's callback.
#include "runtime/cuda_executor_impl.h"

namespace attnrt::runtime {

void CudaExecutor::Impl::CompletionLoop() {
  const std::size_t q_row =
      static_cast<std::size_t>(options.shape.num_q_heads) * options.shape.head_dim;
  const int h = options.shape.num_q_heads;
  for (;;) {
    Piece piece;
    {
      MutexLock lock(&mu);
      while (!stop && completions.empty()) cv.Wait(lock);
      if (completions.empty()) return;
      piece = std::move(completions.front());
      completions.pop_front();
    }
    BatchState& b = *piece.batch;
    Status status = piece.launch_status;
    if (piece.buffer >= 0) {
      PipelineBuffer& buf = buffers[piece.buffer];
      if (piece.event_recorded) {
        const cudaError_t err = cudaEventSynchronize(buf.done.get());
        if (status.ok()) status = CudaStatus(err, "cudaEventSynchronize(piece done)", __FILE__, __LINE__);
        if (err == cudaSuccess && options.record_timings && piece.launch_status.ok()) {
          float ms = 0.0f;
          if (cudaEventElapsedTime(&ms, buf.start.get(), buf.done.get()) == cudaSuccess) {
            piece.timings.gpu_us = ms * 1000.0;
          }
        }
        if (status.ok() && faults->batch.Hit()) {
          status = InternalError("injected batch failure (FaultInjection::batch)");
        }
      }
      const BufferLayout& l = layouts[piece.bucket_index];
      for (int j = 0; j < piece.count; ++j) {
        const PlannedRequest& p = b.plan.live[piece.first + j];
        Status& rs = b.plan.statuses[p.index];
        if (!rs.ok()) continue;
        if (!status.ok()) {
          rs = status;
          continue;
        }
        const BatchRequest& r = b.batch.requests[p.index];
        if (r.memory != MemoryKind::kHost) continue;  // scattered on the device
        std::memcpy(r.out, buf.out.as<Half>(l.out) + j * q_row, q_row * sizeof(Half));
        if (r.lse != nullptr) {
          std::memcpy(r.lse, buf.out.as<float>(l.lse) + static_cast<std::size_t>(j) * h,
                      h * sizeof(float));
        }
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
    if (--b.pieces_left == 0) {
      planner->Settle(b.batch, &b.plan);
      b.done(std::move(b.plan.statuses));
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
  }
}

}  // namespace attnrt::runtime
