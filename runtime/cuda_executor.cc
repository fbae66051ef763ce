// CUDA executor (cuda_executor.h). Per piece of a batch: plan on the host (validation,
// AppendToken, copy-on-write), pack the pipeline buffer's pinned staging, then one
// cudaGraphLaunch of the graph for (bucket, path, buffer):
//
//   H2D memcpy (metadata + q/k/v, or metadata only) -> gather (device-memory requests)
//     -> [captured: append-KV -> decode path] -> scatter (device-memory requests)
//     -> D2H memcpy (out + lse, for host-memory requests)
//
// followed by an event the completion thread waits on. Nodes a piece does not need are
// disabled on the instantiated graph (cudaGraphNodeSetEnabled, only when the need changes), so
// one graph serves host-memory, device-memory and mixed batches without re-capture.
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
namespace {

using Clock = std::chrono::steady_clock;
using kernels::AddGatherNode;
using kernels::AddScatterNode;
using kernels::BatchIoArgs;
using kernels::LaunchGather;
using kernels::LaunchInvalidForTesting;
using kernels::LaunchScatter;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

std::size_t Align16(std::size_t x) { return (x + 15) & ~std::size_t{15}; }

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
};

struct CapturedGraph {
  Graph graph;
  GraphExec exec;
  cudaGraphNode_t h2d_full = nullptr, h2d_meta = nullptr, gather = nullptr, scatter = nullptr,
                  d2h = nullptr;
  std::vector<cudaGraphNode_t> compute_nodes;  // the captured append + decode nodes
  std::optional<NodeEnables> enabled;  // as last set on `exec`; unknown after instantiation
};

struct PipelineBuffer {
  PinnedBuffer in, out;
  DeviceBuffer dev_in, dev_out;
  Event start, done;
  bool busy = false;  // guarded by CudaExecutor::Impl::mu (another object's: not annotated)
};

struct BatchState {
  Batch batch;
  BatchDoneFn done;
  BatchPlan plan;
  int pieces_left = 0;  // completion thread only (set before the first piece is queued)
  bool failed = false;  // completion thread only
};

// One launch: a bucket-sized range of a batch's live requests.
struct Piece {
  std::shared_ptr<BatchState> batch;
  int buffer = -1;  // -1: nothing was launched (every request failed before the GPU)
  int bucket_index = 0;
  int path = 0;              // index into Impl::paths
  int first = 0, count = 0;  // range of batch->plan.live
  Status launch_status;
  bool event_recorded = false;
  PieceTimings timings;
};

}  // namespace

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

  Stream stream;
  CublasHandle cublas;  // for plans that use cuBLAS (the GEMM path) only
  std::vector<PipelineBuffer> buffers;
  DeviceBuffer workspace;
  std::unique_ptr<kvcache::KvCache> cache;
  kernels::KvPoolView pools;
  std::vector<CapturedGraph> graphs;  // [path][bucket][buffer]
  std::unique_ptr<BatchPlanner> planner;
  CudaExecutorMemory memory;
  std::shared_ptr<FaultInjection> faults;  // never null after Init
  unsigned disabled_stages = 0;  // SetDisabledStagesForBenchmark; submitting thread

  Mutex mu;
  CondVar cv;
  std::deque<Piece> completions GUARDED_BY(mu);
  int pending_batches GUARDED_BY(mu) = 0;
  int next_buffer = 0;  // submitting thread only
  bool stop GUARDED_BY(mu) = false;
  ExecutorStats stats GUARDED_BY(mu);
  std::vector<PieceTimings> timings GUARDED_BY(mu);
  std::thread completion_thread;
  std::unique_ptr<CopyPool> pack_pool;
  std::unique_ptr<MappedStagingMemory> staging = std::make_unique<MappedStagingMemory>();

  ~Impl() {
    if (completion_thread.joinable()) {
      WaitAll();
      {
        MutexLock lock(&mu);
        stop = true;
      }
      cv.NotifyAll();
      completion_thread.join();
    }
    if (stream.get() != nullptr) {
      const cudaError_t err = cudaStreamSynchronize(stream.get());
      if (err != cudaSuccess) {
        Logger().warn("cuda executor: cudaStreamSynchronize at teardown: {}",
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
  Status EnqueueCompute(int path, int bucket, int buffer);
  Status EnqueueEager(int path, int bucket, int buffer, const NodeEnables& e);
  Status Capture(int path, int bucket, int buffer, CapturedGraph* out);
  Status SetEnables(CapturedGraph& g, const NodeEnables& e);
  Status DrainStream();

  Status Submit(Batch batch, BatchDoneFn done);
  int AcquireBuffer();
  void Pack(Piece& piece, bool* any_host, bool* any_device, int* max_kv_length);
  void Launch(Piece& piece, const NodeEnables& e);
  void CompletionLoop();
  void WaitAll() {
    MutexLock lock(&mu);
    while (pending_batches != 0) cv.Wait(lock);
  }
};

// ---- set-up ---------------------------------------------------------------------------------

namespace {

Status CheckDevicePointers(const MappedStagingMemory& staging, const BatchRequest& r, int index) {
  const struct {
    const char* name;
    const void* ptr;
  } fields[] = {{"q", r.q}, {"k", r.k}, {"v", r.v}, {"out", r.out}, {"lse", r.lse}};
  for (const auto& f : fields) {
    if (f.ptr == nullptr) continue;  // only lse may be null here (validated before)
    if (staging.Contains(f.ptr)) continue;
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, f.ptr);
    if (err != cudaSuccess) (void)cudaGetLastError();
    const bool device_visible =
        err == cudaSuccess &&
        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ||
         (attr.type == cudaMemoryTypeHost && attr.devicePointer == f.ptr));
    if (!device_visible) {
      std::ostringstream msg;
      msg << "request " << index << ": memory is kDevice but " << f.name << " (" << f.ptr
          << ") is neither device memory nor mapped pinned host memory";
      return InvalidArgumentError(msg.str());
    }
  }
  return Status::Ok();
}

}  // namespace

// One path per kv-length bucket of the variant, each planned for every batch bucket on `device`.
Status CudaExecutor::Impl::AddPaths(const std::string& name, const kernels::DecodeDevice& device) {
  const ModelShape& shape = options.shape;
  ATTNRT_ASSIGN_OR_RETURN(const kernels::DecodeVariant* variant, kernels::FindDecodeVariant(name));
  ATTNRT_RETURN_IF_ERROR(variant->supports(shape));
  const std::vector<int> kv_lengths = variant->kv_length_buckets(shape);
  for (int kv_length : kv_lengths) {
    DecodePath p;
    p.variant = variant;
    for (int capacity : options.buckets) {
      kernels::DecodePlanRequest request{shape, capacity, kv_length,
                                         kernels::DecodeStep::kAppendAndDecode, device};
      request.max_workspace_bytes = options.gemm_max_workspace_bytes;  // the GEMM path's budget
      StatusOr<kernels::DecodePlan> plan = variant->plan(request);
      if (!plan.ok()) {
        return Status(plan.status().code(), "path " + name + " at bucket " +
                                                std::to_string(capacity) + ": " +
                                                plan.status().message());
      }
      p.plans.push_back(std::move(*plan));
    }
    p.max_kv_length = p.plans.front().max_kv_length;
    p.name = kv_lengths.size() > 1 || p.max_kv_length != shape.max_context
                 ? name + "/t" + std::to_string(p.max_kv_length)
                 : name;
    // The run binds the handle to the stream and to its plan's slice of the workspace
    // (cublasSetWorkspace) on every call, so the captured cuBLAS calls never allocate.
    if (p.plans.front().uses_cublas && cublas.get() == nullptr) {
      ATTNRT_ASSIGN_OR_RETURN(cublas, CublasHandle::Create(stream.get(), nullptr, 0));
    }
    paths.push_back(std::move(p));
  }
  return Status::Ok();
}

Status CudaExecutor::Impl::Select(int name_index) {
  active.clear();
  for (int i = 0; i < static_cast<int>(paths.size()); ++i) {
    if (paths[i].variant->name == path_names[name_index]) active.push_back(i);
  }
  std::sort(active.begin(), active.end(), [&](int a, int b) {
    return paths[a].max_kv_length < paths[b].max_kv_length;
  });
  selected_name = name_index;
  return Status::Ok();
}

// The selected name's path for a piece: the first whose max_kv_length holds the piece's
// longest sequence and whose workspace at this bucket was within budget.
StatusOr<int> CudaExecutor::Impl::ChoosePath(int bucket, int max_kv_length) const {
  for (int p : active) {
    if (paths[p].max_kv_length < max_kv_length) continue;
    if (runnable[static_cast<std::size_t>(p) * num_buckets() + bucket]) return p;
    return ResourceExhaustedError(
        "path " + paths[p].name + " at bucket " + std::to_string(options.buckets[bucket]) +
        " needs a workspace of " + std::to_string(paths[p].plans[bucket].workspace_bytes) +
        " bytes, over gemm_max_workspace_bytes " + std::to_string(options.gemm_max_workspace_bytes));
  }
  return InternalError("no path of " + path_names[selected_name] + " runs kv_length " +
                       std::to_string(max_kv_length));
}

Status CudaExecutor::Impl::Init() {
  const ModelShape& shape = options.shape;
  max_blocks = shape.max_blocks_per_sequence();
  for (int b : options.buckets) layouts.push_back(BufferLayout::For(shape, b, max_blocks));
  const BufferLayout& largest = layouts.back();

  faults = options.faults != nullptr ? options.faults : FaultInjectionForNewExecutor();
  ATTNRT_ASSIGN_OR_RETURN(stream, Stream::Create());
  // Plans are made once, here, for this device: its SM count sizes the split-KV grids.
  ATTNRT_ASSIGN_OR_RETURN(const kernels::DecodeDevice device, kernels::CurrentDecodeDevice());
  if (options.paths.empty()) options.paths = {std::string(kernels::DefaultDecodeVariant().name)};
  for (const std::string& name : options.paths) {
    if (std::find(path_names.begin(), path_names.end(), name) != path_names.end()) {
      return InvalidArgumentError("paths lists \"" + name + "\" twice");
    }
    ATTNRT_RETURN_IF_ERROR(AddPaths(name, device));
    path_names.push_back(name);
  }
  ATTNRT_RETURN_IF_ERROR(Select(0));
  runnable.assign(paths.size() * options.buckets.size(), 1);
  for (std::size_t p = 0; p < paths.size(); ++p) {
    if (paths[p].variant->name != kGemmPathName) continue;  // the budget is the GEMM path's
    for (int b = 0; b < num_buckets(); ++b) {
      runnable[p * num_buckets() + b] =
          paths[p].plans[b].workspace_bytes <= options.gemm_max_workspace_bytes;
    }
  }

  buffers.resize(options.num_buffers);
  for (PipelineBuffer& buf : buffers) {
    ATTNRT_ASSIGN_OR_RETURN(buf.in, PinnedBuffer::Create(largest.in_bytes));
    ATTNRT_ASSIGN_OR_RETURN(buf.out, PinnedBuffer::Create(largest.out_bytes));
    ATTNRT_ASSIGN_OR_RETURN(buf.dev_in, DeviceBuffer::Create(largest.in_bytes));
    ATTNRT_ASSIGN_OR_RETURN(buf.dev_out, DeviceBuffer::Create(largest.out_bytes));
    ATTNRT_ASSIGN_OR_RETURN(buf.start, Event::Create(/*timing=*/true));
    ATTNRT_ASSIGN_OR_RETURN(buf.done, Event::Create(/*timing=*/options.record_timings));
    // All padding until packed: a warm-up or stray replay touches nothing.
    std::memset(buf.in.data(), 0, buf.in.bytes());
    ATTNRT_CUDA_RETURN(cudaMemset(buf.dev_in.data(), 0, buf.dev_in.bytes()));
    // The D2H node copies the whole bucket's output rows, padded rows included, which no
    // kernel writes: zero them once so that copy never reads uninitialised memory.
    ATTNRT_CUDA_RETURN(cudaMemset(buf.dev_out.data(), 0, buf.dev_out.bytes()));
    memory.buffer_device_bytes += buf.dev_in.bytes() + buf.dev_out.bytes();
    memory.pinned_bytes += buf.in.bytes() + buf.out.bytes();
  }
  // One workspace for every path and bucket: pieces run one after another on one stream.
  std::size_t ws = 0;
  for (std::size_t p = 0; p < paths.size(); ++p) {
    for (int b = 0; b < num_buckets(); ++b) {
      if (runnable[p * num_buckets() + b]) ws = std::max(ws, paths[p].plans[b].workspace_bytes);
    }
  }
  ATTNRT_ASSIGN_OR_RETURN(workspace, DeviceBuffer::Create(ws));
  // Zeroed once so no kernel ever reads bytes nothing wrote (padded GEMM tiles); results never
  // depend on it.
  if (ws > 0) ATTNRT_CUDA_RETURN(cudaMemset(workspace.data(), 0, ws));
  memory.workspace_bytes = ws;

  std::int32_t num_blocks = options.num_blocks;
  if (num_blocks == 0) {
    ATTNRT_ASSIGN_OR_RETURN(num_blocks,
                            kvcache::BlocksForFreeDeviceMemory(shape, options.kv_memory_fraction));
    Logger().debug("cuda executor: KV cache sized to {} blocks ({} of the free device memory)",
                   num_blocks, options.kv_memory_fraction);
  }
  ATTNRT_ASSIGN_OR_RETURN(cache,
                          kvcache::KvCache::Create(shape, num_blocks, kvcache::PoolKind::kDevice));
  // Allocate runs under the planner's table lock; the point itself is thread-safe.
  cache->allocator().SetFailureHookForTesting(
      [faults = faults] { return faults->block_allocation.Hit(); });
  memory.kv_cache_bytes = cache->kv_bytes();
  pools.k = cache->k_data();
  pools.v = cache->v_data();
  pools.num_layers = shape.num_layers;
  pools.num_blocks = cache->num_blocks();
  pools.num_kv_heads = shape.num_kv_heads;
  pools.block_size = shape.block_size;
  pools.head_dim = shape.head_dim;
  planner = std::make_unique<BatchPlanner>(
      &cache->sequences(), /*allow_device_memory=*/true,
      options.check_device_pointers
          ? DevicePointerCheck([this](const BatchRequest& r, int index) {
              return CheckDevicePointers(*staging, r, index);
            })
          : DevicePointerCheck());

  // Eager warm-up of every (path, bucket) on all-padding staging: module loading, lazy
  // initialisation and first-launch costs stay out of capture and out of the first batch.
  const NodeEnables all;
  for (int p = 0; p < static_cast<int>(paths.size()); ++p) {
    for (int b = num_buckets() - 1; b >= 0; --b) {
      if (runnable[static_cast<std::size_t>(p) * num_buckets() + b]) {
        ATTNRT_RETURN_IF_ERROR(EnqueueEager(p, b, 0, all));
      }
    }
  }
  ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream.get()));

  if (options.mode == LaunchMode::kGraph) {
    graphs.resize(paths.size() * options.buckets.size() * buffers.size());
    for (int p = 0; p < static_cast<int>(paths.size()); ++p) {
      for (int b = num_buckets() - 1; b >= 0; --b) {  // largest first
        if (!runnable[static_cast<std::size_t>(p) * num_buckets() + b]) continue;
        BucketGraphReport report;
        report.bucket = options.buckets[b];
        report.path = paths[p].name;
        report.workspace_bytes = paths[p].plans[b].workspace_bytes;
        std::size_t free_before = 0, free_after = 0, total = 0;
        ATTNRT_CUDA_RETURN(cudaMemGetInfo(&free_before, &total));
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
          ATTNRT_RETURN_IF_ERROR(Capture(p, b, i, &GraphFor(p, b, i)));
          ++memory.num_graphs;
        }
        ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream.get()));
        report.capture_ms = MicrosSince(t0) / 1000.0;
        ATTNRT_CUDA_RETURN(cudaMemGetInfo(&free_after, &total));
        report.graph_bytes = free_before > free_after ? free_before - free_after : 0;
        memory.graph_bytes += report.graph_bytes;
        memory.capture_ms += report.capture_ms;
        memory.graphs.push_back(report);
      }
    }
  }
  memory.total_device_bytes = memory.kv_cache_bytes + memory.workspace_bytes +
                              memory.buffer_device_bytes + memory.graph_bytes;
  int helpers = options.pack_threads;
  if (helpers < 0) helpers = std::min(3, static_cast<int>(std::thread::hardware_concurrency() / 4));
  pack_pool = std::make_unique<CopyPool>(helpers);
  completion_thread = std::thread([this] { CompletionLoop(); });
  return Status::Ok();
}

kernels::DecodeBatchView CudaExecutor::Impl::ViewFor(int bucket, int buffer) const {
  const BufferLayout& l = layouts[bucket];
  const PipelineBuffer& buf = buffers[buffer];
  kernels::DecodeBatchView v;
  v.capacity = l.capacity;
  v.num_q_heads = options.shape.num_q_heads;
  v.max_blocks_per_seq = max_blocks;
  v.kv_lengths = buf.dev_in.as<std::int32_t>(l.kv_lengths);
  v.layers = buf.dev_in.as<std::int32_t>(l.layers);
  v.block_tables = buf.dev_in.as<std::int32_t>(l.block_tables);
  v.q = buf.dev_in.as<Half>(l.q);
  v.k_new = buf.dev_in.as<Half>(l.k);
  v.v_new = buf.dev_in.as<Half>(l.v);
  v.out = buf.dev_out.as<Half>(l.out);
  v.lse = buf.dev_out.as<float>(l.lse);
  v.scale = options.shape.scale();
  return v;
}

BatchIoArgs CudaExecutor::Impl::IoArgsFor(int bucket, int buffer) const {
  const BufferLayout& l = layouts[bucket];
  const PipelineBuffer& buf = buffers[buffer];
  BatchIoArgs a;
  a.capacity = l.capacity;
  a.q_elems = options.shape.num_q_heads * options.shape.head_dim;
  a.kv_elems = static_cast<int>(options.shape.kv_token_elems());
  a.num_q_heads = options.shape.num_q_heads;
  a.kv_lengths = buf.dev_in.as<std::int32_t>(l.kv_lengths);
  a.q_ptrs = buf.dev_in.as<std::uint64_t>(l.q_ptrs);
  a.k_ptrs = buf.dev_in.as<std::uint64_t>(l.k_ptrs);
  a.v_ptrs = buf.dev_in.as<std::uint64_t>(l.v_ptrs);
  a.out_ptrs = buf.dev_in.as<std::uint64_t>(l.out_ptrs);
  a.lse_ptrs = buf.dev_in.as<std::uint64_t>(l.lse_ptrs);
  a.q = buf.dev_in.as<Half>(l.q);
  a.k = buf.dev_in.as<Half>(l.k);
  a.v = buf.dev_in.as<Half>(l.v);
  a.out = buf.dev_out.as<Half>(l.out);
  a.lse = buf.dev_out.as<float>(l.lse);
  return a;
}

// The path's plan for this bucket, run on the pipeline buffer's arrays: append, then decode
// attention.
Status CudaExecutor::Impl::EnqueueCompute(int path, int bucket, int buffer) {
  const DecodePath& p = paths[path];
  return p.variant->run(p.plans[bucket], ViewFor(bucket, buffer), pools,
                        {workspace.data(), workspace.bytes()}, {stream.get(), cublas.get()});
}

// The same work as one replay, launched op by op (eager mode and warm-up).
Status CudaExecutor::Impl::EnqueueEager(int path, int bucket, int buffer, const NodeEnables& e) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];
  cudaStream_t st = stream.get();
  ATTNRT_CUDA_RETURN(cudaMemcpyAsync(buf.dev_in.data(), buf.in.data(),
                                     e.h2d_full ? l.in_bytes : l.meta_bytes,
                                     cudaMemcpyHostToDevice, st));
  const BatchIoArgs io = IoArgsFor(bucket, buffer);
  if (e.device_io) ATTNRT_RETURN_IF_ERROR(LaunchGather(io, st));
  if (e.compute) ATTNRT_RETURN_IF_ERROR(EnqueueCompute(path, bucket, buffer));
  if (e.device_io) ATTNRT_RETURN_IF_ERROR(LaunchScatter(io, st));
  if (e.d2h) {
    ATTNRT_CUDA_RETURN(cudaMemcpyAsync(buf.out.data(), buf.dev_out.data(), l.out_bytes,
                                       cudaMemcpyDeviceToHost, st));
  }
  return Status::Ok();
}

Status CudaExecutor::Impl::Capture(int path, int bucket, int buffer, CapturedGraph* g) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];

  // The kernels' own launches (append + decode path) are captured from the stream; the
  // executor's copies and gather/scatter are then added to the same graph as explicit nodes
  // whose handles it keeps (one flat graph: no child-graph node on the launch path).
  ATTNRT_CUDA_RETURN(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueCompute(path, bucket, buffer);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream.get(), &raw);
  g->graph = Graph::Adopt(raw);
  ATTNRT_RETURN_IF_ERROR(enqueued);
  ATTNRT_CUDA_RETURN(ended);
  cudaGraph_t graph = g->graph.get();

  std::size_t n = 0;
  ATTNRT_CUDA_RETURN(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  ATTNRT_CUDA_RETURN(cudaGraphGetNodes(graph, nodes.data(), &n));
  ATTNRT_CUDA_RETURN(cudaGraphGetRootNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> roots(n);
  ATTNRT_CUDA_RETURN(cudaGraphGetRootNodes(graph, roots.data(), &n));
  std::vector<cudaGraphNode_t> leaves;
  g->compute_nodes.clear();
  for (cudaGraphNode_t node : nodes) {
    std::size_t out = 0;
    ATTNRT_CUDA_RETURN(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &out));
    if (out == 0) leaves.push_back(node);
    cudaGraphNodeType type{};
    ATTNRT_CUDA_RETURN(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel || type == cudaGraphNodeTypeMemset ||
        type == cudaGraphNodeTypeMemcpy) {
      g->compute_nodes.push_back(node);
    }
  }

  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->h2d_full, graph, nullptr, 0, buf.dev_in.data(),
                                              buf.in.data(), l.in_bytes, cudaMemcpyHostToDevice));
  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->h2d_meta, graph, nullptr, 0, buf.dev_in.data(),
                                              buf.in.data(), l.meta_bytes, cudaMemcpyHostToDevice));
  const BatchIoArgs io = IoArgsFor(bucket, buffer);
  const cudaGraphNode_t copies[] = {g->h2d_full, g->h2d_meta};
  ATTNRT_RETURN_IF_ERROR(AddGatherNode(graph, copies, 2, io, &g->gather));
  for (cudaGraphNode_t root : roots) {
    ATTNRT_CUDA_RETURN(cudaGraphAddDependencies(graph, &g->gather, &root, nullptr, 1));
  }
  ATTNRT_RETURN_IF_ERROR(AddScatterNode(graph, leaves.data(), leaves.size(), io, &g->scatter));
  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->d2h, graph, &g->scatter, 1, buf.out.data(),
                                              buf.dev_out.data(), l.out_bytes,
                                              cudaMemcpyDeviceToHost));
  ATTNRT_ASSIGN_OR_RETURN(g->exec, GraphExec::Instantiate(g->graph));
  ATTNRT_CUDA_RETURN(cudaGraphUpload(g->exec.get(), stream.get()));
  g->enabled.reset();
  return Status::Ok();
}

Status CudaExecutor::Impl::SetEnables(CapturedGraph& g, const NodeEnables& e) {
  if (g.enabled == e) return Status::Ok();
  cudaGraphExec_t x = g.exec.get();
  const std::optional<NodeEnables> before = g.enabled;
  g.enabled.reset();  // unknown until every call below succeeded
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.h2d_full, e.h2d_full));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.h2d_meta, !e.h2d_full));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.gather, e.device_io));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.scatter, e.device_io));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.d2h, e.d2h));
  if (!before.has_value() || before->compute != e.compute) {
    for (cudaGraphNode_t node : g.compute_nodes) {
      ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, node, e.compute));
    }
  }
  g.enabled = e;
  return Status::Ok();
}

// Orders host-side pool writes (prefill, copy-on-write through KvCache) after every queued
// piece; the cache's synchronous copies run on the legacy stream, so the device is synced after.
Status CudaExecutor::Impl::DrainStream() {
  ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream.get()));
  return Status::Ok();
}

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

  for (int j = 0; j < piece.count; ++j) {
    const PlannedRequest& p = b.plan.live[piece.first + j];
    const BatchRequest& r = b.batch.requests[p.index];
    Status row = planner->FillBlockRow(r.sequence_id, p.kv_length,
                                       tables + static_cast<std::size_t>(j) * max_blocks);
    if (!row.ok()) {  // cannot happen after a successful AppendToken; fail it alone anyway
      b.plan.statuses[p.index] = row;
      kv_lengths[j] = 0;
      continue;
    }
    kv_lengths[j] = p.kv_length;
    layers[j] = r.layer;
    *max_kv_length = std::max(*max_kv_length, p.kv_length);
    if (r.memory == MemoryKind::kHost) {
      q_ptrs[j] = 0;  // the gather kernel leaves this row to the memcpy node
      out_ptrs[j] = 0;
      *any_host = true;
    } else {
      q_ptrs[j] = reinterpret_cast<std::uint64_t>(r.q);
      k_ptrs[j] = reinterpret_cast<std::uint64_t>(r.k);
      v_ptrs[j] = reinterpret_cast<std::uint64_t>(r.v);
      out_ptrs[j] = reinterpret_cast<std::uint64_t>(r.out);
      lse_ptrs[j] = reinterpret_cast<std::uint64_t>(r.lse);
      *any_device = true;
    }
  }
  // The q/k/v copies, spread over the pack pool when there are enough bytes to pay for the
  // hand-off (a few µs).
  constexpr std::size_t kParallelPackBytes = 256 * 1024;
  auto copy_row = [&](int j) {
    const PlannedRequest& p = b.plan.live[piece.first + j];
    const BatchRequest& r = b.batch.requests[p.index];
    if (r.memory != MemoryKind::kHost || kv_lengths[j] == 0) return;
    std::memcpy(base + l.q + j * q_bytes, r.q, q_bytes);
    std::memcpy(base + l.k + j * kv_bytes, r.k, kv_bytes);
    std::memcpy(base + l.v + j * kv_bytes, r.v, kv_bytes);
  };
  if (*any_host && piece.count * (q_bytes + 2 * kv_bytes) >= kParallelPackBytes) {
    pack_pool->Run(piece.count, copy_row);
  } else if (*any_host) {
    for (int j = 0; j < piece.count; ++j) copy_row(j);
  }
  // Padding: every kernel skips a row of length 0 before reading anything else of it.
  std::fill(kv_lengths + piece.count, kv_lengths + l.capacity, 0);
}

void CudaExecutor::Impl::Launch(Piece& piece, const NodeEnables& e) {
  PipelineBuffer& buf = buffers[piece.buffer];
  cudaStream_t st = stream.get();
  if (faults->launch.Hit()) {
    piece.launch_status = LaunchInvalidForTesting(st);
  } else {
    Status status;
    if (options.record_timings) status = CudaStatus(cudaEventRecord(buf.start.get(), st),
                                                    "cudaEventRecord(start)", __FILE__, __LINE__);
    if (status.ok()) {
      if (options.mode == LaunchMode::kGraph) {
        CapturedGraph& g = GraphFor(piece.path, piece.bucket_index, piece.buffer);
        status = SetEnables(g, e);
        if (status.ok()) {
          status = CudaStatus(cudaGraphLaunch(g.exec.get(), st), "cudaGraphLaunch", __FILE__,
                              __LINE__);
        }
      } else {
        status = EnqueueEager(piece.path, piece.bucket_index, piece.buffer, e);
      }
    }
    piece.launch_status = status;
  }
  // Recorded even after a failed launch: whatever did get queued still uses the buffer.
  piece.event_recorded = cudaEventRecord(buf.done.get(), st) == cudaSuccess;
  if (!piece.event_recorded && piece.launch_status.ok()) {
    piece.launch_status = InternalError("cudaEventRecord(done) failed after the launch");
  }
}

Status CudaExecutor::Impl::Submit(Batch batch, BatchDoneFn done) {
  ATTNRT_RETURN_IF_ERROR(ValidateBatchShape(batch, options.max_batch_size));
  if (!done) return InvalidArgumentError("done is empty");
  const Clock::time_point t_plan = Clock::now();
  auto state = std::make_shared<BatchState>();
  BatchPlan& plan = state->plan;
  // Held until every piece is launched: no sequence call lands between plan and launch
  // (batch_plan.h).
  auto hold = planner->LockSubmission();
  planner->Plan(batch, &plan);
  if (!plan.copies.empty()) {
    // Rare path (first write into a forked block): the copy must follow every queued piece
    // and precede this batch's append.
    Status s = faults->copy.Hit()
                   ? InternalError("injected copy-on-write copy failure (FaultInjection::copy)")
                   : DrainStream();
    if (s.ok()) s = cache->ApplyCopies(plan.copies);
    if (s.ok()) s = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    if (!s.ok()) {
      // Nothing of this batch runs; its requests have taken their tokens and the copies'
      // destinations hold undefined K/V, which Settle marks lost (plan.live stays for it).
      for (const PlannedRequest& p : plan.live) plan.statuses[p.index] = s;
      plan.copies_applied = false;
      Logger().error("cuda executor: copy-on-write before a batch of {} failed: {}",
                     plan.live.size(), s.ToString());
    }
  }
  const double plan_us = MicrosSince(t_plan);
  state->batch = std::move(batch);
  state->done = std::move(done);

  const int n = plan.copies_applied ? static_cast<int>(plan.live.size()) : 0;  // to launch
  const int largest = options.buckets.back();
  const int num_pieces = std::max(1, (n + largest - 1) / largest);
  state->pieces_left = num_pieces;
  {
    MutexLock lock(&mu);
    ++pending_batches;
  }
  Status wait_status;
  if (n > 0 && state->batch.ready_event != nullptr) {
    wait_status = CudaStatus(
        cudaStreamWaitEvent(stream.get(), state->batch.ready_event, 0),
        "cudaStreamWaitEvent(ready_event)", __FILE__, __LINE__);
  }
  for (int i = 0; i < num_pieces; ++i) {
    Piece piece;
    piece.batch = state;
    piece.first = i * largest;
    piece.count = std::min(largest, n - piece.first);
    piece.timings.plan_us = i == 0 ? plan_us : 0.0;
    piece.timings.requests = piece.count;
    if (piece.count > 0 && wait_status.ok()) {
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
      e.h2d_full = any_host && !(disabled_stages & kStageH2DInputs);
      e.device_io = any_device;
      e.d2h = any_host && !(disabled_stages & kStageD2H);
      e.compute = !(disabled_stages & kStageCompute);
      const Clock::time_point t_launch = Clock::now();
      piece.timings.pack_us = std::chrono::duration<double, std::micro>(t_launch - t_pack).count();
      StatusOr<int> path = ChoosePath(piece.bucket_index, max_kv_length);
      if (path.ok()) {
        piece.path = *path;
        Launch(piece, e);
      } else {
        piece.launch_status = path.status();  // nothing queued: the buffer frees at once
      }
      piece.timings.launch_us = MicrosSince(t_launch);
    } else if (piece.count > 0) {
      piece.launch_status = wait_status;
    }
    {
      MutexLock lock(&mu);
      completions.push_back(std::move(piece));
    }
    cv.NotifyAll();
  }
  return Status::Ok();
}

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

// ---- public face ---------------------------------------------------------------------------

StatusOr<std::unique_ptr<CudaExecutor>> CreateCudaExecutor(const CudaExecutorOptions& options) {
  if (!CudaDeviceAvailable()) {
    return UnavailableError("no CUDA device is available (cudaGetDeviceCount found none)");
  }
  ATTNRT_RETURN_IF_ERROR(options.shape.Validate());
  ATTNRT_RETURN_IF_ERROR(ValidateBuckets(options.buckets));
  if (options.num_buffers < 2) {
    return InvalidArgumentError("num_buffers " + std::to_string(options.num_buffers) +
                                ", expected >= 2 (double-buffered staging)");
  }
  if (options.pack_threads < -1 || options.pack_threads > 64) {
    return InvalidArgumentError("pack_threads " + std::to_string(options.pack_threads) +
                                ", expected -1 (auto) .. 64");
  }
  if (options.max_batch_size < 1) {
    return InvalidArgumentError("max_batch_size " + std::to_string(options.max_batch_size) +
                                ", expected >= 1");
  }
  if (options.num_blocks < 0) {
    return InvalidArgumentError("num_blocks " + std::to_string(options.num_blocks) +
                                ", expected >= 0");
  }
  if (options.num_blocks == 0 &&
      !(options.kv_memory_fraction > 0.0 && options.kv_memory_fraction < 1.0)) {
    return InvalidArgumentError("kv_memory_fraction " + std::to_string(options.kv_memory_fraction) +
                                ", expected in (0, 1)");
  }
  auto impl = std::make_unique<CudaExecutor::Impl>();
  impl->options = options;
  ATTNRT_RETURN_IF_ERROR(impl->Init());
  if (Logger().should_log(spdlog::level::debug)) {
    Logger().debug("cuda executor: captured; memory: {}", impl->memory.ToString());
  }
  return std::unique_ptr<CudaExecutor>(new CudaExecutor(std::move(impl)));
}

CudaExecutor::CudaExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutor::~CudaExecutor() = default;

const ModelShape& CudaExecutor::shape() const { return impl_->options.shape; }
int CudaExecutor::max_batch_size() const { return impl_->options.max_batch_size; }
std::vector<int> CudaExecutor::buckets() const { return impl_->options.buckets; }
int CudaExecutor::max_in_flight() const { return static_cast<int>(impl_->buffers.size()); }
StagingMemory* CudaExecutor::staging_memory() {
  return impl_->options.offer_staging_memory ? impl_->staging.get() : nullptr;
}
LaunchMode CudaExecutor::mode() const { return impl_->options.mode; }
const CudaExecutorMemory& CudaExecutor::memory() const { return impl_->memory; }

Status CudaExecutor::Submit(Batch batch, BatchDoneFn done) {
  return impl_->Submit(std::move(batch), std::move(done));
}
void CudaExecutor::Wait() { impl_->WaitAll(); }

// Sequence calls hold the submission lock (batch_plan.h). A block freed here and reused by a
// later batch is written in stream order, after every queued piece that still reads it; Prefill
// writes the pools from the host, so it drains the stream first.
Status CudaExecutor::CreateSequence(SequenceId id) {
  auto hold = impl_->planner->LockSubmission();
  return impl_->planner->Create(id);
}
Status CudaExecutor::ForkSequence(SequenceId parent, SequenceId child) {
  auto hold = impl_->planner->LockSubmission();
  return impl_->planner->Fork(parent, child);
}
Status CudaExecutor::FreeSequence(SequenceId id) {
  auto hold = impl_->planner->LockSubmission();
  return impl_->planner->Free(id);
}

Status CudaExecutor::Prefill(SequenceId id, int layer, int num_tokens, const Half* k,
                             const Half* v) {
  auto hold = impl_->planner->LockSubmission();
  ATTNRT_RETURN_IF_ERROR(impl_->DrainStream());
  ATTNRT_RETURN_IF_ERROR(impl_->planner->Prefill(*impl_->cache, id, layer, num_tokens, k, v));
  ATTNRT_CUDA_RETURN(cudaDeviceSynchronize());  // the cache's copies ran on the legacy stream
  return Status::Ok();
}

StatusOr<int> CudaExecutor::SequenceLength(SequenceId id, int layer) const {
  return impl_->planner->WithTable(
      [&](kvcache::SequenceTable& t) { return t.Length(id, layer); });
}

bool CudaExecutor::HasSequence(SequenceId id) const { return impl_->planner->Contains(id); }

Status CudaExecutor::ReadToken(SequenceId id, int layer, int position, Half* k, Half* v) {
  ATTNRT_RETURN_IF_ERROR(impl_->DrainStream());
  return impl_->planner->WithTable([&](kvcache::SequenceTable&) {
    return impl_->cache->ReadToken(id, layer, position, k, v);
  });
}

ExecutorStats CudaExecutor::stats() const {
  ExecutorStats s;
  {
    MutexLock lock(&impl_->mu);
    s = impl_->stats;
  }
  FillKvStats(*impl_->planner, *impl_->cache, &s);
  return s;
}

std::vector<std::string> CudaExecutor::paths() const { return impl_->path_names; }

std::string_view CudaExecutor::active_path() const {
  return impl_->path_names[impl_->selected_name];
}

Status CudaExecutor::SelectPath(std::string_view name) {
  std::string known;
  for (int i = 0; i < static_cast<int>(impl_->path_names.size()); ++i) {
    if (impl_->path_names[i] == name) return impl_->Select(i);
    known += (i ? ", " : "") + impl_->path_names[i];
  }
  return NotFoundError("path \"" + std::string(name) + "\" was not captured; paths: " + known);
}

void CudaExecutor::SetDisabledStagesForBenchmark(unsigned mask) {
  impl_->disabled_stages = mask;
}

FaultInjection& CudaExecutor::faults() { return *impl_->faults; }

void CudaExecutor::InjectLaunchFailuresForTesting(int count) {
  impl_->faults->launch.Arm(count);
}

std::vector<PieceTimings> CudaExecutor::TakeTimings() {
  MutexLock lock(&impl_->mu);
  return std::exchange(impl_->timings, {});
}

std::string CudaExecutorMemory::ToString() const {
  std::ostringstream o;
  auto mib = [](std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  o << "kv " << mib(kv_cache_bytes) << " MiB, workspace " << mib(workspace_bytes)
    << " MiB, pipeline buffers " << mib(buffer_device_bytes) << " MiB (pinned "
    << mib(pinned_bytes)
    << " MiB), graphs " << mib(graph_bytes) << " MiB, total device " << mib(total_device_bytes)
    << " MiB; capture " << capture_ms << " ms\n";
  for (const BucketGraphReport& g : graphs) {
    o << "  bucket " << g.bucket << " path " << g.path << ": graphs " << g.graph_bytes
      << " B, workspace " << g.workspace_bytes << " B, capture " << g.capture_ms << " ms\n";
  }
  return o.str();
}

}  // namespace attnrt::runtime
