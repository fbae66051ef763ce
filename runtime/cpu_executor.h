// The CPU executor: the Executor interface over a host KV cache (FP16 or FP8 E4M3, as
// ModelShape::kv_cache_type), running the reference append and decode (kernels/reference.cc) on
// its own worker thread. Used by tests, examples and the
// scheduler's benchmarks on machines without a GPU. No CUDA header.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include <attnrt/config.h>
#include "api/internal/mutex.h"
#include "kvcache/kvcache.h"
#include "runtime/batch_plan.h"
#include "runtime/executor.h"
#include "runtime/fault_injection.h"

namespace attnrt::runtime {

struct CpuExecutorOptions {
  ModelShape shape;
  std::int32_t num_blocks = 1024;     // KV blocks in the host pools (> 0)
  std::vector<int> buckets = DefaultBuckets();  // reported to the scheduler; no padding on CPU
  int max_batch_size = 1024;
  int max_in_flight = 2;              // batches queued or running before Submit blocks (>= 1)
  bool float64_reference = false;     // FP64 accumulation in the reference (slower)
  // Test-only fault points (runtime/fault_injection.h); null: the executor's own (or the one a
  // ScopedFaultInjectionForTesting installed), reachable through faults().
  std::shared_ptr<FaultInjection> faults;
};

// Thread safety: as Executor. Batches run in submission order on one worker thread, which also
// calls the done callbacks; sequence management runs on the caller's thread, serialised with
// Submit by the planner's submission lock (Prefill also drains the worker, since it writes the
// pools directly).
class CpuExecutor final : public Executor {
 public:
  // InvalidArgument naming the option on a bad shape, block count, bucket list or limit.
  static StatusOr<std::unique_ptr<CpuExecutor>> Create(const CpuExecutorOptions& options);
  ~CpuExecutor() override;

  const ModelShape& shape() const override { return options_.shape; }
  int max_batch_size() const override { return options_.max_batch_size; }
  std::vector<int> buckets() const override { return options_.buckets; }
  int max_in_flight() const override { return options_.max_in_flight; }

  Status Submit(Batch batch, BatchDoneFn done) override;
  // Parts are planned as they come (Executor::SubmitPart); the worker runs the batch as one.
  bool accepts_parts() const override { return true; }
  Status SubmitPart(Batch part) override;
  // Runs the batch on the calling thread once every earlier batch is done (no hand-off to the
  // worker and back).
  StatusOr<std::vector<Status>> Run(Batch batch) override;
  void Wait() override;

  Status CreateSequence(SequenceId id) override;
  Status ForkSequence(SequenceId parent, SequenceId child) override;
  Status FreeSequence(SequenceId id) override;
  Status Prefill(SequenceId id, int layer, int num_tokens, const Half* k, const Half* v) override;
  StatusOr<int> SequenceLength(SequenceId id, int layer) const override;
  bool HasSequence(SequenceId id) const override { return planner_.Contains(id); }

  ExecutorStats stats() const override;

  // Test-only fault points: block allocation, copy-on-write copy, launch, whole batch.
  FaultInjection& faults() { return *faults_; }
  // The next `count` batches fail as a whole after running (their tokens are lost), as a device
  // error would; for tests of that path. Same as faults().batch.Arm(count).
  void InjectBatchFailuresForTesting(int count) { faults_->batch.Arm(count); }

  // The cache (tests read tokens back through it). Not concurrent with running batches.
  kvcache::KvCache& cache() { return *cache_; }

 private:
  // One submitted batch: the requests, their plan and the metadata packed on Submit (the
  // block tables are snapshotted there, since the table moves on with later batches).
  struct Job {
    Batch batch;
    BatchDoneFn done;
    BatchPlan plan;
    std::vector<std::int32_t> kv_lengths, layers, block_tables;
  };

  CpuExecutor(const CpuExecutorOptions& options, std::unique_ptr<kvcache::KvCache> cache);
  // Submit's and Run's checks of a closing batch after `parted` requests handed over in parts.
  Status CheckBatch(const Batch& batch, int parted) const;
  // A fresh job, the submission lock taken into `hold`.
  std::unique_ptr<Job> StartJob(std::unique_lock<std::mutex>* hold);
  void WorkerLoop();
  // Plans the job's requests from `parted` on (the parts before were planned as they came) and
  // snapshots their block rows, lengths and layers (later batches move the table on).
  void PlanJob(Job& job, int parted);
  // Runs a planned job (injected faults, RunJob), settles its tokens and counts it: its
  // per-request statuses. On the worker for Submit's jobs, on the caller's thread for Run's.
  std::vector<Status> Execute(Job& job);
  Status RunJob(Job& job);

  const CpuExecutorOptions options_;
  const std::shared_ptr<FaultInjection> faults_;  // never null
  const std::unique_ptr<kvcache::KvCache> cache_;
  BatchPlanner planner_;

  mutable Mutex mu_;
  CondVar cv_;
  OpenBatch<std::unique_ptr<Job>> open_;  // the batch being formed through SubmitPart
  std::deque<std::unique_ptr<Job>> queue_ GUARDED_BY(mu_);
  int pending_ GUARDED_BY(mu_) = 0;  // queued + running
  bool stop_ GUARDED_BY(mu_) = false;
  ExecutorStats stats_ GUARDED_BY(mu_);
  std::thread worker_;
};

}  // namespace attnrt::runtime
