// The Runtime facade: an executor (CUDA when a device is present, else the CPU reference) behind
// the batching scheduler. Everything here is wiring; the policy lives in scheduler/ and the work
// in runtime/. Built without CUDA (ATTNRT_WITH_CUDA=OFF), only the CPU executor exists.
#include <attnrt/version.h>  // ATTNRT_WITH_CUDA

#if ATTNRT_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include <attnrt/runtime.h>
#include "api/internal/cuda_device.h"
#include "api/internal/finite.h"
#include "kernels/variant_names.h"
#include "kvcache/kvcache.h"
#include "runtime/cpu_executor.h"
#include "scheduler/scheduler.h"
#if ATTNRT_WITH_CUDA
#include "runtime/cuda_executor.h"
#endif

namespace attnrt {
namespace {

constexpr std::size_t kDefaultCpuCacheBytes = std::size_t{256} << 20;

class RuntimeImpl final : public Runtime {
 public:
  RuntimeImpl(std::unique_ptr<runtime::Executor> executor, std::string description)
      : executor_(std::move(executor)), description_(std::move(description)) {}

  ~RuntimeImpl() override {
    scheduler_.reset();  // Shutdown(): fails what is queued, waits for what is in flight
    executor_->Wait();
  }

  Status Start(const RuntimeOptions& o) {
    check_finite_ = o.check_finite;
    scheduler::SchedulerOptions so;
    so.max_batch_size = o.max_batch_size;
    so.min_batch_size = o.min_batch_size;
    so.max_queue_delay = o.max_queue_delay;
    so.max_queue_size = o.max_queue_size;
    so.default_timeout = o.default_timeout;
    so.num_priority_levels = o.num_priority_levels;
    so.check_finite = o.check_finite;
    so.completion_threads = o.completion_threads;
    so.mapped_staging_bytes = o.mapped_staging_bytes;
    so.batcher_spin = o.batcher_spin;
    so.result_spin = o.result_spin;
    so.part_size = o.part_size;
    ATTNRT_ASSIGN_OR_RETURN(scheduler_, scheduler::Scheduler::Create(so, executor_.get()));
    return Status::Ok();
  }

  std::string device_description() const override { return description_; }
  const ModelShape& shape() const override { return executor_->shape(); }

  Status CreateSequence(SequenceId id) override {
    ATTNRT_RETURN_IF_ERROR(CheckOpen("CreateSequence"));
    return executor_->CreateSequence(id);
  }
  Status ForkSequence(SequenceId parent, SequenceId child) override {
    ATTNRT_RETURN_IF_ERROR(CheckOpen("ForkSequence"));
    return scheduler_->RunIfSequenceIdle(
        parent, "ForkSequence", [&] { return executor_->ForkSequence(parent, child); });
  }
  Status FreeSequence(SequenceId id) override {
    ATTNRT_RETURN_IF_ERROR(CheckOpen("FreeSequence"));
    return scheduler_->RunIfSequenceIdle(id, "FreeSequence",
                                         [&] { return executor_->FreeSequence(id); });
  }

  Status Prefill(SequenceId id, int layer, int num_tokens, std::span<const Half> k,
                 std::span<const Half> v) override {
    ATTNRT_RETURN_IF_ERROR(CheckOpen("Prefill"));
    ATTNRT_RETURN_IF_ERROR(CheckLayer(layer));
    if (num_tokens < 1) {
      return InvalidArgumentError("num_tokens = " + std::to_string(num_tokens) + ", expected >= 1");
    }
    const std::size_t expected = static_cast<std::size_t>(num_tokens) * shape().kv_token_elems();
    if (k.size() != expected || v.size() != expected) {
      return InvalidArgumentError(std::string(k.size() != expected ? "k" : "v") + " has " +
                                  std::to_string(k.size() != expected ? k.size() : v.size()) +
                                  " elements, expected num_tokens*Hkv*D = " +
                                  std::to_string(expected));
    }
    // A count past max_context cannot fit: the executor refuses it (after NotFound for an
    // unknown sequence) without reading K/V, and so does the finite scan, since such a count's
    // buffers need not be that long (the C API takes raw pointers and the count).
    if (check_finite_ && num_tokens <= shape().max_context) {
      for (const auto& [name, values] : {std::pair{"k", k}, std::pair{"v", v}}) {
        if (const std::ptrdiff_t i = FirstNonFinite(values); i >= 0) {
          return InvalidArgumentError(std::string(name) + " holds a non-finite value at element " +
                                      std::to_string(i) + " (check_finite)");
        }
      }
    }
    return scheduler_->RunIfSequenceIdle(id, "Prefill", [&] {
      return executor_->Prefill(id, layer, num_tokens, k.data(), v.data());
    });
  }

  StatusOr<int> SequenceLength(SequenceId id, int layer) const override {
    ATTNRT_RETURN_IF_ERROR(CheckOpen("SequenceLength"));
    ATTNRT_RETURN_IF_ERROR(CheckLayer(layer));
    return executor_->SequenceLength(id, layer);
  }

  KvCacheUsage kv_cache_usage() const override {
    const runtime::ExecutorStats s = executor_->stats();
    return KvCacheUsage{.blocks_total = s.kv_blocks_total,
                        .blocks_in_use = s.kv_blocks_in_use,
                        .sequences = s.sequences,
                        .block_bytes = static_cast<std::int64_t>(kvcache::BlockBytes(shape())),
                        .kv_bytes_per_token = shape().kv_bytes_per_token(),
                        .kv_cache_type = shape().kv_cache_type};
  }

  StatusOr<Submission> Submit(const DecodeRequest& request) override {
    return scheduler_->Submit(request);
  }
  StatusOr<RequestHandle> Submit(const DecodeRequest& request, DoneCallback done) override {
    return scheduler_->Submit(request, std::move(done));
  }
  DecodeResult Decode(const DecodeRequest& request) override {
    return scheduler_->Decode(request);
  }
  bool Cancel(const RequestHandle& handle) override { return scheduler_->Cancel(handle); }

  void Drain() override { scheduler_->Drain(); }
  void Shutdown() override {
    closed_.store(true);
    scheduler_->Shutdown();
  }

  std::string MetricsText() const override {
    std::string text = scheduler_->PrometheusText();
    const runtime::ExecutorStats s = executor_->stats();
    text += "# HELP attnrt_executor_batches_total Batches the executor ran.\n";
    text += "# TYPE attnrt_executor_batches_total counter\n";
    text += "attnrt_executor_batches_total " + std::to_string(s.batches) + "\n";
    text += "# HELP attnrt_executor_requests_total Requests the executor ran.\n";
    text += "# TYPE attnrt_executor_requests_total counter\n";
    text += "attnrt_executor_requests_total " + std::to_string(s.requests) + "\n";
    text += "# HELP attnrt_executor_failed_batches_total Batches that failed as a whole.\n";
    text += "# TYPE attnrt_executor_failed_batches_total counter\n";
    text += "attnrt_executor_failed_batches_total " + std::to_string(s.failed_batches) + "\n";
    text += "# HELP attnrt_kv_blocks KV cache blocks, by state (a leak shows as in_use growing).\n";
    text += "# TYPE attnrt_kv_blocks gauge\n";
    text += "attnrt_kv_blocks{state=\"in_use\"} " + std::to_string(s.kv_blocks_in_use) + "\n";
    text += "attnrt_kv_blocks{state=\"free\"} " +
            std::to_string(s.kv_blocks_total - s.kv_blocks_in_use) + "\n";
    text += "# HELP attnrt_kv_block_bytes K+V bytes of one KV block (all layers).\n";
    text += "# TYPE attnrt_kv_block_bytes gauge\n";
    text += "attnrt_kv_block_bytes " + std::to_string(kvcache::BlockBytes(shape())) + "\n";
    text += "# HELP attnrt_kv_bytes_per_token K+V bytes one token takes in the KV cache (all "
            "layers), by cache type.\n";
    text += "# TYPE attnrt_kv_bytes_per_token gauge\n";
    text += "attnrt_kv_bytes_per_token{type=\"" +
            std::string(KvCacheTypeName(shape().kv_cache_type)) + "\"} " +
            std::to_string(shape().kv_bytes_per_token()) + "\n";
    text += "# HELP attnrt_sequences Live sequences.\n";
    text += "# TYPE attnrt_sequences gauge\n";
    text += "attnrt_sequences " + std::to_string(s.sequences) + "\n";
    return text;
  }

 private:
  Status CheckOpen(const char* call) const {
    if (!closed_.load()) return Status::Ok();
    return UnavailableError(std::string(call) +
                            ": the runtime is shut down");
  }
  Status CheckLayer(int layer) const {
    if (layer >= 0 && layer < shape().num_layers) return Status::Ok();
    return InvalidArgumentError("layer " + std::to_string(layer) + " out of range [0, " +
                                std::to_string(shape().num_layers) + ")");
  }

  std::atomic<bool> closed_{false};
  bool check_finite_ = true;  // set once in Start
  std::unique_ptr<runtime::Executor> executor_;
  std::string description_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;  // after executor_: destroyed first
};

#if ATTNRT_WITH_CUDA
StatusOr<std::unique_ptr<runtime::Executor>> MakeCudaExecutor(const RuntimeOptions& o,
                                                             std::string* description) {
  runtime::CudaExecutorOptions co;
  co.shape = o.shape;
  co.num_blocks = o.kv_cache_bytes ? kvcache::BlocksForBudget(o.shape, o.kv_cache_bytes) : 0;
  co.kv_memory_fraction = o.kv_cache_fraction;
  if (!o.buckets.empty()) co.buckets = o.buckets;
  co.max_batch_size = std::max(co.max_batch_size, o.max_batch_size);
  co.mode = o.use_graphs ? runtime::LaunchMode::kGraph : runtime::LaunchMode::kEager;
  if (!o.decode_path.empty()) co.paths = {o.decode_path};
  co.sleep_through_steps = o.sleep_through_steps;
  co.offer_staging_memory = o.stage_in_mapped_memory;
  ATTNRT_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CudaExecutor> executor,
                          runtime::CreateCudaExecutor(co));
  int device = 0;
  cudaDeviceProp prop{};
  std::string name = "CUDA device";
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    name = prop.name;
  }
  *description = name + " (CUDA executor, " + (o.use_graphs ? "graph replay" : "eager") +
                 ", path " + std::string(executor->active_path()) + ")";
  return std::unique_ptr<runtime::Executor>(std::move(executor));
}
#else
StatusOr<std::unique_ptr<runtime::Executor>> MakeCudaExecutor(const RuntimeOptions&,
                                                             std::string*) {
  return UnavailableError("RuntimeOptions.device = kCuda: " + NoCudaDeviceReason() +
                          "; use DeviceKind::kCpu or kAuto");
}
#endif

StatusOr<std::unique_ptr<runtime::Executor>> MakeCpuExecutor(const RuntimeOptions& o,
                                                            std::string* description) {
  runtime::CpuExecutorOptions co;
  co.shape = o.shape;
  co.num_blocks = kvcache::BlocksForBudget(
      o.shape, o.kv_cache_bytes ? o.kv_cache_bytes : kDefaultCpuCacheBytes);
  if (!o.buckets.empty()) co.buckets = o.buckets;
  co.max_batch_size = std::max(co.max_batch_size, o.max_batch_size);
  ATTNRT_ASSIGN_OR_RETURN(std::unique_ptr<runtime::CpuExecutor> executor,
                          runtime::CpuExecutor::Create(co));
  *description = "CPU executor (reference kernel)";
  return std::unique_ptr<runtime::Executor>(std::move(executor));
}

}  // namespace

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeOptions& options) {
  ATTNRT_RETURN_IF_ERROR(options.shape.Validate());
  if (options.kv_cache_fraction <= 0.0 || options.kv_cache_fraction > 1.0) {
    return InvalidArgumentError("RuntimeOptions.kv_cache_fraction = " +
                                std::to_string(options.kv_cache_fraction) +
                                ", expected in (0, 1]");
  }
  // Checked on every device, so a misspelt path fails the same way with or without a GPU (the
  // CPU executor always runs the reference).
  if (!options.decode_path.empty()) {
    if (Status known = kernels::CheckDecodeVariantName(options.decode_path); !known.ok()) {
      return InvalidArgumentError("RuntimeOptions.decode_path = '" + options.decode_path +
                                  "': " + known.message());
    }
  }
  const bool fp8 = options.shape.kv_cache_type == KvCacheType::kFp8E4M3;
  if (fp8 && options.decode_path == "gemm") {
    return InvalidArgumentError(
        "RuntimeOptions.decode_path = 'gemm' with shape.kv_cache_type = fp8_e4m3: the GEMM path "
        "reads FP16 K/V only; use split_kv (the default), split_kv_simt or simple, or an fp16 "
        "cache");
  }
  const bool use_cuda = options.device == DeviceKind::kCuda ||
                        (options.device == DeviceKind::kAuto && CudaDeviceAvailable());
  std::string description;
  std::unique_ptr<runtime::Executor> executor;
  if (use_cuda) {
    ATTNRT_ASSIGN_OR_RETURN(executor, MakeCudaExecutor(options, &description));
  } else {
    ATTNRT_ASSIGN_OR_RETURN(executor, MakeCpuExecutor(options, &description));
  }
  auto rt = std::make_unique<RuntimeImpl>(std::move(executor), std::move(description));
  ATTNRT_RETURN_IF_ERROR(rt->Start(options));
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace attnrt
