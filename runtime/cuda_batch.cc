// The CUDA executor's batch path (cuda_executor_impl.h): plan under the submission lock on the
// submitting thread; cut into pieces, pack the pipeline buffer's staging and launch on the
// launcher thread (inline when nothing else is in flight).
#include "runtime/cuda_executor_impl.h"

#include <utility>

#include "api/check.h"
#include "api/internal/thread_name.h"

namespace attnrt::runtime {
// ---- the batch path ------------------------------------------------------------------------

int CudaExecutor::Impl::AcquireBuffer() {
  MutexLock lock(&mu);
  // Pieces complete in launch order, so the oldest buffer is the next to free.
  while (buffers[next_buffer].busy) cv.Wait(lock);
  const int index = next_buffer;
  buffers[index].busy = true;
  next_buffer = (next_buffer + 1) % static_cast<int>(buffers.size());
  return index;
}

void CudaExecutor::Impl::Pack(Piece& piece, bool* any_host, bool* any_device,
                              int* max_kv_length) {
  BatchState& b = *piece.batch;
  const BufferLayout& l = layouts[piece.bucket_index];
  const PipelineBuffer& buf = buffers[piece.buffer];
  char* base = buf.in.as<char>();
  auto* kv_lengths = reinterpret_cast<std::int32_t*>(base + l.kv_lengths);
  auto* layers = reinterpret_cast<std::int32_t*>(base + l.layers);
  auto* tables = reinterpret_cast<std::int32_t*>(base + l.block_tables);
  auto* q_ptrs = reinterpret_cast<std::uint64_t*>(base + l.q_ptrs);
  auto* k_ptrs = reinterpret_cast<std::uint64_t*>(base + l.k_ptrs);
  auto* v_ptrs = reinterpret_cast<std::uint64_t*>(base + l.v_ptrs);
  auto* out_ptrs = reinterpret_cast<std::uint64_t*>(base + l.out_ptrs);
  auto* lse_ptrs = reinterpret_cast<std::uint64_t*>(base + l.lse_ptrs);
  const std::size_t q_bytes =
      static_cast<std::size_t>(options.shape.num_q_heads) * options.shape.head_dim * sizeof(Half);
  const std::size_t kv_bytes = static_cast<std::size_t>(options.shape.kv_token_elems()) * sizeof(Half);
  *any_host = *any_device = false;
  *max_kv_length = 0;
  piece.device_rows_aligned = true;

  // One lock of the sequence table for the piece (the submitting thread plans beside this).
  planner->FillBlockRows(b.batch,
                         std::span<const PlannedRequest>(b.plan.live).subspan(piece.first,
                                                                               piece.count),
                         static_cast<std::size_t>(max_blocks), tables, &b.plan.statuses);
  // A piece with host-memory rows runs the H2D and D2H copies anyway. Its kDevice rows staged
  // in this executor's mapped memory (the host reads and writes it too) join them, so the
  // piece runs the host-memory graph instead of both paths (H100, 1.5x offered load at max
  // batch 128: half the pieces mixed records staged on the heap with mapped ones, r4). So do
  // they in the smallest buckets of the paths that gather, where the host-memory graph is the
  // faster one.
  bool pack_staged = PackStagedRows(piece.bucket_index);
  for (int j = 0; j < piece.count && !pack_staged; ++j) {
    pack_staged =
        b.batch.requests[b.plan.live[piece.first + j].index].memory == MemoryKind::kHost;
  }
  auto via_host = [&](const BatchRequest& r) {
    if (r.memory == MemoryKind::kHost) return true;
    return pack_staged && staging->ContainsAll({r.q, r.k, r.v, r.out, r.lse});
  };
  for (int j = 0; j < piece.count; ++j) {
    const PlannedRequest& p = b.plan.live[piece.first + j];
    const BatchRequest& r = b.batch.requests[p.index];
    if (!b.plan.statuses[p.index].ok()) {  // no block row: fail it alone (never expected)
      kv_lengths[j] = 0;
      continue;
    }
    kv_lengths[j] = p.kv_length;
    layers[j] = r.layer;
    *max_kv_length = std::max(*max_kv_length, p.kv_length);
    // q_ptrs[j] == 0 marks a row of the host path for the copies here and at completion.
    if (via_host(r)) {
      q_ptrs[j] = 0;  // the gather kernel leaves this row to the memcpy node
      out_ptrs[j] = 0;
      *any_host = true;
      ++piece.timings.host_requests;
    } else {
      q_ptrs[j] = reinterpret_cast<std::uint64_t>(r.q);
      k_ptrs[j] = reinterpret_cast<std::uint64_t>(r.k);
      v_ptrs[j] = reinterpret_cast<std::uint64_t>(r.v);
      out_ptrs[j] = reinterpret_cast<std::uint64_t>(r.out);
      lse_ptrs[j] = reinterpret_cast<std::uint64_t>(r.lse);
      *any_device = true;
      if (((q_ptrs[j] | k_ptrs[j] | v_ptrs[j] | out_ptrs[j]) & 15u) != 0) {
        piece.device_rows_aligned = false;
      }
    }
  }
  // The q/k/v copies, spread over the pack pool when there are enough bytes to pay for the
  // hand-off.
  auto copy_row = [&](int j) {
    const PlannedRequest& p = b.plan.live[piece.first + j];
    const BatchRequest& r = b.batch.requests[p.index];
    if (q_ptrs[j] != 0 || kv_lengths[j] == 0) return;
    std::memcpy(base + l.q + j * q_bytes, r.q, q_bytes);
    std::memcpy(base + l.k + j * kv_bytes, r.k, kv_bytes);
    std::memcpy(base + l.v + j * kv_bytes, r.v, kv_bytes);
  };
  const Clock::time_point t_copy = Clock::now();
  if (*any_host && piece.count * (q_bytes + 2 * kv_bytes) >= kParallelCopyBytes) {
    pack_pool->Run(piece.count, copy_row);
  } else if (*any_host) {
    for (int j = 0; j < piece.count; ++j) copy_row(j);
  }
  piece.timings.pack_copy_us = MicrosSince(t_copy);
  // Padding: every kernel skips a row of length 0 before reading anything else of it.
  std::fill(kv_lengths + piece.count, kv_lengths + l.capacity, 0);
}

bool CudaExecutor::Impl::DeviceGraphFits(const Piece& piece, int max_kv_length) const {
  if (!paths[piece.path].variant->reads_rows_in_place) return true;  // it gathers and scatters
  if (!piece.device_rows_aligned) return false;
  const bool gather_beside_the_previous_step =
      !piece.solo && piece.count <= options.busy_gather_max_rows &&
      max_kv_length >= options.busy_gather_min_kv_length;
  return !gather_beside_the_previous_step;
}

void CudaExecutor::Impl::Launch(Piece& piece, const NodeEnables& e, int max_kv_length) {
  PipelineBuffer& buf = buffers[piece.buffer];
  cudaStream_t st = buf.stream.get();
  if (faults->launch.Hit()) {
    piece.launch_status = LaunchInvalidForTesting(st);
  } else {
    Status status;
    if (options.record_timings) status = CudaStatus(cudaEventRecord(buf.start.get(), st),
                                                    "cudaEventRecord(start)", __FILE__, __LINE__);
    const Clock::time_point t_graph = Clock::now();
    if (status.ok()) {
      if (options.mode == LaunchMode::kGraph) {
        CapturedGraph& g = GraphFor(piece.path, piece.bucket_index, piece.buffer);
        if (e.host_only() && piece.solo && g.solo_exec.get() != nullptr) {
          status = CudaStatus(cudaGraphLaunch(g.solo_exec.get(), st), "cudaGraphLaunch(solo)",
                              __FILE__, __LINE__);
          piece.launched_solo = piece.timings.solo = status.ok();
        } else if (e.host_only()) {
          status = CudaStatus(cudaGraphLaunch(g.host_exec.get(), st), "cudaGraphLaunch(host)",
                              __FILE__, __LINE__);
        } else if (e.device_only() && DeviceGraphFits(piece, max_kv_length)) {
          const bool solo = piece.solo && g.device_solo_exec.get() != nullptr;
          status = CudaStatus(
              cudaGraphLaunch(solo ? g.device_solo_exec.get() : g.device_exec.get(), st),
              "cudaGraphLaunch(device)", __FILE__, __LINE__);
          piece.timings.in_place =
              status.ok() && paths[piece.path].variant->reads_rows_in_place;
          if (solo) piece.launched_solo = piece.timings.solo = status.ok();
        } else {
          status = SetEnables(g, e);
          if (status.ok()) {
            status = CudaStatus(cudaGraphLaunch(g.exec.get(), st), "cudaGraphLaunch", __FILE__,
                                __LINE__);
          }
        }
      } else {
        status = EnqueueEager(piece.path, piece.bucket_index, piece.buffer, e);
      }
    }
    piece.timings.graph_launch_us = MicrosSince(t_graph);
    piece.launch_status = status;
  }
  // A failed launch may have queued no compute (and no record of `computed`).
  if (!piece.launch_status.ok()) ForwardComputeOrder(piece.buffer);
  // A solo piece is awaited by a stream sync: no `done` to record (but for its GPU time).
  if (piece.StreamWait() && !options.record_timings) return;
  // Recorded even after a failed launch: whatever did get queued still uses the buffer.
  piece.event_recorded = cudaEventRecord(buf.done.get(), st) == cudaSuccess;
  if (!piece.event_recorded && piece.launch_status.ok()) {
    piece.launch_status = InternalError("cudaEventRecord(done) failed after the launch");
  }
}

std::shared_ptr<BatchState> CudaExecutor::Impl::StartBatch(int most_pending,
                                                         std::unique_lock<std::mutex>* hold) {
  {
    // Executor::Submit's contract: blocks while max_in_flight() batches run. Run waits for all
    // of them: its pieces then launch inline and nothing else uses the completer's state.
    MutexLock lock(&mu);
    while (pending_batches >= most_pending) cv.Wait(lock);
  }
  // Held until the batch is launched or queued for the launcher behind every earlier batch:
  // plan order is launch order, and sequence calls, which take this lock and then wait for the
  // launcher to drain, never land between a batch's plan and its launch (batch_plan.h).
  *hold = planner->LockSubmission();
  return std::make_shared<BatchState>();
}

void CudaExecutor::Impl::PlanRequests(BatchState& state, int first) {
  const Clock::time_point t_plan = Clock::now();
  BatchPlan& plan = state.plan;
  const std::size_t copies_before = first == 0 ? 0 : plan.copies.size();
  planner->PlanFrom(state.batch, first, &plan, options.max_batch_size);
  if (plan.copies.size() > copies_before && plan.copies_applied) {
    // Rare path (first write into a forked block): the copy must follow every queued piece
    // and precede this batch's append.
    WaitLaunched();
    Status s = faults->copy.Hit()
                   ? InternalError("injected copy-on-write copy failure (FaultInjection::copy)")
                   : DrainStream();
    if (s.ok()) {
      s = cache->ApplyCopies(std::span<const kvcache::BlockCopy>(plan.copies)
                                 .subspan(copies_before));
    }
    if (s.ok()) s = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    if (!s.ok()) {
      // Nothing of this batch runs; its requests have taken their tokens and the copies'
      // destinations hold undefined K/V, which Settle marks lost (plan.live stays for it).
      plan.copies_applied = false;
      state.copy_error = s;
      Logger().error("cuda executor: copy-on-write before a batch of {} failed: {}",
                     plan.live.size(), s.ToString());
    }
  }
  if (!plan.copies_applied) {  // this part's requests fail with the batch's copy too
    for (const PlannedRequest& p : plan.live) {
      if (plan.statuses[p.index].ok()) plan.statuses[p.index] = state.copy_error;
    }
  }
  state.plan_us += MicrosSince(t_plan);
}

Status CudaExecutor::Impl::SubmitPart(Batch part) {
  const int parted = open_batch.parted();
  const int most_pending = static_cast<int>(buffers.size());
  ATTNRT_RETURN_IF_ERROR(open_batch.Add(part, options.max_batch_size,
                                        [&](std::unique_lock<std::mutex>* hold) {
                                          return StartBatch(most_pending, hold);
                                        }));
  BatchState& state = open_batch.state();
  PlanRequests(state, parted);
  state.planned_ahead_us = state.plan_us;
  return Status::Ok();
}

Status CudaExecutor::Impl::Submit(Batch batch, BatchDoneFn done, Completer completer) {
  if (completer == Completer::kCaller && open_batch.is_open()) {
    return FailedPreconditionError("Run while a batch is open (SubmitPart); Submit closes it");
  }
  const int parted = open_batch.parted();
  ATTNRT_RETURN_IF_ERROR(ValidateBatchShape(batch, options.max_batch_size, parted));
  if (!done) return InvalidArgumentError("done is empty");
  std::unique_lock<std::mutex> hold;
  const int most_pending =
      completer == Completer::kCaller ? 1 : static_cast<int>(buffers.size());
  std::shared_ptr<BatchState> state = open_batch.Close(
      std::move(batch), &hold,
      [&](std::unique_lock<std::mutex>* h) { return StartBatch(most_pending, h); });
  state->plan_us = 0.0;  // what is left for this call (the parts, if any, were planned ahead)
  PlanRequests(*state, parted);
  BatchPlan& plan = state->plan;
  state->done = std::move(done);
  state->disabled_stages = disabled_stages;
  const int n = plan.copies_applied ? static_cast<int>(plan.live.size()) : 0;  // to launch
  const int largest = options.buckets.back();
  state->num_pieces = std::max(1, (n + largest - 1) / largest);
  state->pieces_left = state->num_pieces;
  state->queued_at = Clock::now();
  // When the GPU has nothing of ours, a hand-off's wake-up would add to this batch's latency:
  // launch inline. Otherwise the launcher packs and launches while this thread returns to
  // form (and plan) the next batch; the pieces queued on the stream keep the GPU busy.
  bool run_inline = false;
  {
    MutexLock lock(&mu);
    run_inline = pending_batches == 0;  // so to_launch is empty and nothing is launching
    // Run waited for zero, and only Submit and Run (one thread at a time) raise the count.
    ATTNRT_DCHECK(run_inline || completer == Completer::kThread);
    ++pending_batches;
    if (run_inline) {
      launching = true;
    } else {
      to_launch.push_back(state);
    }
  }
  if (run_inline) {
    LaunchBatch(state, completer, /*gpu_idle=*/true);
    MutexLock lock(&mu);
    launching = false;
    // Nobody waits for this end: the launcher sleeps on an empty queue, and WaitLaunched's
    // callers hold the submission lock, as this thread does (a wake-up here cost the B=1 caller
    // a futex call).
    return Status::Ok();
  }
  launch_cv.NotifyAll();
  return Status::Ok();
}

void CudaExecutor::Impl::LauncherLoop() {
  attnrt::internal::NameThisThread("attnrt-launch");
  for (;;) {
    std::shared_ptr<BatchState> state;
    {
      MutexLock lock(&mu);
      while (!stop && (to_launch.empty() || launching)) launch_cv.Wait(lock);
      if (to_launch.empty() || launching) return;  // stopping
      state = std::move(to_launch.front());
      to_launch.pop_front();
      launching = true;
    }
    LaunchBatch(state);
    state.reset();
    {
      MutexLock lock(&mu);
      launching = false;
    }
    launch_cv.NotifyAll();
  }
}

void CudaExecutor::Impl::WaitForUnorderedSolo(int buffer) {
  if (unordered_buffer < 0) return;
  const int solo = std::exchange(unordered_buffer, -1);
  if (solo == buffer) return;  // one stream: in order already
  if (cudaStreamWaitEvent(buffers[buffer].stream.get(), buffers[solo].done.get(), 0) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    Logger().error("cuda executor: could not order a piece after the solo piece before it; "
                   "waiting for that one");
    (void)cudaStreamSynchronize(buffers[solo].stream.get());
  }
}

void CudaExecutor::Impl::LaunchBatch(const std::shared_ptr<BatchState>& state,
                                     Completer completer, bool gpu_idle) {
  BatchState& b = *state;
  const double queue_us = MicrosSince(b.queued_at);
  const int n = b.plan.copies_applied ? static_cast<int>(b.plan.live.size()) : 0;
  const int largest = options.buckets.back();
  if (b.plan.any_host) {
    // Wake the pack helpers now: they are spinning by the time the copies start.
    const std::size_t row_bytes =
        (static_cast<std::size_t>(options.shape.num_q_heads) * options.shape.head_dim +
         2 * static_cast<std::size_t>(options.shape.kv_token_elems())) * sizeof(Half);
    if (static_cast<std::size_t>(std::min(n, largest)) * row_bytes >= kParallelCopyBytes) {
      pack_pool->Prepare();
    }
  }
  for (int i = 0; i < b.num_pieces; ++i) {
    Piece piece;
    piece.batch = state;
    piece.first = i * largest;
    piece.count = std::min(largest, n - piece.first);
    piece.timings.plan_us = i == 0 ? b.plan_us : 0.0;
    piece.timings.planned_ahead_us = i == 0 ? b.planned_ahead_us : 0.0;
    piece.timings.queue_us = i == 0 ? queue_us : 0.0;
    piece.timings.requests = piece.count;
    piece.caller_completes = completer == Completer::kCaller;
    // Run's pieces each complete before the next launches.
    piece.solo = piece.caller_completes || (gpu_idle && i == 0);
    if (piece.count > 0) {
      piece.bucket_index = static_cast<int>(
          std::lower_bound(options.buckets.begin(), options.buckets.end(), piece.count) -
          options.buckets.begin());
      piece.timings.bucket = options.buckets[piece.bucket_index];
      piece.buffer = AcquireBuffer();
      const Clock::time_point t_pack = Clock::now();
      NodeEnables e;
      bool any_host = false, any_device = false;
      int max_kv_length = 0;
      Pack(piece, &any_host, &any_device, &max_kv_length);
      e.h2d_full = any_host && !(b.disabled_stages & kStageH2DInputs);
      e.device_io = any_device;
      e.d2h = any_host && !(b.disabled_stages & kStageD2H);
      e.compute = !(b.disabled_stages & kStageCompute);
      const Clock::time_point t_launch = Clock::now();
      piece.timings.pack_us = std::chrono::duration<double, std::micro>(t_launch - t_pack).count();
      StatusOr<int> path = ChoosePath(piece.bucket_index, max_kv_length);
      // Before anything is queued on this stream, ForwardComputeOrder's record included.
      WaitForUnorderedSolo(piece.buffer);
      Status ready;
      if (path.ok() && b.batch.ready_event != nullptr) {
        ready = CudaStatus(cudaStreamWaitEvent(buffers[piece.buffer].stream.get(),
                                               b.batch.ready_event, 0),
                           "cudaStreamWaitEvent(ready_event)", __FILE__, __LINE__);
      }
      if (!path.ok()) {
        piece.launch_status = path.status();  // nothing queued: the buffer frees at once
        ForwardComputeOrder(piece.buffer);
      } else if (!ready.ok()) {
        piece.launch_status = ready;
        ForwardComputeOrder(piece.buffer);
      } else {
        piece.path = *path;
        piece.timings.path_max_kv_length = paths[piece.path].max_kv_length;
        if (options.record_timings && last_launched_buffer >= 0) {
          // Its done event is re-recorded only by this thread, when it takes the buffer again.
          piece.timings.launched_into_idle_stream =
              cudaEventQuery(buffers[last_launched_buffer].done.get()) == cudaSuccess;
        }
        Launch(piece, e, max_kv_length);
        piece.launched_at = Clock::now();
        piece.timings.launched_steady_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(
                piece.launched_at.time_since_epoch()).count();
        if (piece.event_recorded) last_launched_buffer = piece.buffer;
        if (piece.launched_solo && !piece.caller_completes) {
          if (piece.event_recorded) {
            unordered_buffer = piece.buffer;
          } else {
            (void)cudaStreamSynchronize(buffers[piece.buffer].stream.get());  // failed anyway
          }
        }
      }
      piece.timings.launch_us = MicrosSince(t_launch);
    }
    if (completer == Completer::kCaller) {
      // Before the next piece takes a buffer: a batch of more pieces than buffers runs one
      // piece at a time.
      CompletePiece(piece, caller_copy_rows, FinishTimes{});
      continue;
    }
    {
      MutexLock lock(&mu);
      completions.push_back(std::move(piece));
    }
    completion_cv.NotifyOne();
  }
}

}  // namespace attnrt::runtime
