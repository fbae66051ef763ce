// CPU executor: plans and snapshots each batch on the submitting thread, runs the reference
// append + decode (FP16 or FP8 E4M3 pools, as the shape's kv_cache_type) on the worker thread,
// which then calls the done callback.
#include "runtime/cpu_executor.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "api/internal/log.h"
#include "api/internal/thread_name.h"
#include "kernels/reference.h"

namespace attnrt::runtime {

StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::Create(const CpuExecutorOptions& options) {
  ATTNRT_RETURN_IF_ERROR(options.shape.Validate());
  ATTNRT_RETURN_IF_ERROR(ValidateBuckets(options.buckets));
  if (options.num_blocks <= 0) {
    return InvalidArgumentError("num_blocks " + std::to_string(options.num_blocks) +
                                ", expected >= 1");
  }
  if (options.max_batch_size < 1) {
    return InvalidArgumentError("max_batch_size " + std::to_string(options.max_batch_size) +
                                ", expected >= 1");
  }
  if (options.max_in_flight < 1) {
    return InvalidArgumentError("max_in_flight " + std::to_string(options.max_in_flight) +
                                ", expected >= 1");
  }
  ATTNRT_ASSIGN_OR_RETURN(
      std::unique_ptr<kvcache::KvCache> cache,
      kvcache::KvCache::Create(options.shape, options.num_blocks, kvcache::PoolKind::kHost));
  return std::unique_ptr<CpuExecutor>(new CpuExecutor(options, std::move(cache)));
}

CpuExecutor::CpuExecutor(const CpuExecutorOptions& options,
                         std::unique_ptr<kvcache::KvCache> cache)
    : options_(options),
      faults_(options.faults != nullptr ? options.faults : FaultInjectionForNewExecutor()),
      cache_(std::move(cache)),
      planner_(&cache_->sequences(), /*allow_device_memory=*/false, nullptr) {
  // Allocate runs under the planner's table lock; the point itself is thread-safe.
  cache_->allocator().SetFailureHookForTesting(
      [faults = faults_] { return faults->block_allocation.Hit(); });
  worker_ = std::thread([this] {
    attnrt::internal::NameThisThread("attnrt-cpu-exec");
    WorkerLoop();
  });
}

CpuExecutor::~CpuExecutor() {
  if (open_.is_open()) {
    Logger().warn("cpu executor: destroyed with a batch of {} requests open (SubmitPart without "
                  "Submit); dropped", open_.Drop());
  }
  Wait();
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  worker_.join();
}

Status CpuExecutor::CheckBatch(const Batch& batch, int parted) const {
  ATTNRT_RETURN_IF_ERROR(ValidateBatchShape(batch, options_.max_batch_size, parted));
  if (batch.ready_event != nullptr) {
    return InvalidArgumentError("ready_event is set; the CPU executor has no device events");
  }
  return Status::Ok();
}

std::unique_ptr<CpuExecutor::Job> CpuExecutor::StartJob(std::unique_lock<std::mutex>* hold) {
  *hold = planner_.LockSubmission();  // until Submit queues the job (batch_plan.h)
  return std::make_unique<Job>();
}

Status CpuExecutor::SubmitPart(Batch part) {
  const int parted = open_.parted();
  ATTNRT_RETURN_IF_ERROR(open_.Add(part, options_.max_batch_size,
                                   [this](std::unique_lock<std::mutex>* h) { return StartJob(h); }));
  planner_.PlanFrom(open_.state().batch, parted, &open_.state().plan, options_.max_batch_size);
  return Status::Ok();
}

// On the calling thread, as the CUDA executor's Run: after every batch submitted before it, with
// the submission lock held throughout (no sequence call lands between its plan and its run, and
// none while it writes the cache), no hand-off to the worker and back.
StatusOr<std::vector<Status>> CpuExecutor::Run(Batch batch) {
  if (open_.is_open()) {
    return FailedPreconditionError("Run while a batch is open (SubmitPart); Submit closes it");
  }
  ATTNRT_RETURN_IF_ERROR(CheckBatch(batch, 0));
  Wait();  // the worker is idle from here: Submit is never called beside Run
  std::unique_lock<std::mutex> hold = planner_.LockSubmission();
  Job job;
  job.batch = std::move(batch);
  PlanJob(job, 0);
  {
    MutexLock lock(&mu_);
    ++pending_;  // Wait() from another thread (Prefill's, Drain's) waits for this batch too
  }
  std::vector<Status> statuses = Execute(job);
  {
    MutexLock lock(&mu_);
    --pending_;
  }
  cv_.NotifyAll();
  return statuses;
}

Status CpuExecutor::Submit(Batch batch, BatchDoneFn done) {
  const int parted = open_.parted();
  ATTNRT_RETURN_IF_ERROR(CheckBatch(batch, parted));
  if (!done) return InvalidArgumentError("done is empty");

  std::unique_lock<std::mutex> hold;  // until the job is queued (batch_plan.h)
  std::unique_ptr<Job> job = open_.Close(
      std::move(batch), &hold, [this](std::unique_lock<std::mutex>* h) { return StartJob(h); });
  PlanJob(*job, parted);
  job->done = std::move(done);

  MutexLock lock(&mu_);
  while (pending_ >= options_.max_in_flight) cv_.Wait(lock);
  ++pending_;
  queue_.push_back(std::move(job));
  lock.Unlock();
  cv_.NotifyAll();
  return Status::Ok();
}

void CpuExecutor::WorkerLoop() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(lock);
      if (queue_.empty()) return;  // stop_ with nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->done(Execute(*job));
    {
      MutexLock lock(&mu_);
      --pending_;
    }
    cv_.NotifyAll();
  }
}

void CpuExecutor::PlanJob(Job& job, int parted) {
  planner_.PlanFrom(job.batch, parted, &job.plan);
  // Snapshot the metadata now: later Submits move the table on.
  const int mb = options_.shape.max_blocks_per_sequence();
  std::vector<PlannedRequest> live;
  live.reserve(job.plan.live.size());
  job.block_tables.assign(job.plan.live.size() * static_cast<std::size_t>(mb), -1);
  for (const PlannedRequest& p : job.plan.live) {
    const BatchRequest& r = job.batch.requests[p.index];
    Status row = planner_.FillBlockRow(job.batch, p, job.block_tables.data() + live.size() * mb);
    if (!row.ok()) {  // cannot happen after a successful AppendToken; fail it alone anyway
      job.plan.statuses[p.index] = row;
      continue;
    }
    job.kv_lengths.push_back(p.kv_length);
    job.layers.push_back(r.layer);
    live.push_back(p);
  }
  job.plan.live = std::move(live);
}

std::vector<Status> CpuExecutor::Execute(Job& job) {
  Status run;
  if (!job.plan.live.empty() && faults_->launch.Hit()) {
    run = InternalError("injected launch failure (FaultInjection::launch)");
    job.plan.copies_applied = job.plan.copies.empty();
  } else {
    run = RunJob(job);
  }
  if (run.ok() && faults_->batch.Hit()) {
    run = InternalError("injected batch failure (FaultInjection::batch)");
  }
  if (!run.ok()) {
    Logger().error("cpu executor: a batch of {} requests failed: {}", job.plan.live.size(),
                   run.ToString());
    for (const PlannedRequest& p : job.plan.live) {
      if (job.plan.statuses[p.index].ok()) job.plan.statuses[p.index] = run;
    }
  }
  planner_.Settle(job.batch, &job.plan);
  {
    MutexLock lock(&mu_);
    ++stats_.batches;
    stats_.requests += static_cast<std::int64_t>(job.batch.requests.size());
    if (!run.ok()) ++stats_.failed_batches;
  }
  return std::move(job.plan.statuses);
}

Status CpuExecutor::RunJob(Job& job) {
  const ModelShape& shape = options_.shape;
  const int n = static_cast<int>(job.plan.live.size());
  if (n == 0) return Status::Ok();
  const std::size_t q_row = static_cast<std::size_t>(shape.num_q_heads) * shape.head_dim;
  const std::size_t kv_row = static_cast<std::size_t>(shape.kv_token_elems());

  kernels::KvPoolView pools;
  pools.k = cache_->k_data();
  pools.v = cache_->v_data();
  pools.num_layers = shape.num_layers;
  pools.num_blocks = cache_->num_blocks();
  pools.num_kv_heads = shape.num_kv_heads;
  pools.block_size = shape.block_size;
  pools.head_dim = shape.head_dim;

  // An FP8 cache: the same geometry over its codes and scales (kernels/reference.h).
  const bool fp8 = cache_->type() == KvCacheType::kFp8E4M3;
  kernels::Fp8KvPoolView fp8_pools;
  if (fp8) {
    fp8_pools.geometry = pools;
    fp8_pools.geometry.k = fp8_pools.geometry.v = nullptr;
    fp8_pools.k = cache_->k_fp8();
    fp8_pools.v = cache_->v_fp8();
    fp8_pools.scales = cache_->kv_scales().data();
  }

  // Copy-on-write first, in batch order. PoolMemory directly (not KvCache::ApplyCopies): this
  // thread must not read the allocator, which the submitting thread keeps changing.
  if (!job.plan.copies.empty()) {
    const std::int64_t element_bytes = cache_->element_bytes();
    Status copied =
        faults_->copy.Hit()
            ? InternalError("injected copy-on-write copy failure (FaultInjection::copy)")
            : cache_->pools().CopyBlocks(job.plan.copies, pools.block_stride() * element_bytes,
                                         pools.layer_stride() * element_bytes, shape.num_layers);
    if (!copied.ok()) {
      job.plan.copies_applied = false;  // none or some applied: Settle assumes none
      return copied;
    }
  }

  std::vector<Half> q(n * q_row), k(n * kv_row), v(n * kv_row), out(n * q_row);
  std::vector<float> lse(static_cast<std::size_t>(n) * shape.num_q_heads);
  for (int s = 0; s < n; ++s) {
    const BatchRequest& r = job.batch.requests[job.plan.live[s].index];
    std::memcpy(&q[s * q_row], r.q, q_row * sizeof(Half));
    std::memcpy(&k[s * kv_row], r.k, kv_row * sizeof(Half));
    std::memcpy(&v[s * kv_row], r.v, kv_row * sizeof(Half));
  }
  kernels::DecodeBatchView view;
  view.capacity = n;
  view.num_q_heads = shape.num_q_heads;
  view.max_blocks_per_seq = shape.max_blocks_per_sequence();
  view.kv_lengths = job.kv_lengths.data();
  view.layers = job.layers.data();
  view.block_tables = job.block_tables.data();
  view.q = q.data();
  view.k_new = k.data();
  view.v_new = v.data();
  view.out = out.data();
  view.lse = lse.data();
  view.scale = shape.scale();
  const kernels::ReferencePrecision precision = options_.float64_reference
                                                    ? kernels::ReferencePrecision::kFloat64
                                                    : kernels::ReferencePrecision::kFloat32;
  if (fp8) {
    kernels::ReferenceAppendKv(view, fp8_pools);
    kernels::ReferenceDecode(view, fp8_pools, precision);
  } else {
    kernels::ReferenceAppendKv(view, pools);
    kernels::ReferenceDecode(view, pools, precision);
  }
  for (int s = 0; s < n; ++s) {
    const BatchRequest& r = job.batch.requests[job.plan.live[s].index];
    std::memcpy(r.out, &out[s * q_row], q_row * sizeof(Half));
    if (r.lse != nullptr) {
      std::memcpy(r.lse, &lse[static_cast<std::size_t>(s) * shape.num_q_heads],
                  shape.num_q_heads * sizeof(float));
    }
  }
  return Status::Ok();
}

void CpuExecutor::Wait() {
  MutexLock lock(&mu_);
  while (pending_ != 0) cv_.Wait(lock);
}

// Sequence calls hold the submission lock (batch_plan.h): none lands between a batch's plan and
// its job being queued, and the worker runs queued jobs before any later one that reuses a
// freed block.
Status CpuExecutor::CreateSequence(SequenceId id) {
  auto hold = planner_.LockSubmission();
  return planner_.Create(id);
}

Status CpuExecutor::ForkSequence(SequenceId parent, SequenceId child) {
  auto hold = planner_.LockSubmission();
  return planner_.Fork(parent, child);
}

Status CpuExecutor::FreeSequence(SequenceId id) {
  auto hold = planner_.LockSubmission();
  return planner_.Free(id);
}

Status CpuExecutor::Prefill(SequenceId id, int layer, int num_tokens, const Half* k,
                            const Half* v) {
  auto hold = planner_.LockSubmission();
  Wait();  // it writes the pools from this thread
  return planner_.Prefill(*cache_, id, layer, num_tokens, k, v);
}

StatusOr<int> CpuExecutor::SequenceLength(SequenceId id, int layer) const {
  return planner_.WithTable([&](kvcache::SequenceTable& t) { return t.Length(id, layer); });
}

ExecutorStats CpuExecutor::stats() const {
  ExecutorStats s;
  {
    MutexLock lock(&mu_);
    s = stats_;
  }
  FillKvStats(planner_, *cache_, &s);
  return s;
}

}  // namespace attnrt::runtime
