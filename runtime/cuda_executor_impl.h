// CudaExecutor::Impl: the state the CUDA executor's parts share (runtime/cuda_executor.h is
// the public face). Internal to runtime/.
//
//   cuda_executor.cc    set-up (paths, pipeline buffers, the KV cache, warm-up, capture) and
//                       the public methods;
//   cuda_graphs.cc      one step's work on the stream, eager or captured into a graph per
//                       (path, bucket, pipeline buffer), and the per-piece node enables;
//   cuda_batch.cc       a batch: plan (under the planner's submission lock) on the submitting
//                       thread; pieces, pack the pinned staging and launch on the launcher
//                       thread (or inline when nothing else is in flight);
//   cuda_completion.cc  the completion thread: each piece's done event, outputs back to host
//                       requests, settling and the batch's callback.
//
// Per batch, on the submitting thread: plan on the host (validation, AppendToken,
// copy-on-write). Per piece of it, on the launcher thread in plan order (so the next batch's
// plan overlaps this one's pack and launch), or inline when the GPU has nothing of ours: pack
// the pipeline buffer's pinned staging, then one cudaGraphLaunch of the graph for (bucket,
// path, buffer):
//
//   H2D memcpy (metadata + q/k/v, or metadata only) -> gather (device-memory requests)
//     -> [captured: append-KV -> decode path] -> scatter (device-memory requests)
//     -> D2H memcpy (out + lse, for host-memory requests)
//
// followed by an event the completion thread waits on. A piece of host-memory requests only
// runs a lean copy of that graph holding just its nodes (host_exec); one of device-memory
// requests only, a graph built for them (device_exec: in row chunks, and on the split-KV paths
// reading q and writing out/lse in place); a mixed piece runs the full graph with the nodes it
// does not need disabled (cudaGraphNodeSetEnabled, only when the need changes). No piece
// re-captures.
#pragma once

#include "runtime/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include "api/internal/cuda_check.h"
#include "api/internal/log.h"
#include "api/internal/mutex.h"
#include "kernels/decode.h"
#include "kernels/gemm_path.h"
#include "kvcache/kvcache.h"
#include "kernels/batch_io.h"
#include "runtime/address_ranges.h"
#include "runtime/batch_plan.h"
#include "runtime/copy_pool.h"
#include "runtime/cuda_resources.h"

namespace attnrt::runtime {

using Clock = std::chrono::steady_clock;
using kernels::AddGatherNode;
using kernels::AddScatterNode;
using kernels::BatchIoArgs;
using kernels::LaunchGather;
using kernels::LaunchInvalidForTesting;
using kernels::LaunchScatter;

inline double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Host copies of a piece (the launcher's q/k/v pack, the completion thread's copy-out) are
// spread over the pack pool from this many bytes on (below, the hand-off costs more than it
// saves).
inline constexpr std::size_t kParallelCopyBytes = 256 * 1024;

inline std::size_t Align16(std::size_t x) { return (x + 15) & ~std::size_t{15}; }

// Byte offsets of one pipeline buffer's arrays for a bucket of `capacity` rows. The input region
// (pinned staging and its device mirror) holds the metadata first, then q/k/v, so one H2D copy
// of meta_bytes serves device-memory pieces and one of in_bytes the others. The output region
// holds out then lse. Offsets depend on the bucket, so each bucket's H2D copies only its own bytes.
struct BufferLayout {
  int capacity = 0;
  std::size_t kv_lengths = 0, layers = 0, block_tables = 0;
  std::size_t q_ptrs = 0, k_ptrs = 0, v_ptrs = 0, out_ptrs = 0, lse_ptrs = 0;
  std::size_t meta_bytes = 0;
  std::size_t q = 0, k = 0, v = 0, in_bytes = 0;
  std::size_t out = 0, lse = 0, out_bytes = 0;

  static BufferLayout For(const ModelShape& shape, int capacity, int max_blocks) {
    BufferLayout l;
    l.capacity = capacity;
    const std::size_t c = static_cast<std::size_t>(capacity);
    std::size_t off = 0;
    auto take = [&off](std::size_t bytes) {
      const std::size_t at = off;
      off = Align16(off + bytes);
      return at;
    };
    l.kv_lengths = take(c * sizeof(std::int32_t));
    l.layers = take(c * sizeof(std::int32_t));
    l.block_tables = take(c * static_cast<std::size_t>(max_blocks) * sizeof(std::int32_t));
    l.q_ptrs = take(c * sizeof(std::uint64_t));
    l.k_ptrs = take(c * sizeof(std::uint64_t));
    l.v_ptrs = take(c * sizeof(std::uint64_t));
    l.out_ptrs = take(c * sizeof(std::uint64_t));
    l.lse_ptrs = take(c * sizeof(std::uint64_t));
    l.meta_bytes = off;
    const std::size_t q_bytes = c * shape.num_q_heads * shape.head_dim * sizeof(Half);
    const std::size_t kv_bytes = c * static_cast<std::size_t>(shape.kv_token_elems()) * sizeof(Half);
    l.q = take(q_bytes);
    l.k = take(kv_bytes);
    l.v = take(kv_bytes);
    l.in_bytes = off;
    off = 0;
    l.out = take(q_bytes);
    l.lse = take(c * shape.num_q_heads * sizeof(float));
    l.out_bytes = off;
    return l;
  }
};

static_assert(kGemmPathName == kernels::kGemmVariantName, "the executor's name of the GEMM path");
static_assert(std::is_same_v<DeviceEvent, cudaEvent_t>, "executor.h's DeviceEvent is cudaEvent_t");

// A decode path as the executor runs it: an entry of the kernels' variant table at one of its
// kv-length buckets (the GEMM path has one per Tpad), planned once per batch bucket; each plan's
// runs (append + decode) are what that bucket's graphs capture.
struct DecodePath {
  const kernels::DecodeVariant* variant = nullptr;
  std::string name;        // "split_kv", "gemm/t256"
  int max_kv_length = 0;   // longest length its plans run
  std::vector<kernels::DecodePlan> plans;  // [bucket]
};

// Which optional nodes a piece needs.
struct NodeEnables {
  bool h2d_full = true;  // host-memory q/k/v present (else the metadata-only copy)
  bool device_io = true;  // gather + scatter for device-memory requests
  bool d2h = true;        // host-memory outputs present
  bool compute = true;    // append + decode (off only for SetDisabledStagesForBenchmark)
  friend bool operator==(const NodeEnables&, const NodeEnables&) = default;
  // Host-memory requests only, every stage on: the piece runs CapturedGraph::host_exec.
  bool host_only() const { return h2d_full && !device_io && d2h && compute; }
  // Device-memory requests only, every stage on: the piece runs CapturedGraph::device_exec.
  bool device_only() const { return !h2d_full && device_io && !d2h && compute; }
};

// A (path, bucket, pipeline buffer)'s graphs. `exec` holds every optional node (toggled per
// piece through `enabled`: mixed pieces and the benchmark's disabled stages); `host_exec` and
// `device_exec` only what a piece of host-memory or of device-memory requests needs
// (AddHostGraph, AddDeviceGraph): no disabled nodes on their launch path (H100, B=1: the
// general graph with its three disabled nodes launched slower than the same work eager). In
// buckets whose staging is at most kernel_copy_max_bytes each way their pinned <-> device copies
// are copy kernels, not memcpy nodes (B=1: 26 vs 35 us per executor step), joined to the
// compute's kernels by programmatic edges (B=1: 18.1 vs 19.6 us on the GPU). The smallest
// bucket also has `solo_exec`: the host-memory graph without the compute-order event nodes
// (H100, B=1: 1.5 us of the step), for a piece launched while the GPU has nothing of ours
// (Piece::solo), and on the paths that read requests in place `device_solo_exec`, the
// device-memory graph without them.
struct CapturedGraph {
  Graph graph;
  GraphExec exec;
  Graph host_graph;
  GraphExec host_exec;
  Graph solo_graph;    // smallest bucket only
  GraphExec solo_exec;
  Graph device_graph;
  GraphExec device_exec;
  Graph device_solo_graph;  // smallest bucket of an in-place path only
  GraphExec device_solo_exec;
  cudaGraphNode_t h2d_full = nullptr, h2d_meta = nullptr, gather = nullptr, scatter = nullptr,
                  d2h = nullptr;
  std::vector<cudaGraphNode_t> compute_nodes;  // the captured append + decode nodes
  std::optional<NodeEnables> enabled;  // as last set on `exec`; unknown after instantiation
};

// A pipeline buffer's pieces run on its own stream, so one piece's copies (H2D, gather, D2H,
// scatter) overlap the previous piece's compute; the computes themselves run one after another
// (KV appends in plan order, one shared workspace): each piece's compute waits for `computed`
// of the buffer used before it (buffers are taken round-robin) and records its own.
struct PipelineBuffer {
  PinnedBuffer in, out;
  DeviceBuffer dev_in, dev_out;
  Stream stream;
  Event start, done;
  Event computed;  // recorded after this buffer's latest compute (or its ordering forwarded)
  bool busy = false;  // guarded by CudaExecutor::Impl::mu (another object's: not annotated)
};

// Who completes a batch's pieces: the completion thread (Submit), or the caller (Run).
enum class Completer { kThread, kCaller };

struct BatchState {
  Batch batch;
  BatchDoneFn done;
  BatchPlan plan;
  double plan_us = 0.0;          // planning at the Submit that closed it (all of it without parts)
  double planned_ahead_us = 0.0;  // planning its parts took before (SubmitPart)
  Status copy_error;             // why its copy-on-write copies failed (plan.copies_applied false)
  unsigned disabled_stages = 0;  // CudaExecutor::SetDisabledStagesForBenchmark at Submit
  Clock::time_point queued_at;   // handed to the launcher (or launched inline)
  int num_pieces = 0;   // set at Submit
  int pieces_left = 0;  // its completer only (set before the first piece is queued)
  bool failed = false;  // its completer only
};

// One launch: a bucket-sized range of a batch's live requests.
struct Piece {
  std::shared_ptr<BatchState> batch;
  int buffer = -1;  // -1: nothing was launched (every request failed before the GPU)
  int bucket_index = 0;
  int path = 0;              // index into Impl::paths
  int first = 0, count = 0;  // range of batch->plan.live
  // Every kDevice row's q and out 16-byte aligned (Pack): the step may read and write them in
  // place (a path with DecodeVariant::reads_rows_in_place).
  bool device_rows_aligned = true;
  Status launch_status;
  bool event_recorded = false;
  // May run solo: launched while no other piece can be running (the first piece of a batch
  // launched inline, or any piece of Run's). A host-memory piece of the smallest bucket then
  // runs CapturedGraph::solo_exec (`launched_solo`), which neither waits for the previous compute
  // (there is none) nor records `computed`: the next piece launched waits for its `done` instead
  // (Impl::unordered_buffer), or, for Run's pieces (`caller_completes`), the caller awaits it by
  // a stream sync (StreamWait: no `done` unless record_timings) before anything else can launch.
  bool solo = false;
  bool caller_completes = false;
  bool launched_solo = false;
  bool StreamWait() const { return launched_solo && caller_completes; }
  Clock::time_point launched_at;  // after the launch returned
  PieceTimings timings;
};

// The completion thread's estimate of how long a step of each (path, bucket) runs on the GPU,
// from the pieces whose completion it saw while spinning (CudaExecutorOptions::
// sleep_through_steps). Used by one completer at a time: the completion thread, or Run's
// caller while nothing else is pending.
class StepEstimates {
 public:
  // The wait ends this long before the estimated completion, spinning from there.
  static constexpr std::chrono::microseconds kSpinTail{20};
  // Shorter sleeps than this are not worth a timer and a wake-up.
  static constexpr std::chrono::microseconds kMinSleep{30};

  explicit StepEstimates(std::size_t keys) : expected_us_(keys, 0.0) {}

  // Waits for `done` of a piece of `key` launched at `launched_at`.
  cudaError_t Wait(cudaEvent_t done, std::size_t key, Clock::time_point launched_at);

 private:
  std::vector<double> expected_us_;
  Clock::time_point last_done_{};  // when the previous piece was seen complete
};


// The device allocations (cudaMalloc, managed, mapped pinned) that kDevice requests' pointers
// were found in, by their whole address range (cuMemGetAddressRange): a request's q/k/v/out/lse
// in allocations seen before are checked by one lock and a map lookup each instead of one
// cudaPointerGetAttributes each (H200: ~1 us a request on the batching thread, 2026-11-29).
// An allocation is checked once: a range the caller frees is not re-checked if passed again.
class KnownDeviceAllocations {
 public:
  // True if every non-null pointer lies in a known allocation (false for all null).
  bool ContainsAll(std::initializer_list<const void*> pointers) const {
    return ranges_.ContainsAll(pointers);
  }
  bool Contains(const void* p) const { return ranges_.Contains(p); }
  std::size_t size() const { return ranges_.size(); }
  // Records the allocation holding p, a pointer the driver said the device can read; false if
  // its range is unknown to the driver (then p is checked again next time).
  bool AddAllocationOf(const void* p);
  // The executor's device, whose context the range lookup needs current on the calling thread.
  void set_device(int ordinal) { device_ = ordinal; }

 private:
  int device_ = 0;
  static constexpr std::size_t kMaxAllocations = 4096;
  AddressRanges ranges_;
};

// Pinned, mapped host memory that the graphs' gather/scatter kernels read and write in place
// (unified addressing: the host address is the device address). Keeps the ranges it handed out
// so the kDevice pointer check accepts them without a driver call per pointer.
class MappedStagingMemory final : public StagingMemory {
 public:
  // Called when a scheduler sets up its staged working set, never per request. A failure
  // leaves a warning: the caller then stages in ordinary memory (those requests take the copy
  // path), which is slower but correct.
  void* Allocate(std::size_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      Logger().warn("cuda executor: no mapped staging memory of {} bytes (cudaHostAlloc: {}); "
                    "requests staged elsewhere take the copy path", bytes, cudaGetErrorString(err));
      return nullptr;
    }
    void* device = nullptr;
    err = cudaHostGetDevicePointer(&device, p, 0);
    if (err != cudaSuccess || device != p) {
      (void)cudaGetLastError();
      Logger().warn("cuda executor: mapped staging memory at {} is not device-addressable at the "
                    "same address (cudaHostGetDevicePointer: {}); requests staged elsewhere "
                    "take the copy path", p, cudaGetErrorString(err));
      cudaFreeHost(p);
      return nullptr;
    }
    ranges_.Add(p, bytes);
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    ranges_.Remove(p);
    cudaFreeHost(p);
  }
  // True if p lies in memory this allocator handed out.
  bool Contains(const void* p) const { return ranges_.Contains(p); }
  // True if every non-null pointer does (false for all null); see AddressRanges::ContainsAll.
  bool ContainsAll(std::initializer_list<const void*> pointers) const {
    return ranges_.ContainsAll(pointers);
  }

 private:
  AddressRanges ranges_;
};

struct CudaExecutor::Impl {
  CudaExecutorOptions options;
  std::vector<BufferLayout> layouts;  // per bucket
  std::vector<DecodePath> paths;
  std::vector<std::string> path_names;  // as given in options.paths
  int selected_name = 0;                // index into path_names
  std::vector<int> active;  // paths named path_names[selected_name], by ascending max_kv_length
  std::vector<char> runnable;           // [path][bucket]: workspace within budget (captured)
  int max_blocks = 0;

  Stream stream;  // capture, warm-up and upload; pieces run on their buffer's stream
  CublasHandle cublas;  // for plans that use cuBLAS (the GEMM path) only
  std::vector<PipelineBuffer> buffers;
  // One workspace for every path and bucket (the computes run one after another). Its
  // first workspace_zero_bytes are the split-KV plans' arrival counters (zero between runs);
  // a plan without counters (the GEMM path) gets the workspace past them (WorkspaceFor).
  DeviceBuffer workspace;
  std::size_t workspace_zero_bytes = 0;
  std::unique_ptr<kvcache::KvCache> cache;
  DeviceBuffer kv_scales;  // an FP8 cache's scales (KvCache::kv_scales()) for the kernels
  kernels::KvPoolView pools;
  std::vector<CapturedGraph> graphs;  // [path][bucket][buffer]
  std::unique_ptr<BatchPlanner> planner;
  CudaExecutorMemory memory;
  std::shared_ptr<FaultInjection> faults;  // never null after Init
  unsigned disabled_stages = 0;  // SetDisabledStagesForBenchmark; submitting thread

  Mutex mu;
  CondVar cv;  // a buffer freed, or a batch completed (pending_batches fell)
  CondVar completion_cv;  // completions gained a piece, or stop: the completion thread's alone
  std::deque<Piece> completions GUARDED_BY(mu);
  // Submitted batches whose callback has not returned; Submit blocks while max_in_flight() are.
  int pending_batches GUARDED_BY(mu) = 0;
  // Planned batches waiting for the launcher, in plan order (the order their pieces must run).
  std::deque<std::shared_ptr<BatchState>> to_launch GUARDED_BY(mu);
  bool launching GUARDED_BY(mu) = false;  // a LaunchBatch runs (launcher thread or inline)
  CondVar launch_cv;  // to_launch gained a batch, or a LaunchBatch ended
  int next_buffer = 0;  // whichever thread runs LaunchBatch (one at a time: `launching`)
  int last_launched_buffer = -1;  // likewise: the buffer of the piece launched last
  // Likewise: the buffer of a solo piece (Piece::solo) whose compute the next piece launched
  // must wait for, through its `done` (WaitForUnorderedSolo); -1: none.
  int unordered_buffer = -1;
  std::vector<int> caller_copy_rows;  // CompletePiece's scratch on Run's caller (one at a time)
  bool stop GUARDED_BY(mu) = false;
  ExecutorStats stats GUARDED_BY(mu);
  // A deque: a vector's growth past a power of two copied every entry and faulted in new pages
  // under `mu` on the completion thread (H200, 2026-11-29: ~1 ms at the 8,193rd piece of a run,
  // every batch slot held, the 70%-load runs' largest late cluster).
  std::deque<PieceTimings> timings GUARDED_BY(mu);
  std::thread completion_thread;
  std::thread launcher_thread;
  std::unique_ptr<CopyPool> pack_pool;  // the launcher's packs and the completion thread's copy-outs
  std::unique_ptr<StepEstimates> step_estimates;  // sleep_through_steps; the completer
  // Every pipeline buffer's pinned staging is device-addressable at its host address (unified
  // addressing), so copy kernels can read and write it (kernel_copy_max_bytes).
  bool pinned_is_device_addressable = false;
  std::unique_ptr<MappedStagingMemory> staging = std::make_unique<MappedStagingMemory>();
  // Device allocations kDevice requests were found in (check_device_pointers): later pointers
  // into them are checked by a range lookup, not a driver call each.
  std::unique_ptr<KnownDeviceAllocations> known_allocations =
      std::make_unique<KnownDeviceAllocations>();
  OpenBatch<std::shared_ptr<BatchState>> open_batch;  // the batch being formed through SubmitPart

  ~Impl() {
    if (open_batch.is_open()) {
      Logger().warn("cuda executor: destroyed with a batch of {} requests open (SubmitPart "
                    "without Submit); dropped", open_batch.Drop());
    }
    if (completion_thread.joinable()) {
      WaitAll();
      {
        MutexLock lock(&mu);
        stop = true;
      }
      cv.NotifyAll();
      completion_cv.NotifyAll();
      launch_cv.NotifyAll();
      completion_thread.join();
      if (launcher_thread.joinable()) launcher_thread.join();
    }
    if (stream.get() != nullptr) {
      const cudaError_t err = cudaDeviceSynchronize();
      if (err != cudaSuccess) {
        Logger().warn("cuda executor: cudaDeviceSynchronize at teardown: {}",
                      cudaGetErrorString(err));
      }
    }
  }

  int num_buckets() const { return static_cast<int>(options.buckets.size()); }
  CapturedGraph& GraphFor(int path, int bucket, int buffer) {
    return graphs[(static_cast<std::size_t>(path) * num_buckets() + bucket) * buffers.size() +
                  buffer];
  }

  Status Init();
  Status AddPaths(const std::string& name, const kernels::DecodeDevice& device);
  Status Select(int name_index);
  StatusOr<int> ChoosePath(int bucket, int max_kv_length) const;
  kernels::DecodeBatchView ViewFor(int bucket, int buffer) const;
  BatchIoArgs IoArgsFor(int bucket, int buffer) const;
  // The compute of a piece on `st` (a buffer's stream, or the capture stream).
  Status EnqueueCompute(int path, int bucket, int buffer, cudaStream_t st);
  // The buffer whose compute precedes `buffer`'s (round-robin).
  int PreviousBuffer(int buffer) const {
    return (buffer + static_cast<int>(buffers.size()) - 1) % static_cast<int>(buffers.size());
  }
  // Keeps the compute order when `buffer`'s piece queued no compute (a failed or skipped
  // launch): its `computed` is recorded after the previous buffer's.
  void ForwardComputeOrder(int buffer);
  // Adds to `graph` an event wait on the previous buffer's `computed` before `roots` and a
  // record of `buffer`'s after `leaves` (the compute's own nodes).
  Status AddComputeOrderNodes(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& roots,
                              const std::vector<cudaGraphNode_t>& leaves, int buffer);
  kernels::DecodeWorkspace WorkspaceFor(const kernels::DecodePlan& plan) const;
  Status EnqueueEager(int path, int bucket, int buffer, const NodeEnables& e);
  Status Capture(int path, int bucket, int buffer, CapturedGraph* out);
  // The host-memory graph, its compute captured anew behind the H2D (metadata + q/k/v) ->
  // append + decode -> D2H; copy kernels joined to the compute's kernels by programmatic edges;
  // with `compute_order` (all but solo_exec) the compute between the wait for the previous
  // buffer's `computed` and the record of this one's.
  Status AddHostGraph(int path, int bucket, int buffer, bool compute_order, Graph* graph,
                      GraphExec* exec);
  // The bucket whose plan runs each row chunk of `bucket`'s device-memory graph
  // (CudaExecutorOptions::device_io_chunk_rows): `bucket` itself for one chunk.
  int ChunkBucket(int path, int bucket) const;
  // The device-memory graph of `bucket` in chunks of ChunkBucket's capacity: metadata H2D,
  // then per chunk gather -> append + decode -> scatter, the gathers in a chain and the
  // computes in a chain, so chunk i+1's gather and chunk i's scatter overlap the computes. On a
  // path that reads requests in place (one chunk) the step reads q/k/v and writes out/lse in the
  // requests' memory: metadata H2D -> append + decode, no gather, no scatter.
  // Without `compute_order` (device_solo_exec) neither the wait for the previous buffer's
  // `computed` nor the record of this one's.
  Status AddDeviceGraph(int path, int bucket, int buffer, bool compute_order, Graph* graph,
                        GraphExec* exec);
  // Whether a lean graph moving `in_bytes` to the device and `out_bytes` back copies with
  // kernels (kernel_copy_max_bytes) instead of memcpy nodes.
  bool CopiesByKernel(std::size_t in_bytes, std::size_t out_bytes) const {
    return pinned_is_device_addressable &&
           std::max(in_bytes, out_bytes) <= options.kernel_copy_max_bytes;
  }
  // A bucket so small that its host-memory graph (copy kernels) beats the device-memory one
  // where that one gathers (simple, GEMM: kernels around the step): requests staged in this
  // executor's mapped memory are packed and take the host path there (H100, B=1: executor 27.9
  // vs 29.9 us with a gather, 2026-11-26). On a path that reads requests in place the
  // device-memory graph runs the step's kernels alone and is the faster one
  // (bench/results/2026-11-28_h100_kv-in-place/).
  // (The active paths share one variant; the piece's own is chosen after its pack.)
  bool PackStagedRows(int bucket) const {
    const BufferLayout& l = layouts[bucket];
    return options.mode == LaunchMode::kGraph &&
           !paths[active.front()].variant->reads_rows_in_place &&
           CopiesByKernel(l.in_bytes, l.out_bytes);
  }
  Status SetEnables(CapturedGraph& g, const NodeEnables& e);
  Status DrainStream();

  // kCaller (Run): waits until no batch is pending, launches on the calling thread and completes
  // each piece there (done has run when Submit returns OK).
  Status Submit(Batch batch, BatchDoneFn done, Completer completer = Completer::kThread);
  Status SubmitPart(Batch part);
  // A new batch's state, once fewer than `most_pending` batches are pending, with the
  // submission lock taken into *hold.
  std::shared_ptr<BatchState> StartBatch(int most_pending, std::unique_lock<std::mutex>* hold);
  // Plans requests [first, end) of state.batch onto its plan and applies their copy-on-write
  // copies (a failed copy fails every request of the batch); adds the time to state.plan_us.
  void PlanRequests(BatchState& state, int first);
  // Cuts a planned batch into pieces; packs, launches and queues each for the completion thread
  // (or completes it on this thread: kCaller).
  // `gpu_idle`: no earlier batch is pending (launched inline), so its first piece may be solo.
  void LaunchBatch(const std::shared_ptr<BatchState>& state,
                   Completer completer = Completer::kThread, bool gpu_idle = false);
  // Orders the compute of the piece about to launch on `buffer` after the solo piece launched
  // before it, if any (Piece::solo).
  void WaitForUnorderedSolo(int buffer);
  void LauncherLoop();
  // Returns once every planned batch is launched (sequence calls, copy-on-write, SelectPath:
  // with the submission lock held, no new plan can start meanwhile).
  void WaitLaunched() {
    MutexLock lock(&mu);
    while (launching || !to_launch.empty()) launch_cv.Wait(lock);
  }
  int AcquireBuffer();
  void Pack(Piece& piece, bool* any_host, bool* any_device, int* max_kv_length);
  // Whether a piece of device-memory requests only, whose longest row has `max_kv_length`
  // tokens, runs CapturedGraph::device_exec rather than the general graph (on a path that reads
  // rows in place: its rows aligned, and not a busy gather, CudaExecutorOptions::busy_gather_*).
  bool DeviceGraphFits(const Piece& piece, int max_kv_length) const;
  void Launch(Piece& piece, const NodeEnables& e, int max_kv_length);
  void CompletionLoop();
  // Waits for a launched piece, copies host-memory outputs out, frees its buffer; settles the
  // batch and calls its done after its last piece. `copy_rows` is scratch. On the completion
  // thread, or the caller of Run while nothing else is pending.
  // How long the completion thread spent finishing a batch (PieceTimings::previous_*).
  struct FinishTimes {
    double settle_us = 0.0;
    double done_callback_us = 0.0;
  };
  // Completes `piece`; `previous` goes into its timings. Returns the times finishing its batch
  // took (zero when other pieces of the batch remain).
  FinishTimes CompletePiece(Piece& piece, std::vector<int>& copy_rows, FinishTimes previous);
  void WaitAll() {
    MutexLock lock(&mu);
    while (pending_batches != 0) cv.Wait(lock);
  }
};

}  // namespace attnrt::runtime
