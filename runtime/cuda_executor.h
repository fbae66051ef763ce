// The CUDA executor: each formed batch becomes one cudaGraphLaunch per bucket-sized piece. One
// graph per (bucket, path, pipeline buffer), captured once at start-up (largest bucket first,
// after an eager warm-up) and never again: everything that varies per batch lives in the
// pipeline buffer's fixed device arrays, filled by the graph's own memcpy node from the buffer's
// pinned staging. A pipeline buffer is the staging and device memory of one piece in flight.
// No CUDA header here (pimpl), so the scheduler and tests include it freely.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <attnrt/config.h>
#include "runtime/executor.h"
#include "runtime/fault_injection.h"

namespace attnrt::runtime {

enum class LaunchMode {
  kGraph,  // one graph replay per piece (production)
  kEager,  // the same kernels and copies launched one by one (comparison, debugging)
};

// The name of the cuBLAS GEMM path in CudaExecutorOptions::paths (beside decode variant names).
inline constexpr std::string_view kGemmPathName = "gemm";

struct CudaExecutorOptions {
  ModelShape shape;
  // KV blocks on the device; 0 sizes the cache to kv_memory_fraction of the free device memory
  // left after the executor's own buffers and workspace.
  std::int32_t num_blocks = 0;
  double kv_memory_fraction = 0.5;
  std::vector<int> buckets = DefaultBuckets();
  int max_batch_size = 1024;  // larger than the largest bucket: split into pieces
  // Pipeline buffers: pieces in flight (>= 2), each with its own staging and device arrays.
  // 3: while one piece runs and one waits in the stream, the host forms, plans and packs the
  // next; with 2 the GPU idles whenever that host work plus the output copy outlasts one step
  // (H100, max batch 128: the scheduler reached 0.81x of the executor's capacity with 2).
  int num_buffers = 3;
  LaunchMode mode = LaunchMode::kGraph;
  // Decode paths to capture: decode variant names (kernels/decode.h) or kGemmPathName; empty
  // means the production default variant. The first is active until SelectPath(). The GEMM
  // path is captured once per context bucket (its Tpad, kernels/gemm_path.h) and each piece
  // runs the smallest Tpad that holds its longest sequence.
  std::vector<std::string> paths;
  // GEMM path only: the most workspace one (batch bucket, Tpad) plan may use. A plan whose whole
  // batch would need more runs in context chunks and, below one 64-token chunk of the whole
  // batch, in batch slices (kernels/gemm_path.h), so every length within max_context runs;
  // creation fails with ResourceExhausted when even one row of 64 tokens does not fit.
  std::size_t gemm_max_workspace_bytes = std::size_t{1} << 30;
  // Ask the driver that each kDevice request's pointers are device memory (a wrong pointer
  // would otherwise fault the context). Once per allocation: a pointer into an allocation
  // found before is accepted by a range lookup, so an allocation freed and passed again is not
  // re-checked.
  bool check_device_pointers = true;
  // Test-only fault points; null: a fresh set (or the one a ScopedFaultInjectionForTesting
  // installed), reachable through faults().
  std::shared_ptr<FaultInjection> faults;
  // Per-piece timings (host plan/pack/launch, GPU launch-to-completion) for benchmarks.
  bool record_timings = false;
  // How the completion thread waits for a piece's done event: it sleeps through the part of
  // the step the last pieces of its (path, bucket) took and spin-waits only the last
  // StepEstimates::kSpinTail (true), or spins the whole step (false: a core busy for every microsecond the
  // GPU works). Steps shorter than ~50 us (the tail plus the shortest sleep worth a timer:
  // B=1) are spun either way.
  bool sleep_through_steps = true;
  // Host-memory-only graphs of buckets whose staging is at most this many bytes each way move
  // it with copy kernels on the pinned buffers instead of memcpy nodes (H100: a B=1 round trip
  // of 24 KB in and 8 KB out took 11 us with kernels against 19.4 with memcpy nodes); 0 = memcpy
  // nodes always. Also memcpy nodes where the driver maps pinned memory at another address.
  std::size_t kernel_copy_max_bytes = 64 * 1024;
  // Helper threads that copy a large piece's host q/k/v into staging with the launching thread,
  // and its outputs back with the completion thread (one thread's memcpy limits the step at
  // large batches); -1 picks min(6, max(cores / 4,
  // cores / 2 - 2)): 6 on a 16-core host, where 6 helpers against 3 took an overloaded Runtime
  // at max batch 128 from 594-653 k to 719-739 k requests/s (H100, 2026-11-26, r11).
  int pack_threads = -1;
  // How long a pack helper spins for the next copy after one (and after the launcher announces
  // one) before it sleeps: a sleeping thread wakes in tens of microseconds, longer than a
  // B=32 copy. Spinning costs a core per helper only while large host-memory pieces keep coming.
  std::chrono::microseconds pack_spin{250};
  // Offer staging_memory() (pinned, mapped host memory): a scheduler stages requests in it and
  // submits them as kDevice, so no q/k/v/out copy runs on the host: the step reads and writes
  // them across PCIe. The Runtime turns it on (RuntimeOptions::stage_in_mapped_memory; H100:
  // half the runtime's CPU per request, a shorter step at 70% load:
  // bench/results/2026-11-26_h100_staged-requests/). Off for a bare executor, whose callers
  // stage their own requests.
  bool offer_staging_memory = false;
  // Pieces of device-memory requests only (kDevice: device memory, or staging_memory()) run a
  // graph of their own. On the split-KV paths its kernels read each request's q, k and v and
  // write its out/lse where the request lies (kernels::DecodeBatchView::q_rows, k_rows, ...):
  // metadata H2D, then append + decode, nothing else (H100, a lone piece of 128 staged
  // requests, H32 Hkv8 D128 T~600, with a gather of k/v still before it: GPU 133-135 us against
  // 176-177 with a gather of q/k/v and a scatter of out/lse,
  // bench/results/2026-11-27_h100_device-io-chunks/ r6; without that gather, a lone staged B=1
  // request through the executor 24-28 us against 30-34,
  // bench/results/2026-11-28_h100_kv-in-place/). Pieces with a request not 16-byte aligned
  // take the general graph (gather and scatter), and so do the pieces busy_gather_* (below)
  // names.
  // On the other paths (simple, GEMM), which gather q/k/v and scatter out/lse, buckets of at
  // least twice this many rows run in chunks of this many rows: chunk i+1's gather overlaps
  // chunk i's append + decode, and chunk i's scatter the next chunk's, instead of gather,
  // compute and scatter in series for the whole piece. Each chunk runs the plan of the bucket of
  // exactly this capacity (no chunks where there is none, or where it does not divide the
  // bucket). 0 = one chunk. H100, the lone piece above through the gather path: GPU 174-177 us
  // in chunks of 64 rows, 177-191 in 32, 194-198 in 16, 187-192 in one chunk (r3, r5): smaller
  // chunks lose more to each compute's tail than they overlap.
  int device_io_chunk_rows = 64;
  // A device-memory piece of at most busy_gather_max_rows requests whose longest row has at
  // least busy_gather_min_kv_length tokens, launched while earlier pieces are in flight, takes
  // the general graph (gather, step, scatter) instead of reading in place: its gather then runs
  // beside the step before it (in place, a grid that runs in one wave likely pays every CTA's
  // PCIe round trip for q at its start, and its out/lse writes at its end; not profiled). A piece
  // launched into an idle GPU reads in place (its gather, step and scatter would run in
  // series). H100, H32 Hkv8 D128, 1.5x load, overloaded (bench/results/
  // 2026-11-28_h100_long-saturation/, r3-r4): max batch 32 served 0.963 of the capacity at
  // T=2048 and 0.977-0.979 at T=4096 with the gather against 0.891 and 0.950-0.958 in place; at
  // max batch 128 the gathers of 128 rows cost more than they save (0.82-0.96 against
  // 0.95-0.99 in place, T=512-4096). 0 rows: always in place.
  int busy_gather_max_rows = 32;
  int busy_gather_min_kv_length = 2048;
};

// Graph and workspace memory of one captured (bucket, path), over all pipeline buffers.
struct BucketGraphReport {
  int bucket = 0;
  std::string path;                 // decode variant name, or "gemm/t<Tpad>"
  std::size_t graph_bytes = 0;      // device memory the instantiated+uploaded graphs took (driver)
  std::size_t workspace_bytes = 0;  // the path's workspace at this bucket (shared buffer)
  double capture_ms = 0.0;          // build + capture + instantiate + upload, all buffers
  int device_io_chunks = 1;         // row chunks of its device-memory graph (device_io_chunk_rows)
};

struct CudaExecutorMemory {
  std::size_t kv_cache_bytes = 0;
  std::size_t workspace_bytes = 0;      // one buffer, sized for the largest need of any path
  std::size_t buffer_device_bytes = 0;  // fixed input/output arrays of every pipeline buffer
  std::size_t pinned_bytes = 0;         // staging of every pipeline buffer
  std::size_t graph_bytes = 0;          // sum of BucketGraphReport::graph_bytes
  std::size_t total_device_bytes = 0;   // kv + workspace + pipeline buffers + graphs
  double capture_ms = 0.0;              // every graph
  int num_graphs = 0;                   // captured (bucket, path, buffer) graphs; fixed after start
  std::vector<BucketGraphReport> graphs;
  std::string ToString() const;
};

// One piece's timings (record_timings).
struct PieceTimings {
  int bucket = 0;
  int requests = 0;
  int host_requests = 0;  // of them, MemoryKind::kHost (the rest are kDevice)
  int path_max_kv_length = 0;  // the max_kv_length of the path that ran it (0: none ran)
  double plan_us = 0.0;    // validation + AppendToken for the whole batch (first piece only)
                           // at the Submit that closed it; the parts before: planned_ahead_us
  double planned_ahead_us = 0.0;
  double queue_us = 0.0;   // planned -> the launcher began the batch (first piece only)
  double pack_us = 0.0;    // filling the pinned staging for this piece
  double pack_copy_us = 0.0;  // of it: copying host-memory requests' q/k/v
  double launch_us = 0.0;  // graph launch (or eager launches) + completion event record
  double graph_launch_us = 0.0;  // of it: the cudaGraphLaunch call (or the eager launches) alone
  double gpu_us = 0.0;     // event before the launch to the completion event
  // The completion thread's side: launched -> it took the piece (its wake-up), took -> the
  // completion event observed, and the copy of host-memory outputs out of the staging.
  double handoff_us = 0.0;
  double wait_us = 0.0;
  double copy_out_us = 0.0;
  // The completion thread's time finishing the batch of the piece it completed before this one
  // (0 when that piece left its batch unfinished): the planner's Settle, and the batch's done
  // callback (the scheduler's hand-off to delivery; a small batch of futures delivered inline).
  // Part of handoff_us when the thread was behind.
  double previous_settle_us = 0.0;
  double previous_done_callback_us = 0.0;
  // When its launch returned, on std::chrono::steady_clock (ns since its epoch): a timeline.
  std::int64_t launched_steady_ns = 0;
  // The previous piece had completed when this one was launched (record_timings): the GPU sat
  // idle, and gpu_us includes the launch's own latency.
  bool launched_into_idle_stream = false;
  // It ran on a solo graph of the smallest bucket (host-memory or, on the in-place paths,
  // device-memory: no compute-order event nodes), launched while nothing of ours was in flight.
  bool solo = false;
  // Its step read q/k/v and wrote out/lse where the requests live (the device-memory graph of
  // a path that reads rows in place), with no gather or scatter.
  bool in_place = false;
};

// Thread safety: as Executor. Submit plans a batch on the calling thread; a launcher thread
// packs and launches it (the calling thread itself when no other batch is in flight), so the
// next batch's plan overlaps this one's pack and launch. Each pipeline buffer has a stream, so
// a piece's copies overlap the previous piece's compute; the computes (KV appends included) run
// in submission order. A completion thread waits on each piece's event, copies host-memory
// outputs out of the pinned staging and calls done. Run does all of it on the calling thread
// (after the batches before it have completed), saving the two hand-offs' wake-ups. Sequence
// management and SelectPath wait for every planned batch to be launched.
class CudaExecutor : public Executor {
 public:
  ~CudaExecutor() override;

  const ModelShape& shape() const override;
  int max_batch_size() const override;
  std::vector<int> buckets() const override;
  int max_in_flight() const override;
  StagingMemory* staging_memory() override;
  bool accepts_device_memory() const override { return true; }

  Status Submit(Batch batch, BatchDoneFn done) override;
  // Parts are validated and planned as they come (Executor::SubmitPart); they are packed and
  // launched with the rest at Submit.
  bool accepts_parts() const override { return true; }
  Status SubmitPart(Batch part) override;
  int preferred_part_size() const override { return kPreferredPartSize; }
  static constexpr int kPreferredPartSize = 32;
  StatusOr<std::vector<Status>> Run(Batch batch) override;
  void Wait() override;

  Status CreateSequence(SequenceId id) override;
  Status ForkSequence(SequenceId parent, SequenceId child) override;
  Status FreeSequence(SequenceId id) override;
  Status Prefill(SequenceId id, int layer, int num_tokens, const Half* k, const Half* v) override;
  StatusOr<int> SequenceLength(SequenceId id, int layer) const override;
  bool HasSequence(SequenceId id) const override;
  ExecutorStats stats() const override;

  LaunchMode mode() const;
  const CudaExecutorMemory& memory() const;
  // The names SelectPath takes (as given in the options).
  std::vector<std::string> paths() const;
  std::string_view active_path() const;
  // Later batches run `name` (one of paths()); NotFound lists them.
  Status SelectPath(std::string_view name);
  // Reads token `position` of (id, layer) into host k/v ([Hkv][D]); drains running batches.
  Status ReadToken(SequenceId id, int layer, int position, Half* k, Half* v);
  // Test-only fault points (runtime/fault_injection.h), as in the CPU executor: block
  // allocation (ResourceExhausted inside planning), copy-on-write copies (before any is
  // applied), launch (a real CUDA error: an invalid launch in place of the graph) and the whole
  // piece after it ran (as a device error reported at completion would).
  FaultInjection& faults();
  // The next `count` pieces fail at launch. Same as faults().launch.Arm(count).
  void InjectLaunchFailuresForTesting(int count);
  // Device allocations kDevice requests were found in so far (check_device_pointers checks a
  // pointer in one of them without asking the driver).
  std::size_t KnownDeviceAllocationsForTesting() const;
  // Benchmarks only: leave stages out of every later piece (outputs are then garbage and the
  // cache's new tokens unwritten), so that stage costs show as differences. kStageH2DInputs
  // copies only the metadata (never stale: kernels always see this piece's lengths). A mask of
  // kStage* bits; 0 restores normal runs.
  static constexpr unsigned kStageH2DInputs = 1, kStageCompute = 2, kStageD2H = 4;
  void SetDisabledStagesForBenchmark(unsigned mask);
  // Timings recorded since the last call (record_timings).
  std::vector<PieceTimings> TakeTimings();

  struct Impl;

 private:
  friend StatusOr<std::unique_ptr<CudaExecutor>> CreateCudaExecutor(const CudaExecutorOptions&);
  explicit CudaExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Unavailable where no CUDA device is present; InvalidArgument naming the option on bad
// options; Unimplemented for a path this shape or build does not support.
StatusOr<std::unique_ptr<CudaExecutor>> CreateCudaExecutor(const CudaExecutorOptions& options);

}  // namespace attnrt::runtime
