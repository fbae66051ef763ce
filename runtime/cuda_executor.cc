// CUDA executor (cuda_executor.h): set-up and the public methods. The parts and the state they
// share: cuda_executor_impl.h.
#include "runtime/cuda_executor_impl.h"

#include <cudaTypedefs.h>  // PFN_cuMemGetAddressRange (types only: no driver library linked)

namespace attnrt::runtime {

// ---- set-up ---------------------------------------------------------------------------------

namespace {

Status CheckDevicePointers(const MappedStagingMemory& staging, KnownDeviceAllocations& known,
                           const BatchRequest& r, int index) {
  // The common cases, a request staged in this executor's mapped memory or lying in device
  // allocations seen before: one lookup each.
  if (staging.ContainsAll({r.q, r.k, r.v, r.out, r.lse})) return Status::Ok();
  if (known.ContainsAll({r.q, r.k, r.v, r.out, r.lse})) return Status::Ok();
  const struct {
    const char* name;
    const void* ptr;
  } fields[] = {{"q", r.q}, {"k", r.k}, {"v", r.v}, {"out", r.out}, {"lse", r.lse}};
  for (const auto& f : fields) {
    if (f.ptr == nullptr) continue;  // only lse may be null here (validated before)
    if (staging.Contains(f.ptr) || known.Contains(f.ptr)) continue;
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
    known.AddAllocationOf(f.ptr);
  }
  return Status::Ok();
}

}  // namespace

bool KnownDeviceAllocations::AddAllocationOf(const void* p) {
  // cuMemGetAddressRange through the runtime's entry-point query: no link to the driver library.
  static const PFN_cuMemGetAddressRange_v3020 get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
  }();
  if (get_range == nullptr) return false;
  // A driver call needs a current context, which a thread that has made no runtime call has
  // not (the scheduler's batching thread plans the batches: memcheck reported
  // CUDA_ERROR_INVALID_CONTEXT there, H200 2026-11-29, and no allocation was ever recorded).
  // cudaSetDevice makes the device's primary context current; the caller's device is put back.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) (void)cudaGetLastError();
  if (cudaSetDevice(device_) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  const bool found =
      get_range(&base, &bytes, reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS && bytes != 0;
  if (previous >= 0 && previous != device_ && cudaSetDevice(previous) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (!found) return false;
  // Bounded: a caller allocating a buffer per request would otherwise grow the map without end
  // (its pointers are then checked by the driver again after each reset).
  if (ranges_.size() >= kMaxAllocations) ranges_.Clear();
  ranges_.Add(reinterpret_cast<const void*>(base), bytes);
  return true;
}

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
  known_allocations->set_device(device.ordinal);
  Logger().debug("cuda executor: device {} with {} SMs; split-KV plans read the {} launch table",
                 device.ordinal, device.sm_count, kernels::TunedGpuName(device.tuned_gpu));
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
    ATTNRT_ASSIGN_OR_RETURN(buf.stream, Stream::Create());
    ATTNRT_ASSIGN_OR_RETURN(buf.start, Event::Create(/*timing=*/true));
    ATTNRT_ASSIGN_OR_RETURN(buf.done, Event::Create(/*timing=*/options.record_timings));
    ATTNRT_ASSIGN_OR_RETURN(buf.computed, Event::Create(/*timing=*/false));
    // All padding until packed: a warm-up or stray replay touches nothing.
    std::memset(buf.in.data(), 0, buf.in.bytes());
    ATTNRT_CUDA_RETURN(cudaMemset(buf.dev_in.data(), 0, buf.dev_in.bytes()));
    // The D2H node copies the whole bucket's output rows, padded rows included, which no
    // kernel writes: zero them once so that copy never reads uninitialised memory.
    ATTNRT_CUDA_RETURN(cudaMemset(buf.dev_out.data(), 0, buf.dev_out.bytes()));
    memory.buffer_device_bytes += buf.dev_in.bytes() + buf.dev_out.bytes();
    memory.pinned_bytes += buf.in.bytes() + buf.out.bytes();
  }
  // The memsets ran on the legacy stream, which the buffers' non-blocking streams do not wait
  // for.
  ATTNRT_CUDA_RETURN(cudaDeviceSynchronize());
  pinned_is_device_addressable = true;
  for (PipelineBuffer& buf : buffers) {
    for (void* host : {buf.in.data(), buf.out.data()}) {
      void* device = nullptr;
      if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess || device != host) {
        (void)cudaGetLastError();
        pinned_is_device_addressable = false;
      }
    }
  }
  // One workspace for every path and bucket: the pieces' computes run one after another. The
  // split-KV arrival counters (the same bytes for every split-KV plan of this device) stay
  // apart from what the other plans write (WorkspaceFor).
  for (std::size_t p = 0; p < paths.size(); ++p) {
    for (int b = 0; b < num_buckets(); ++b) {
      const kernels::DecodePlan& plan = paths[p].plans[b];
      if (plan.workspace_zero_bytes == 0) continue;
      if (workspace_zero_bytes != 0 && workspace_zero_bytes != plan.workspace_zero_bytes) {
        return InternalError("split-KV plans of one device disagree on their counter bytes (" +
                             std::to_string(workspace_zero_bytes) + " and " +
                             std::to_string(plan.workspace_zero_bytes) + ")");
      }
      workspace_zero_bytes = plan.workspace_zero_bytes;
    }
  }
  std::size_t ws = 0;
  for (std::size_t p = 0; p < paths.size(); ++p) {
    for (int b = 0; b < num_buckets(); ++b) {
      if (!runnable[p * num_buckets() + b]) continue;
      const kernels::DecodePlan& plan = paths[p].plans[b];
      const std::size_t at = plan.workspace_zero_bytes > 0 || plan.workspace_bytes == 0
                                 ? 0
                                 : workspace_zero_bytes;
      ws = std::max(ws, at + plan.workspace_bytes);
    }
  }
  ATTNRT_ASSIGN_OR_RETURN(workspace, DeviceBuffer::Create(ws));
  // Zeroed once: the split-KV counters must start at zero (every run leaves them so), and no
  // kernel ever reads bytes nothing wrote (padded GEMM tiles).
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
  if (shape.kv_cache_type != KvCacheType::kFp16) {
    // The kernels read an FP8 cache's scales from device memory: uploaded once, before any
    // capture, so every graph holds this one pointer.
    const std::span<const float> scales = cache->kv_scales();
    ATTNRT_ASSIGN_OR_RETURN(kv_scales, DeviceBuffer::Create(scales.size_bytes()));
    ATTNRT_CUDA_RETURN(cudaMemcpy(kv_scales.data(), scales.data(), scales.size_bytes(),
                                  cudaMemcpyHostToDevice));
    pools.scales = kv_scales.as<float>();
  }
  planner = std::make_unique<BatchPlanner>(
      &cache->sequences(), /*allow_device_memory=*/true,
      options.check_device_pointers
          ? DevicePointerCheck([this](const BatchRequest& r, int index) {
              return CheckDevicePointers(*staging, *known_allocations, r, index);
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
  ATTNRT_RETURN_IF_ERROR(DrainStream());

  if (options.mode == LaunchMode::kGraph) {
    graphs.resize(paths.size() * options.buckets.size() * buffers.size());
    for (int p = 0; p < static_cast<int>(paths.size()); ++p) {
      for (int b = num_buckets() - 1; b >= 0; --b) {  // largest first
        if (!runnable[static_cast<std::size_t>(p) * num_buckets() + b]) continue;
        BucketGraphReport report;
        report.bucket = options.buckets[b];
        report.path = paths[p].name;
        report.workspace_bytes = paths[p].plans[b].workspace_bytes;
        report.device_io_chunks = options.buckets[b] / options.buckets[ChunkBucket(p, b)];
        std::size_t free_before = 0, free_after = 0, total = 0;
        ATTNRT_CUDA_RETURN(cudaMemGetInfo(&free_before, &total));
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
          ATTNRT_RETURN_IF_ERROR(Capture(p, b, i, &GraphFor(p, b, i)));
          ++memory.num_graphs;
        }
        ATTNRT_RETURN_IF_ERROR(DrainStream());
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
  if (helpers < 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    helpers = std::min(6, std::max(cores / 4, cores / 2 - 2));
  }
  pack_pool = std::make_unique<CopyPool>(helpers, options.pack_spin);
  if (options.sleep_through_steps) {
    step_estimates = std::make_unique<StepEstimates>(paths.size() * options.buckets.size());
  }
  completion_thread = std::thread([this] { CompletionLoop(); });
  launcher_thread = std::thread([this] { LauncherLoop(); });
  return Status::Ok();
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
  if (options.pack_spin.count() < 0) {
    return InvalidArgumentError("pack_spin " + std::to_string(options.pack_spin.count()) +
                                " us, expected >= 0");
  }
  if (options.device_io_chunk_rows < 0) {
    return InvalidArgumentError("device_io_chunk_rows " +
                                std::to_string(options.device_io_chunk_rows) +
                                ", expected >= 0 (0: one chunk)");
  }
  if (options.busy_gather_max_rows < 0) {
    return InvalidArgumentError("busy_gather_max_rows " +
                                std::to_string(options.busy_gather_max_rows) +
                                ", expected >= 0 (0: device-memory pieces always in place)");
  }
  if (options.busy_gather_min_kv_length < 0) {
    return InvalidArgumentError("busy_gather_min_kv_length " +
                                std::to_string(options.busy_gather_min_kv_length) +
                                ", expected >= 0");
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
Status CudaExecutor::SubmitPart(Batch part) { return impl_->SubmitPart(std::move(part)); }
StatusOr<std::vector<Status>> CudaExecutor::Run(Batch batch) {
  std::vector<Status> statuses;
  ATTNRT_RETURN_IF_ERROR(impl_->Submit(
      std::move(batch),
      [&statuses](std::vector<Status> per_request) { statuses = std::move(per_request); },
      Completer::kCaller));
  return statuses;  // Submit returned after the done callback (kCaller)
}

void CudaExecutor::Wait() { impl_->WaitAll(); }

// Sequence calls hold the submission lock (batch_plan.h) and wait until every planned batch is
// launched (the launcher reads block tables as it packs). A block freed here and reused by a
// later batch is written in stream order, after every queued piece that still reads it; Prefill
// writes the pools from the host, so it drains the stream first.
Status CudaExecutor::CreateSequence(SequenceId id) {
  auto hold = impl_->planner->LockSubmission();
  impl_->WaitLaunched();
  return impl_->planner->Create(id);
}
Status CudaExecutor::ForkSequence(SequenceId parent, SequenceId child) {
  auto hold = impl_->planner->LockSubmission();
  impl_->WaitLaunched();
  return impl_->planner->Fork(parent, child);
}
Status CudaExecutor::FreeSequence(SequenceId id) {
  auto hold = impl_->planner->LockSubmission();
  impl_->WaitLaunched();
  return impl_->planner->Free(id);
}

Status CudaExecutor::Prefill(SequenceId id, int layer, int num_tokens, const Half* k,
                             const Half* v) {
  auto hold = impl_->planner->LockSubmission();
  impl_->WaitLaunched();
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
  impl_->WaitLaunched();
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
    if (impl_->path_names[i] != name) {
      known += (i ? ", " : "") + impl_->path_names[i];
      continue;
    }
    auto hold = impl_->planner->LockSubmission();  // the launcher picks paths (ChoosePath)
    impl_->WaitLaunched();
    return impl_->Select(i);
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

std::size_t CudaExecutor::KnownDeviceAllocationsForTesting() const {
  return impl_->known_allocations->size();
}

std::vector<PieceTimings> CudaExecutor::TakeTimings() {
  std::deque<PieceTimings> taken;
  {
    MutexLock lock(&impl_->mu);
    taken.swap(impl_->timings);
  }
  return {taken.begin(), taken.end()};
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
      << " B, workspace " << g.workspace_bytes << " B, capture " << g.capture_ms << " ms";
    if (g.device_io_chunks > 1) o << ", device-memory graph in " << g.device_io_chunks << " chunks";
    o << "\n";
  }
  return o.str();
}

}  // namespace attnrt::runtime
