// The host path's record (issue 11), every figure from one process on one GPU:
//   floor      the GPU's own round trip for the bytes of a batch of B requests: H2D of q/k/v,
//              a trivial kernel, D2H of the outputs, stream sync, replayed as a CUDA graph;
//              and at B = 1 the same with the real append + decode step in the graph (the
//              bound a B = 1 step through any host path can reach), and with the copies done
//              by kernels on mapped pinned memory instead of memcpy nodes (zero-copy);
//   b1         the public Runtime at B = 1 (H32 D128 T512, one caller thread, nothing else in
//              flight): Submit -> result visible, p50/p99, graph and eager, and the ratio to
//              the floor of the same bytes; Runtime::Decode (the step on the caller's
//              thread, the runtime idle), graph and eager; then the Submit path in layers (executor alone,
//              Runtime with a callback the caller spins on) to show where the time goes, and
//              the executor with a zero-copy request (mapped pinned q/k/v/out as kDevice);
//   host_cpu   the runtime's CPU time per request at max batch 128 under a saturating
//              closed-loop load (submit + staging + completion: every thread's CPU time but
//              the load generator's own; the whole process's figure is printed beside it);
//   A/B rows   the defaults against the previous behaviour in the same process: result_spin
//              4 us (B = 1) and steps spin-waited whole (host CPU);
//   saturation scheduler throughput at 1.5x offered load over the executor's kernel-only
//              capacity, and p99 at 70% load against window + 2 steps (max batch 32 and 128,
//              at T = 512 and at T = --long-context, 4096 by default); the p99 pools three
//              70%-load runs, each without its first 20 ms (a warm-up; the p99 with it is
//              recorded beside), and each run prints where its requests over the bound lie.
// Writes <out>/summary.json (the keys issue 11 names) and prints a table. Needs a GPU.
#include <cuda_runtime.h>
#include <dirent.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <attnrt/runtime.h>
#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "runtime/cuda_executor.h"
#include "tests/support/random_fp16.h"
#include "tools/device_decode.cuh"
#include "tools/open_loop.h"
#include "tools/percentile.h"
#include "tools/watchdog.h"

namespace attnrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string out_dir;
  std::string commit = "unknown";
  int iterations = 2000;
  double duration_s = 0.5;
  bool quick = false;
  // Sections to run: the floors and B=1 rows, host CPU, saturation at T=512 (the summary needs
  // these three) and at T=long_context (its keys are null in the summary without it).
  bool b1 = true, host = true, saturation = true, long_saturation = true;
  int long_context = 4096;  // --long-context
  // Saturation at max batch 32 and 128 with the completion thread sleeping through steps and
  // spinning them whole, alternating, twice (--saturation-ab; not part of the summary).
  bool saturation_ab = false;
  // B=1, host CPU at B=128 and saturation with requests staged in mapped memory at Submit or
  // packed into the step's staging, alternating, twice (--staging-ab; not part of the summary).
  bool staging_ab = false;
  bool lone_ab = false;  // --lone-ab
  // Saturation at max batch 32 and 128, T=long_context, with staged pieces in place always and
  // only when the GPU is idle (every busy piece gathered; --in-place-ab; not in the summary).
  bool in_place_ab = false;
  // The saturation executors' CudaExecutorOptions::record_timings (--untimed-saturation).
  bool saturation_timings = true;
  int pack_threads = -1;  // the saturation executors' CudaExecutorOptions::pack_threads
  int buffers = runtime::CudaExecutorOptions{}.num_buffers;  // ... and num_buffers
  // The saturation schedulers' SchedulerOptions::mapped_staging_bytes and completion_threads.
  std::int64_t mapped_staging_bytes = defaults::kMappedStagingAuto;
  int completion_threads = defaults::kCompletionThreads;
  // The saturation schedulers' SchedulerOptions::batcher_spin (-1: auto), and pass_trace
  // (--pass-trace: the batching thread around each 70%-load run's largest late cluster).
  std::chrono::microseconds batcher_spin{defaults::kBatcherSpinAuto};
  int part_size = defaults::kPartSizeAuto;  // the saturation schedulers' part_size (--part-size)
  bool pass_trace = false;
  // The saturation runs' tools::OpenLoopConfig::tokens_per_sequence (and their capacity runs'):
  // each request attends over the reset length plus fewer than this many tokens; 0: the
  // sequences grow a token a round through each run (--tokens-per-sequence). 0 by default:
  // with 32, forks of the 1,024 sequences made the 70%-load p99 several times worse on the
  // H200 (2026-11-29 r5: the forks' first appends come in bursts; the live sequence table
  // holds ~10 k forks), so the comparison with earlier records would measure that instead.
  int tokens_per_sequence = 0;
  // Their open loops' submitting threads (--producers); 0: ProducersFor(max batch).
  int producers = 0;
  // Their open loops' requests in device-visible memory (--device-memory-saturation).
  bool device_memory_requests = false;
  // --piece-log DIR: each 70%-load run's pieces, one CSV line each, in DIR.
  std::string piece_log_dir;
};

constexpr int kHeads = 32, kHeadDim = 128, kContext = 512;

void Die(const std::string& what) {
  std::fprintf(stderr, "api_host_path_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

using attnrt::tools::Percentile;

__global__ void TouchKernel(const unsigned char* in, unsigned char* out) {
  if (threadIdx.x == 0) out[0] = in[0];
}

// A run that has not finished within its limit prints the state it was in and every thread's
// (name, scheduler state, the system call it sits in: /proc/<pid>/task) and exits with 3, so a
// hang leaves evidence instead of an outer timeout.
std::unique_ptr<tools::Watchdog> WatchRun(std::string what, double limit_s,
                                         std::function<std::string()> state = nullptr) {
  return std::make_unique<tools::Watchdog>(limit_s, [what = std::move(what), limit_s, state] {
    std::printf("WATCHDOG: %s has not finished after %.0f s\n%s\nthreads:\n", what.c_str(), limit_s,
                state ? state().c_str() : "");
    char command[512];
    std::snprintf(command, sizeof(command),
                  "for t in /proc/%d/task/*; do echo \"$(cat $t/comm) "
                  "state=$(cut -d' ' -f3 $t/stat) utime=$(cut -d' ' -f14 $t/stat) "
                  "syscall=$(cut -d' ' -f1-3 $t/syscall 2>/dev/null)\"; done",
                  static_cast<int>(getpid()));
    std::fflush(stdout);
    if (std::system(command) != 0) std::printf("(thread listing failed)\n");
  });
}


struct LatencyUs {
  double p50 = 0, p99 = 0;
  double gpu_p50 = 0;  // the replay's own span on the GPU (Await::kTimedEvents only)
};

// Launch -> stream sync of `exec`, 100 warm-up replays then `iterations` timed; `before(i)` runs
// ahead of replay i (untimed).
// How a round trip's end is awaited: a stream sync, or an event recorded after the launch and
// synchronized, or polled with cudaEventQuery.
// kOtherThread*: a second thread synchronizes the event and signals the caller (which spins),
// as the executor's completion thread does; it learns of the launch by spinning on a flag or
// from a condition variable (a futex wake-up).
// kTimedEvents: timing events recorded before and after the launch, the second synchronized;
// their elapsed time is the replay's span on the GPU (as the executor's timed pieces read it).
enum class Await {
  kStreamSync,
  kEventSync,
  kEventQuery,
  kOtherThreadSpins,
  kOtherThreadWoken,
  kTimedEvents
};

LatencyUs TimeReplays(cudaGraphExec_t exec, cudaStream_t stream, int iterations,
                      const std::function<void(int)>& before = nullptr,
                      Await await = Await::kStreamSync) {
  std::vector<double> us, gpu_us;
  us.reserve(iterations);
  const bool timed = await == Await::kTimedEvents;
  cudaEvent_t done = nullptr, start = nullptr;
  Check(cudaEventCreateWithFlags(&done, timed ? 0 : cudaEventDisableTiming), "event");
  if (timed) Check(cudaEventCreate(&start), "event");
  const bool other_thread = await == Await::kOtherThreadSpins || await == Await::kOtherThreadWoken;
  std::atomic<int> launched{-1}, finished{-1};
  std::mutex mu;
  std::condition_variable cv;
  std::thread waiter;
  if (other_thread) {
    waiter = std::thread([&] {
      for (int i = 0; i < iterations + 100; ++i) {
        if (await == Await::kOtherThreadWoken) {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return launched.load() >= i; });
        } else {
          while (launched.load(std::memory_order_acquire) < i) {
          }
        }
        Check(cudaEventSynchronize(done), "event sync (waiter)");
        finished.store(i, std::memory_order_release);
      }
    });
  }
  for (int i = 0; i < iterations + 100; ++i) {
    if (before) before(i);
    const Clock::time_point t0 = Clock::now();
    if (timed) Check(cudaEventRecord(start, stream), "event record");
    Check(cudaGraphLaunch(exec, stream), "graph launch");
    if (other_thread) {
      Check(cudaEventRecord(done, stream), "event record");
      {
        std::lock_guard<std::mutex> lock(mu);
        launched.store(i, std::memory_order_release);
      }
      cv.notify_one();
      while (finished.load(std::memory_order_acquire) < i) {
      }
    } else if (await == Await::kStreamSync) {
      Check(cudaStreamSynchronize(stream), "sync");
    } else {
      Check(cudaEventRecord(done, stream), "event record");
      if (await == Await::kEventSync || timed) {
        Check(cudaEventSynchronize(done), "event sync");
        float ms = 0;
        if (timed && i >= 100) {
          Check(cudaEventElapsedTime(&ms, start, done), "elapsed time");
          gpu_us.push_back(1000.0 * ms);
        }
      } else {
        cudaError_t e;
        while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
        }
        Check(e, "event query");
      }
    }
    if (i >= 100) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  if (waiter.joinable()) waiter.join();
  cudaEventDestroy(done);
  if (start != nullptr) cudaEventDestroy(start);
  return {Percentile(us, 0.5), Percentile(us, 0.99), timed ? Percentile(gpu_us, 0.5) : 0.0};
}

// Copies n 16-byte words (grid-stride): with a pinned source or destination, a copy over PCIe
// issued by the SMs instead of a copy engine.
__global__ void CopyWordsKernel(const uint4* from, uint4* to, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    to[i] = from[i];
  }
}

// A host <-> device copy in a graph being captured on `stream`: a memcpy node, or with
// `kernel_copies` a copy kernel that reads or writes the pinned side over PCIe (pinned memory is
// device-addressable at its host address), as the executor's small buckets do
// (CudaExecutorOptions::kernel_copy_max_bytes). `bytes` is a multiple of 16.
void EnqueueCopy(const void* from, void* to, std::size_t bytes, cudaMemcpyKind kind,
                 bool kernel_copies, cudaStream_t stream) {
  if (kernel_copies) {
    CopyWordsKernel<<<24, 128, 0, stream>>>(static_cast<const uint4*>(from),
                                            static_cast<uint4*>(to), bytes / 16);
    Check(cudaGetLastError(), "copy kernel");
  } else {
    Check(cudaMemcpyAsync(to, from, bytes, kind, stream), "memcpy");
  }
}

// `bytes` of device memory (none for 0), or exit naming `what`.
tools::DeviceMemory AllocateOrDie(std::size_t bytes, const char* what) {
  tools::DeviceMemory memory;
  if (Status s = tools::AllocateDevice(bytes, &memory); !s.ok()) {
    Die(std::string("cudaMalloc ") + what + ": " + s.ToString());
  }
  return memory;
}

// The buffers, stream and graph of one floor measurement: pinned `in` and `out`, their device
// copies, a stream; Capture records H2D of `in`, `step(stream)`, D2H of `out` as one graph (the
// copies as memcpy nodes or, with `kernel_copies`, copy kernels). Everything is freed with it.
struct RoundTrip {
  std::size_t in_bytes, out_bytes;
  unsigned char *h_in = nullptr, *h_out = nullptr, *d_in = nullptr, *d_out = nullptr;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  // `write_combined_in`: `in` is write-combined pinned memory (the host only writes it).
  RoundTrip(std::size_t in, std::size_t out, bool write_combined_in = false)
      : in_bytes(in), out_bytes(out) {
    Check(cudaHostAlloc(&h_in, in_bytes,
                        write_combined_in ? cudaHostAllocWriteCombined : cudaHostAllocDefault),
          "cudaHostAlloc");
    Check(cudaMallocHost(&h_out, out_bytes), "cudaMallocHost");
    Check(cudaMalloc(&d_in, in_bytes), "cudaMalloc");
    Check(cudaMalloc(&d_out, out_bytes), "cudaMalloc");
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~RoundTrip() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    cudaFreeHost(h_in);
    cudaFreeHost(h_out);
    cudaFree(d_in);
    cudaFree(d_out);
  }
  RoundTrip(const RoundTrip&) = delete;
  RoundTrip& operator=(const RoundTrip&) = delete;

  // `copy_in` bytes of `in` are copied to the device (all of it: in_bytes; none: 0) and `out` is
  // copied back unless `copy_out` is false (a step that reads and writes the pinned side itself).
  template <typename Step>
  void Capture(bool kernel_copies, Step step, std::size_t copy_in, bool copy_out = true) {
    Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    if (copy_in > 0) {
      EnqueueCopy(h_in, d_in, copy_in, cudaMemcpyHostToDevice, kernel_copies, stream);
    }
    step(stream);
    if (copy_out) EnqueueCopy(d_out, h_out, out_bytes, cudaMemcpyDeviceToHost, kernel_copies, stream);
    Check(cudaStreamEndCapture(stream, &graph), "end capture");
    Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  }
  template <typename Step>
  void Capture(bool kernel_copies, Step step) {
    Capture(kernel_copies, step, in_bytes);
  }
};

// Where the B=1 step's inputs and outputs live (MeasureFloorWithDecode).
enum class StepIo {
  kMemcpyNodes,   // H2D and D2H memcpy nodes around the step
  kCopyKernels,   // copy kernels instead (the executor's small buckets)
  kZeroCopyData,  // a copy kernel for the metadata only; the step reads q/k/v and writes
                  // out/lse in the pinned staging over PCIe
  kZeroCopy,      // no copies: the step reads and writes everything in the pinned staging
};

// The bare round trip for a batch of `b` requests of the H32 D128 shape: q/k/v in, out + lse
// back, as one graph replay and a stream sync; the copies as memcpy nodes or copy kernels.
LatencyUs MeasureFloor(int b, int iterations, bool kernel_copies = false,
                       Await await = Await::kStreamSync) {
  const std::size_t q = std::size_t(kHeads) * kHeadDim * 2, kv = q;
  RoundTrip rt(std::size_t(b) * (q + 2 * kv), std::size_t(b) * (q + kHeads * 4));
  std::memset(rt.h_in, 1, rt.in_bytes);
  rt.Capture(kernel_copies,
             [&](cudaStream_t stream) { TouchKernel<<<1, 32, 0, stream>>>(rt.d_in, rt.d_out); });
  const LatencyUs latency = TimeReplays(rt.exec, rt.stream, iterations, nullptr, await);
  if (rt.h_out[0] != 1) Die("floor: the output byte did not come back");
  return latency;
}

// What the host does to the staging around each replay (untimed), as the executor's pack and
// copy-out do: nothing; or it writes q/k/v into `in` and reads `out`, so that the GPU reads
// lines the CPU has just written (and writes lines it has read); or the same with `in`
// write-combined.
enum class HostTraffic { kNone, kWriteInReadOut, kWriteCombinedIn };

// The variants of MeasureFloorWithDecode.
struct StepFloor {
  StepIo io = StepIo::kMemcpyNodes;
  // The step between an event wait node and an event record node, as the executor's pipelined
  // graphs order their computes (CudaExecutor::Impl::AddComputeOrderNodes).
  bool order_events = false;
  // How the replay is awaited (an event record + sync or poll, as the executor's completer
  // waits for a piece's `done`).
  Await await = Await::kStreamSync;
  HostTraffic host = HostTraffic::kNone;
};

// The same round trip with the real step in place of the trivial kernel: H2D of the metadata
// (length, layer, block table) and q/k/v, the default decode path's append + decode over a
// paged cache of kContext tokens, D2H of out + lse, stream sync, as one graph. Each replay
// reads another layer (32 x 8 MiB of K/V, far more than L2), as the B=1 rows do. What a B=1
// step costs the GPU and PCIe with no host work at all: the bound the Runtime's row can reach.
LatencyUs MeasureFloorWithDecode(int iterations, const StepFloor& f = {}) {
  ModelShape shape;
  shape.num_layers = 32;
  shape.num_q_heads = kHeads;
  shape.num_kv_heads = kHeads;
  shape.head_dim = kHeadDim;
  shape.block_size = 16;
  const StepIo io = f.io;
  shape.max_context = kContext;
  const int blocks = kContext / shape.block_size;
  const std::size_t qn = std::size_t(kHeads) * kHeadDim;
  // In: [kv_length][layer][block table][q][k][v]; out: [out][lse].
  const std::size_t meta_bytes = (2 + std::size_t(blocks)) * sizeof(std::int32_t);
  const std::size_t q_at = (meta_bytes + 255) / 256 * 256;
  RoundTrip rt(q_at + 3 * qn * sizeof(Half), qn * sizeof(Half) + kHeads * sizeof(float),
               f.host == HostTraffic::kWriteCombinedIn);
  std::memset(rt.h_in, 0, rt.in_bytes);
  auto* meta = reinterpret_cast<std::int32_t*>(rt.h_in);
  meta[0] = kContext;
  for (int b = 0; b < blocks; ++b) meta[2 + b] = b;
  testing::NormalRng rng(8);
  std::vector<Half> qkv(3 * qn);
  testing::FillNormal(qkv, rng);
  std::memcpy(rt.h_in + q_at, qkv.data(), qkv.size() * sizeof(Half));
  const std::size_t pool_elems = std::size_t(shape.num_layers) * blocks * kHeads *
                                 shape.block_size * kHeadDim;
  const tools::DeviceMemory k_mem = AllocateOrDie(pool_elems * sizeof(Half), "K pool");
  const tools::DeviceMemory v_mem = AllocateOrDie(pool_elems * sizeof(Half), "V pool");
  Half* k_pool = static_cast<Half*>(k_mem.get());
  Half* v_pool = static_cast<Half*>(v_mem.get());
  {
    std::vector<Half> fill(pool_elems / shape.num_layers);
    testing::FillNormal(fill, rng);
    for (int l = 0; l < shape.num_layers; ++l) {
      Check(cudaMemcpy(k_pool + l * fill.size(), fill.data(), fill.size() * sizeof(Half),
                       cudaMemcpyHostToDevice), "fill K");
      Check(cudaMemcpy(v_pool + l * fill.size(), fill.data(), fill.size() * sizeof(Half),
                       cudaMemcpyHostToDevice), "fill V");
    }
  }
  const kernels::DecodeVariant& variant = kernels::DefaultDecodeVariant();
  auto device = kernels::CurrentDecodeDevice();
  if (!device.ok()) Die("CurrentDecodeDevice: " + device.status().ToString());
  kernels::DecodePlanRequest request{shape, 1, kContext, kernels::DecodeStep::kAppendAndDecode,
                                     *device};
  auto plan = variant.plan(request);
  if (!plan.ok()) Die("decode plan: " + plan.status().ToString());
  const tools::DeviceMemory ws_mem = AllocateOrDie(plan->workspace_bytes, "workspace");
  const kernels::DecodeWorkspace ws{ws_mem.get(), plan->workspace_bytes};
  if (Status s = kernels::PrepareDecodeWorkspace(*plan, ws, rt.stream); !s.ok()) {
    Die("PrepareDecodeWorkspace: " + s.ToString());
  }
  kernels::KvPoolView pools;
  pools.k = k_pool;
  pools.v = v_pool;
  pools.num_layers = shape.num_layers;
  pools.num_blocks = blocks;
  pools.num_kv_heads = kHeads;
  pools.block_size = shape.block_size;
  pools.head_dim = kHeadDim;
  kernels::DecodeBatchView batch;
  batch.capacity = 1;
  batch.num_q_heads = kHeads;
  batch.max_blocks_per_seq = blocks;
  // Pinned memory is device-addressable at its host address (unified addressing).
  const bool zero_copy_data = io == StepIo::kZeroCopyData || io == StepIo::kZeroCopy;
  const unsigned char* meta_at = io == StepIo::kZeroCopy ? rt.h_in : rt.d_in;
  const unsigned char* data_at = zero_copy_data ? rt.h_in : rt.d_in;
  unsigned char* out_at = zero_copy_data ? rt.h_out : rt.d_out;
  const auto* d_meta = reinterpret_cast<const std::int32_t*>(meta_at);
  batch.kv_lengths = d_meta;
  batch.layers = d_meta + 1;
  batch.block_tables = d_meta + 2;
  batch.q = reinterpret_cast<const Half*>(data_at + q_at);
  batch.k_new = batch.q + qn;
  batch.v_new = batch.q + 2 * qn;
  batch.out = reinterpret_cast<Half*>(out_at);
  batch.lse = reinterpret_cast<float*>(out_at + qn * sizeof(Half));
  batch.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const std::size_t copy_in = io == StepIo::kZeroCopy       ? 0
                              : io == StepIo::kZeroCopyData ? (meta_bytes + 15) / 16 * 16
                                                            : rt.in_bytes;
  cudaEvent_t previous = nullptr, computed = nullptr;
  const bool order_events = f.order_events;
  if (order_events) {
    Check(cudaEventCreateWithFlags(&previous, cudaEventDisableTiming), "event");
    Check(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming), "event");
    Check(cudaEventRecord(previous, rt.stream), "event record");
  }
  rt.Capture(io != StepIo::kMemcpyNodes, [&](cudaStream_t stream) {
    if (order_events) {
      Check(cudaStreamWaitEvent(stream, previous, cudaEventWaitExternal), "event wait node");
    }
    if (Status s = variant.run(*plan, batch, pools, ws, kernels::DecodeRunContext{stream, nullptr});
        !s.ok()) {
      Die("decode run: " + s.ToString());
    }
    if (order_events) {
      Check(cudaEventRecordWithFlags(computed, stream, cudaEventRecordExternal),
            "event record node");
    }
  }, copy_in, /*copy_out=*/!zero_copy_data);
  std::vector<unsigned char> out_seen(rt.out_bytes);
  const LatencyUs latency = TimeReplays(rt.exec, rt.stream, iterations, [&](int i) {
    meta[1] = i % shape.num_layers;  // read by the H2D node of this replay
    if (f.host != HostTraffic::kNone) {
      std::memcpy(rt.h_in + q_at, qkv.data(), qkv.size() * sizeof(Half));
      std::memcpy(out_seen.data(), rt.h_out, rt.out_bytes);
    }
  }, f.await);
  if (order_events) {
    cudaEventDestroy(previous);
    cudaEventDestroy(computed);
  }
  // The step ran: its output is a softmax-weighted mean of N(0,1) V rows (finite, |x| < 8).
  const Half* out = reinterpret_cast<const Half*>(rt.h_out);
  for (std::size_t i = 0; i < qn; ++i) {
    const float x = HalfToFloat(out[i]);
    if (!(std::fabs(x) < 8.0f)) Die("floor with decode: output " + std::to_string(i) + " = " +
                                    std::to_string(x));
  }
  return latency;
}

ModelShape B1Shape() {
  ModelShape s;
  s.num_layers = 8;  // rotating over 4 sequences x 8 layers: 256 MiB of KV, far more than L2
  s.num_q_heads = kHeads;
  s.num_kv_heads = kHeads;
  s.head_dim = kHeadDim;
  s.block_size = 16;
  s.max_context = 1024;
  return s;
}

// Sequences 0..n-1, each layer prefilled with kContext tokens of fresh N(0,1) K/V, on a Runtime
// or straight on an executor (their Prefill takes spans and pointers respectively).
// The N(0,1) values are drawn once (drawing them per sequence took ~90 s for the 512 sequences of
// the host-CPU rows); each (sequence, layer) takes its own window of them.
template <typename Target>
void PrefillSequences(Target& target, const ModelShape& shape, int n) {
  testing::NormalRng rng(3);
  const std::size_t elems = std::size_t(kContext) * shape.kv_token_elems();
  std::vector<Half> pool(2 * elems + 1);
  testing::FillNormal(pool, rng);
  for (int seq = 0; seq < n; ++seq) {
    if (!target.CreateSequence(seq).ok()) Die("CreateSequence");
    for (int layer = 0; layer < shape.num_layers; ++layer) {
      const std::size_t at =
          (std::size_t(seq) * shape.num_layers + layer) * 7919 * shape.head_dim % elems;
      const std::span<const Half> k(pool.data() + at, elems), v(pool.data() + at + 1, elems);
      const Status s = [&] {
        if constexpr (std::is_base_of_v<Runtime, Target>) {
          return target.Prefill(seq, layer, kContext, k, v);
        } else {
          return target.Prefill(seq, layer, kContext, k.data(), v.data());
        }
      }();
      if (!s.ok()) Die("Prefill: " + s.ToString());
    }
  }
}

// What a row changes from the runtime's defaults (an A/B in the same process).
struct Variation {
  std::chrono::microseconds result_spin{defaults::kResultSpinAuto};
  bool sleep_through_steps = true;
  // RuntimeOptions::stage_in_mapped_memory (CudaExecutorOptions::offer_staging_memory).
  bool stage_in_mapped_memory = RuntimeOptions{}.stage_in_mapped_memory;
  int pack_threads = -1;  // CudaExecutorOptions of the saturation executors (not the Runtime rows)
  // Their record_timings: the per-piece breakdown, at the cost of a start event, an event query
  // and an elapsed-time read per piece (--untimed-saturation: off, as a Runtime runs).
  bool record_timings = true;
  int buffers = runtime::CudaExecutorOptions{}.num_buffers;  // likewise
  std::int64_t mapped_staging_bytes = defaults::kMappedStagingAuto;  // their schedulers'
  int completion_threads = defaults::kCompletionThreads;                // likewise
  std::chrono::microseconds batcher_spin{defaults::kBatcherSpinAuto};   // likewise
  int part_size = defaults::kPartSizeAuto;                               // likewise
  bool pass_trace = false;                                              // likewise
  int tokens_per_sequence = 0;                                          // likewise
  int producers = 0;                    // their open loops' submitting threads (0: ProducersFor)
  bool device_memory_requests = false;  // their open loops' (tools::OpenLoopConfig)
  std::string piece_log_dir;            // Options::piece_log_dir
  // Their executors' CudaExecutorOptions::busy_gather_max_rows (-1: its default; 0: staged
  // pieces always in place; 1024: gathered whenever launched behind another at
  // busy_gather_min_kv_length 0).
  int busy_gather_max_rows = -1;
  std::string Name() const {
    std::string name;
    if (busy_gather_max_rows == 0) name += " (in place always)";
    if (busy_gather_max_rows > 0) {
      name += " (busy pieces of <= " + std::to_string(busy_gather_max_rows) + " rows gathered)";
    }
    if (!sleep_through_steps) name += " (steps spin-waited)";
    if (stage_in_mapped_memory != RuntimeOptions{}.stage_in_mapped_memory) {
      name += stage_in_mapped_memory ? " (staged in mapped memory)"
                                     : " (packed into the step's staging)";
    }
    return name;
  }
};

// `v` with the command line's saturation executor options.
Variation ForSaturation(const Options& o, Variation v) {
  v.pack_threads = o.pack_threads;
  v.record_timings = o.saturation_timings;
  v.buffers = o.buffers;
  v.mapped_staging_bytes = o.mapped_staging_bytes;
  v.completion_threads = o.completion_threads;
  v.batcher_spin = o.batcher_spin;
  v.part_size = o.part_size;
  v.pass_trace = o.pass_trace;
  v.tokens_per_sequence = o.tokens_per_sequence;
  v.producers = o.producers;
  v.device_memory_requests = o.device_memory_requests;
  v.piece_log_dir = o.piece_log_dir;
  return v;
}

std::unique_ptr<Runtime> MakeRuntime(const ModelShape& shape, bool graphs, int max_batch,
                                     std::chrono::microseconds window, int sequences,
                                     Variation variation = {}) {
  RuntimeOptions o;
  o.shape = shape;
  o.device = DeviceKind::kCuda;
  o.use_graphs = graphs;
  o.max_batch_size = max_batch;
  o.max_queue_delay = window;
  o.max_queue_size = 1 << 16;
  o.result_spin = variation.result_spin;
  o.sleep_through_steps = variation.sleep_through_steps;
  o.stage_in_mapped_memory = variation.stage_in_mapped_memory;
  o.kv_cache_bytes = std::size_t(sequences) * shape.num_layers * shape.max_context *
                     shape.kv_token_elems() * 2 * sizeof(Half) + (std::size_t{64} << 20);
  auto rt = Runtime::Create(o);
  if (!rt.ok()) Die("Runtime::Create: " + rt.status().ToString());
  PrefillSequences(**rt, shape, sequences);
  return std::move(*rt);
}

// The value of one sample line of a Prometheus text exposition (0 when absent).
double MetricValue(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0.0;
  return std::atof(text.c_str() + at + name.size() + 2);
}

// Mean of a scheduler time histogram in microseconds, from its _sum and _count.
double MeanUs(const std::string& text, const std::string& histogram) {
  const double count = MetricValue(text, "attnrt_scheduler_" + histogram + "_count");
  return count > 0 ? MetricValue(text, "attnrt_scheduler_" + histogram + "_sum") / count * 1e6
                   : 0.0;
}

// How a B=1 caller gets its result.
enum class B1Call {
  kFuture,        // Submit -> future.get()
  kCallbackSpin,  // Submit with a callback; the caller spins on a flag it sets
  kDecode,        // Runtime::Decode (inline on the caller's thread: the runtime is idle)
  kDecodeOut,     // the same, the output written to the caller's DecodeRequest::out
};

const char* B1CallName(B1Call call) {
  switch (call) {
    case B1Call::kFuture: return "";
    case B1Call::kCallbackSpin: return " callback";
    case B1Call::kDecode: return " Decode";
    case B1Call::kDecodeOut: return " Decode (caller's out)";
  }
  return "";
}

// One caller thread, rotating over every (sequence, layer).
LatencyUs MeasureB1(bool graphs, int iterations, B1Call call = B1Call::kFuture,
                    Variation variation = {}) {
  const ModelShape shape = B1Shape();
  constexpr int kSequences = 4;
  std::unique_ptr<Runtime> rt = MakeRuntime(shape, graphs, 1, std::chrono::microseconds(0),
                                            kSequences, variation);
  testing::NormalRng rng(5);
  const std::size_t qn = std::size_t(kHeads) * kHeadDim;
  std::vector<Half> q(qn), k(shape.kv_token_elems()), v(k.size()), out(qn);
  testing::FillNormal(q, rng);
  testing::FillNormal(k, rng);
  testing::FillNormal(v, rng);
  std::vector<double> us;
  us.reserve(iterations);
  if ((iterations + 100) / (kSequences * shape.num_layers) >= shape.max_context - kContext) {
    Die("--iterations too large for the B=1 cache (max_context " +
        std::to_string(shape.max_context) + ")");
  }
  for (int i = 0; i < iterations + 100; ++i) {
    DecodeRequest r{.sequence_id = static_cast<std::uint64_t>(i % kSequences),
                    .layer = (i / kSequences) % shape.num_layers, .q = q, .k = k, .v = v};
    if (call == B1Call::kDecodeOut) r.out = out.data();
    const Clock::time_point t0 = Clock::now();
    DecodeResult res;
    if (call == B1Call::kDecode || call == B1Call::kDecodeOut) {
      res = rt->Decode(r);
    } else if (call == B1Call::kCallbackSpin) {
      std::atomic<bool> done{false};
      auto h = rt->Submit(r, [&](DecodeResult result) {
        res = std::move(result);
        done.store(true, std::memory_order_release);
      });
      if (!h.ok()) Die("Submit: " + h.status().ToString());
      while (!done.load(std::memory_order_acquire)) {
      }
    } else {
      auto sub = rt->Submit(r);
      if (!sub.ok()) Die("Submit: " + sub.status().ToString());
      res = sub->result.get();
    }
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!res.status.ok()) Die("decode: " + res.status.ToString());
    if (i >= 100) us.push_back(t);
  }
  // Where the time went, from the scheduler's own histograms (means over every request,
  // warm-up included): submit -> dispatch, the executor's submit -> done, submit -> delivered.
  const std::string metrics = rt->MetricsText();
  const double queue = MeanUs(metrics, "queue_delay_seconds");
  const double executor = MeanUs(metrics, "executor_time_seconds");
  const double delivered = MeanUs(metrics, "latency_seconds");
  double mean = 0;
  for (double t : us) mean += t;
  mean /= std::max<std::size_t>(us.size(), 1);
  std::printf("  B=1 %s%s%s means: submit->dispatch %.1f us, executor %.1f, done->delivered "
              "%.1f, delivered->caller %.1f (caller's mean %.1f)\n",
              graphs ? "graph" : "eager", B1CallName(call),
              variation.result_spin.count() >= 0
                  ? (" result_spin " + std::to_string(variation.result_spin.count()) + " us").c_str()
                  : "",
              queue, executor,
              delivered - queue - executor, mean - delivered, mean);
  return {Percentile(us, 0.5), Percentile(us, 0.99)};
}

// The B=1 path in pieces, to see where the Runtime's time goes beyond the floor (each row adds
// one layer; the caller spins where it can, so a row shows no wake-up of the caller):
//   executor  CudaExecutor::Submit of a one-request batch -> its done callback (the caller spins
//             on a flag the callback sets): plan, pack, graph, completion detection;
//   callback  Runtime::Submit (callback form) -> the callback's flag, the caller spinning: adds
//             the scheduler's intake, batching thread and delivery;
//   future    Runtime::Submit -> future.get() (the target's row): adds the caller's wake-up.
// With `zero_copy`, the request's q/k/v/out live in mapped pinned host memory and go in as
// MemoryKind::kDevice: the graph's gather and scatter kernels read and write them over PCIe, no
// pack copy and no memcpy node (the comparison for a zero-copy small-batch path).
// With `memcpy_nodes`, the host-memory graph moves its staging with memcpy nodes (the behaviour
// before kernel_copy_max_bytes).
double PrintPieceTimings(const std::string& run, std::vector<runtime::PieceTimings> t);

// With `timed`, the executor records its per-piece timings (an event more per step) and the
// row prints their medians: where the executor's time goes beyond the GPU's. With `run`, the
// step goes through Executor::Run (plan, launch, wait and copy-out on the calling thread).
struct ExecutorB1 {
  bool zero_copy = false, memcpy_nodes = false, timed = false, run = false;
};
LatencyUs MeasureExecutorB1(int iterations, ExecutorB1 how = {}) {
  const auto [zero_copy, memcpy_nodes, timed, run] = how;
  const ModelShape shape = B1Shape();
  constexpr int kSequences = 4;
  runtime::CudaExecutorOptions co;
  co.shape = shape;
  co.num_blocks = kSequences * shape.num_layers * (shape.max_blocks_per_sequence() + 1) + 64;
  co.max_batch_size = 1;
  co.buckets = {1};
  if (memcpy_nodes) co.kernel_copy_max_bytes = 0;
  co.record_timings = timed;
  auto ex = runtime::CreateCudaExecutor(co);
  if (!ex.ok()) Die("CreateCudaExecutor: " + ex.status().ToString());
  PrefillSequences(**ex, shape, kSequences);
  testing::NormalRng rng(4);
  const std::size_t qn = std::size_t(kHeads) * kHeadDim;
  std::vector<Half> q(qn), k(shape.kv_token_elems()), v(k.size()), out(qn);
  testing::FillNormal(q, rng);
  testing::FillNormal(k, rng);
  testing::FillNormal(v, rng);
  Half* mapped = nullptr;  // zero_copy: [q][k][v][out]
  if (zero_copy) {
    const std::size_t n = q.size() + k.size() + v.size() + out.size();
    Check(cudaHostAlloc(&mapped, n * sizeof(Half), cudaHostAllocMapped), "cudaHostAlloc");
    std::memcpy(mapped, q.data(), q.size() * sizeof(Half));
    std::memcpy(mapped + qn, k.data(), k.size() * sizeof(Half));
    std::memcpy(mapped + qn + k.size(), v.data(), v.size() * sizeof(Half));
  }
  std::vector<double> us;
  us.reserve(iterations);
  std::atomic<int> done{0};
  Status error;
  for (int i = 0; i < iterations + 100; ++i) {
    runtime::Batch b;
    b.requests.resize(1);
    runtime::BatchRequest& r = b.requests[0];
    r.sequence_id = static_cast<SequenceId>(i % kSequences);
    r.layer = (i / kSequences) % shape.num_layers;
    r.q = q.data();
    r.k = k.data();
    r.v = v.data();
    r.out = out.data();
    if (zero_copy) {
      r.memory = runtime::MemoryKind::kDevice;
      r.q = mapped;
      r.k = mapped + qn;
      r.v = mapped + qn + k.size();
      r.out = mapped + qn + 2 * k.size();
    }
    done.store(0, std::memory_order_relaxed);
    const Clock::time_point t0 = Clock::now();
    if (run) {
      StatusOr<std::vector<Status>> per = (*ex)->Run(std::move(b));
      if (!per.ok()) Die("executor Run: " + per.status().ToString());
      if (!(*per)[0].ok()) (void)(error = (*per)[0]);
    } else {
      const Status s = (*ex)->Submit(std::move(b), [&](std::vector<Status> per) {
        if (!per[0].ok()) (void)(error = per[0]);
        done.store(1, std::memory_order_release);
      });
      if (!s.ok()) Die("executor Submit: " + s.ToString());
      while (done.load(std::memory_order_acquire) == 0) {
      }
    }
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!error.ok()) Die("executor decode: " + error.ToString());
    if (i >= 100) us.push_back(t);
  }
  if (mapped != nullptr) {
    for (std::size_t i = 0; i < qn; ++i) {  // the kernel wrote the caller's mapped row
      const float x = HalfToFloat(mapped[qn + 2 * k.size() + i]);
      if (!(std::fabs(x) < 8.0f)) Die("zero-copy executor: output " + std::to_string(i));
    }
    cudaFreeHost(mapped);
  }
  if (timed) {
    (*ex)->Wait();
    PrintPieceTimings(run ? "B=1 executor Run, timed" : "B=1 executor, timed",
                      (*ex)->TakeTimings());
  }
  return {Percentile(us, 0.5), Percentile(us, 0.99)};
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Run time (CPU seconds) of every thread of this process by thread id, with its name:
// /proc/self/task/*/schedstat (nanoseconds), else stat's utime + stime (clock ticks).
std::map<int, std::pair<std::string, double>> ThreadCpuSnapshot() {
  std::map<int, std::pair<std::string, double>> threads;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return threads;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(task + "/comm");
    std::string name;
    std::getline(comm, name);
    double seconds = -1;
    std::ifstream schedstat(task + "/schedstat");
    unsigned long long ns = 0;
    if (schedstat >> ns) {
      seconds = ns * 1e-9;
    } else {
      std::ifstream stat(task + "/stat");
      std::string line;
      std::getline(stat, line);
      const std::size_t paren = line.rfind(')');
      if (paren != std::string::npos) {
        std::istringstream fields(line.substr(paren + 2));
        std::string f;
        unsigned long long utime = 0, stime = 0;
        for (int i = 3; i <= 15 && (fields >> f); ++i) {  // field 3 is the state
          if (i == 14) utime = std::stoull(f);
          if (i == 15) stime = std::stoull(f);
        }
        seconds = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
      }
    }
    if (seconds >= 0) threads[std::atoi(e->d_name)] = {name, seconds};
  }
  closedir(dir);
  return threads;
}

// CPU microseconds per request of each thread name between two snapshots, largest first, as
// one line ("other" is every thread the runtime does not name: the delivery pool and the CUDA
// driver's; the bench's own threads sleep or are named bench-*).
std::string ThreadCpuPerRequest(const std::map<int, std::pair<std::string, double>>& before,
                                const std::map<int, std::pair<std::string, double>>& after,
                                double requests) {
  std::map<std::string, double> by_name;
  for (const auto& [tid, t] : after) {
    const auto it = before.find(tid);
    const double delta = t.second - (it != before.end() ? it->second.second : 0.0);
    const std::string name = t.first.rfind("attnrt-", 0) == 0 || t.first.rfind("bench-", 0) == 0
                                 ? t.first
                                 : "other";
    by_name[name] += delta;
  }
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [name, seconds] : by_name) sorted.emplace_back(seconds, name);
  std::sort(sorted.rbegin(), sorted.rend());
  std::string line;
  char buf[96];
  for (const auto& [seconds, name] : sorted) {
    std::snprintf(buf, sizeof(buf), "%s%s %.3f", line.empty() ? "" : ", ", name.c_str(),
                  seconds * 1e6 / requests);
    line += buf;
  }
  return line;
}

struct HostCpu {
  double runtime_us = 0;  // the runtime's CPU per request (the target's figure)
  double process_us = 0;  // every thread of the process, the load generator's included
  double submit_us = 0;   // of runtime_us: inside Submit (validation, finite scan, copies)
  double throughput = 0;  // requests per second
};

// CPU time per request through the Runtime at max batch 128: 4 producer threads keep their 128
// sequences each busy (one request per sequence in flight, callback form) for `duration_s`.
// The runtime's share is the process's CPU time minus the producer threads' own, plus the time
// the producers spent inside Submit (it does not block, so its wall time is its CPU time): what
// remains of the producers is the load generator (finding a free sequence, sleeping), not the
// runtime. Callbacks only mark their sequence free.
// With `device_inputs`, every request's q/k/v/out are device buffers (TensorMemory::kDevice,
// one set per sequence, filled once): nothing is copied on the host, so what remains is the
// runtime's own bookkeeping.
HostCpu MeasureHostCpu(double duration_s, bool device_inputs = false, Variation variation = {}) {
  ModelShape shape = B1Shape();
  shape.num_layers = 1;
  shape.max_context = 2048;
  constexpr int kSequences = 512, kProducers = 4, kPerProducer = kSequences / kProducers;
  std::unique_ptr<Runtime> rt =
      MakeRuntime(shape, true, 128, std::chrono::microseconds(200), kSequences, variation);
  testing::NormalRng rng(6);
  const std::size_t qn = std::size_t(kHeads) * kHeadDim;
  std::vector<Half> q(qn), k(shape.kv_token_elems()), v(k.size());
  testing::FillNormal(q, rng);
  testing::FillNormal(k, rng);
  testing::FillNormal(v, rng);
  // Device copies of q/k/v per sequence, and an output row each.
  Half* device_rows = nullptr;
  const std::size_t kvn = k.size(), row = qn + 2 * kvn + qn;
  if (device_inputs) {
    Check(cudaMalloc(&device_rows, kSequences * row * sizeof(Half)), "cudaMalloc");
    for (int seq = 0; seq < kSequences; ++seq) {
      Half* base = device_rows + seq * row;
      Check(cudaMemcpy(base, q.data(), qn * sizeof(Half), cudaMemcpyHostToDevice), "H2D q");
      Check(cudaMemcpy(base + qn, k.data(), kvn * sizeof(Half), cudaMemcpyHostToDevice), "H2D k");
      Check(cudaMemcpy(base + qn + kvn, v.data(), kvn * sizeof(Half), cudaMemcpyHostToDevice),
            "H2D v");
    }
  }
  std::atomic<std::int64_t> completed{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::atomic<bool>> busy(kSequences);
  auto watchdog = WatchRun(
      "host cpu run", duration_s + 30, [&] {
        return "completed " + std::to_string(completed.load()) + "\n" + rt->MetricsText();
      });
  std::vector<double> producer_cpu(kProducers, 0.0), in_submit_s(kProducers, 0.0);
  const auto threads0 = ThreadCpuSnapshot();
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> producers;
  std::map<int, std::pair<std::string, double>> threads1;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      pthread_setname_np(pthread_self(), "bench-producer");
      const double thread_cpu0 = ThreadCpuSeconds();
      double submit_s = 0;
      // Producer p owns sequences p, p + 4, ...
      while (!stop.load(std::memory_order_relaxed)) {
        bool submitted = false;
        for (int j = 0; j < kPerProducer; ++j) {
          const int seq = p + j * kProducers;
          if (busy[seq].load(std::memory_order_acquire)) continue;
          busy[seq].store(true, std::memory_order_relaxed);
          DecodeRequest r{.sequence_id = static_cast<std::uint64_t>(seq), .layer = 0, .q = q,
                          .k = k, .v = v};
          if (device_inputs) {
            Half* base = device_rows + seq * row;
            r.q = {base, qn};
            r.k = {base + qn, kvn};
            r.v = {base + qn + kvn, kvn};
            r.out = base + qn + 2 * kvn;
            r.memory = TensorMemory::kDevice;
          }
          const Clock::time_point s0 = Clock::now();
          auto h = rt->Submit(r, [&, seq](DecodeResult res) {
            (res.status.ok() ? completed : failed).fetch_add(1, std::memory_order_relaxed);
            busy[seq].store(false, std::memory_order_release);
          });
          submit_s += std::chrono::duration<double>(Clock::now() - s0).count();
          if (!h.ok()) Die("Submit: " + h.status().ToString());
          submitted = true;
        }
        if (!submitted) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      producer_cpu[p] = ThreadCpuSeconds() - thread_cpu0;
      in_submit_s[p] = submit_s;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(duration_s));
  threads1 = ThreadCpuSnapshot();  // producers still running: their run time is in it
  const std::int64_t completed_at_snapshot = completed.load();
  stop.store(true);
  for (std::thread& t : producers) t.join();
  rt->Drain();
  const double cpu = ProcessCpuSeconds() - cpu0;
  watchdog.reset();
  rt.reset();
  if (device_rows != nullptr) cudaFree(device_rows);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed.load() > 0) Die(std::to_string(failed.load()) + " requests failed (host cpu run)");
  double producers_s = 0, submit_s = 0;
  for (int p = 0; p < kProducers; ++p) {
    producers_s += producer_cpu[p];
    submit_s += in_submit_s[p];
  }
  const double n = static_cast<double>(std::max<std::int64_t>(completed.load(), 1));
  HostCpu h;
  h.process_us = cpu * 1e6 / n;
  h.runtime_us = (cpu - producers_s + submit_s) * 1e6 / n;
  h.submit_us = submit_s * 1e6 / n;
  h.throughput = n / wall;
  std::printf("host cpu%s%s: %lld requests in %.2f s (%.0f req/s); CPU s: process %.2f, "
              "producer threads %.2f of which in Submit %.2f\n",
              device_inputs ? " (device-memory requests)" : "",
              variation.Name().c_str(),
              static_cast<long long>(completed.load()), wall, h.throughput, cpu, producers_s,
              submit_s);
  std::printf("  cpu us per request by thread: %s\n",
              ThreadCpuPerRequest(threads0, threads1,
                                  static_cast<double>(std::max<std::int64_t>(
                                      completed_at_snapshot, 1)))
                  .c_str());
  return h;
}

// One CSV line a piece, in launch order, its launch `origin_ns` later on the steady clock (ms):
// the timeline of a run's stages, for the stretches the summary lines only name.
void WritePieceLog(const std::string& path, const std::vector<runtime::PieceTimings>& t,
                   std::int64_t origin_ns) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "api_host_path_bench: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(f, "piece,launched_ms,requests,in_place,idle_stream,plan_us,queued_us,pack_us,"
                  "launch_us,graph_launch_us,gpu_us,taken_us,seen_done_us,copied_out_us,"
                  "previous_settle_us,previous_done_callback_us\n");
  for (std::size_t i = 0; i < t.size(); ++i) {
    const runtime::PieceTimings& p = t[i];
    std::fprintf(f, "%zu,%.3f,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
                 i, (p.launched_steady_ns - origin_ns) * 1e-6, p.requests, p.in_place ? 1 : 0,
                 p.launched_into_idle_stream ? 1 : 0, p.plan_us, p.queue_us, p.pack_us,
                 p.launch_us, p.graph_launch_us, p.gpu_us, p.handoff_us, p.wait_us, p.copy_out_us,
                 p.previous_settle_us, p.previous_done_callback_us);
  }
  std::fclose(f);
}

// Medians of the executor's per-piece host and GPU times over one run; returns the GPU one.
double PrintPieceTimings(const std::string& run, std::vector<runtime::PieceTimings> t) {
  if (t.empty()) return 0.0;
  auto percentile = [&](double runtime::PieceTimings::*field, double q) {
    std::vector<double> v;
    v.reserve(t.size());
    for (const runtime::PieceTimings& p : t) v.push_back(p.*field);
    return Percentile(v, q);
  };
  auto median = [&](double runtime::PieceTimings::*field) { return percentile(field, 0.5); };
  std::printf("  pieces, %s: %zu, medians: plan %.1f us (ahead, in parts %.1f), queued for the "
              "launcher %.1f, pack %.1f (q/k/v copies %.1f), launch %.1f (the graph launch %.1f), "
              "gpu %.1f, requests %.0f\n", run.c_str(),
              t.size(), median(&runtime::PieceTimings::plan_us),
              median(&runtime::PieceTimings::planned_ahead_us),
              median(&runtime::PieceTimings::queue_us), median(&runtime::PieceTimings::pack_us),
              median(&runtime::PieceTimings::pack_copy_us),
              median(&runtime::PieceTimings::launch_us),
              median(&runtime::PieceTimings::graph_launch_us),
              median(&runtime::PieceTimings::gpu_us), [&] {
                std::vector<double> v;
                for (const runtime::PieceTimings& p : t) v.push_back(p.requests);
                return Percentile(v, 0.5);
              }());
  std::printf("    completion thread medians: took the piece %.1f us after its launch, saw it "
              "done %.1f us later, copied outputs out in %.1f\n",
              median(&runtime::PieceTimings::handoff_us), median(&runtime::PieceTimings::wait_us),
              median(&runtime::PieceTimings::copy_out_us));
  // Where a tail comes from (the 70%-load p99 is a tail of the executor's time).
  std::printf("    p99s: plan %.1f us, queued %.1f, pack %.1f, launch %.1f, gpu %.1f, taken %.1f, "
              "seen done %.1f\n",
              percentile(&runtime::PieceTimings::plan_us, 0.99),
              percentile(&runtime::PieceTimings::queue_us, 0.99),
              percentile(&runtime::PieceTimings::pack_us, 0.99),
              percentile(&runtime::PieceTimings::launch_us, 0.99),
              percentile(&runtime::PieceTimings::gpu_us, 0.99),
              percentile(&runtime::PieceTimings::handoff_us, 0.99),
              percentile(&runtime::PieceTimings::wait_us, 0.99));
  std::size_t host_only = 0, mixed = 0;
  for (const runtime::PieceTimings& p : t) {
    if (p.host_requests == p.requests) {
      ++host_only;
    } else if (p.host_requests > 0) {
      ++mixed;
    }
  }
  std::vector<double> busy_gpu, idle_gpu;
  for (const runtime::PieceTimings& p : t) {
    (p.launched_into_idle_stream ? idle_gpu : busy_gpu).push_back(p.gpu_us);
  }
  std::printf("    launched into an idle stream: %.1f%% of the pieces (gpu median %.1f us; the "
              "others %.1f us)\n", 100.0 * idle_gpu.size() / t.size(),
              idle_gpu.empty() ? 0.0 : Percentile(idle_gpu, 0.5),
              busy_gpu.empty() ? 0.0 : Percentile(busy_gpu, 0.5));
  const auto in_place = std::count_if(t.begin(), t.end(),
                                      [](const runtime::PieceTimings& p) { return p.in_place; });
  std::printf("    of the pieces: %.1f%% host-memory only, %.1f%% mixed, %.1f%% device-memory "
              "only (%.1f%% read and written in place)\n",
              100.0 * host_only / t.size(), 100.0 * mixed / t.size(),
              100.0 * (t.size() - host_only - mixed) / t.size(), 100.0 * in_place / t.size());
  // A cold start shows in the first pieces (a run's first milliseconds are its largest cluster
  // of late requests at 70% load, 2026-11-29).
  std::string first;
  for (std::size_t i = 0; i < std::min<std::size_t>(t.size(), 4); ++i) {
    char b[160];
    std::snprintf(b, sizeof b, "%s%d requests: plan %.1f, queued %.1f, pack %.1f, launch %.1f, "
                  "gpu %.1f, taken %.1f, seen done %.1f", i == 0 ? "" : "; ", t[i].requests,
                  t[i].plan_us, t[i].queue_us, t[i].pack_us, t[i].launch_us, t[i].gpu_us,
                  t[i].handoff_us, t[i].wait_us);
    first += b;
  }
  std::printf("    the first pieces (us): %s\n", first.c_str());
  // The pieces whose stages add up to the most (plan to outputs copied out), by their index in
  // the run: a stall of the executor's threads or of the GPU for milliseconds holds every batch
  // slot, and the scheduler's queue (not the executor's p99) shows it.
  auto total = [](const runtime::PieceTimings& p) {
    return p.plan_us + p.queue_us + p.pack_us + p.launch_us + p.gpu_us + p.handoff_us +
           p.wait_us + p.copy_out_us;
  };
  std::vector<std::size_t> order(t.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::size_t worst_n = std::min<std::size_t>(order.size(), 3);
  std::partial_sort(order.begin(), order.begin() + worst_n, order.end(),
                    [&](std::size_t a, std::size_t b) { return total(t[a]) > total(t[b]); });
  const auto over_ms = std::count_if(t.begin(), t.end(), [&](const runtime::PieceTimings& p) {
    return total(p) > 1000.0;
  });
  std::string worst;
  for (std::size_t w = 0; w < worst_n; ++w) {
    const runtime::PieceTimings& p = t[order[w]];
    char b[320];
    std::snprintf(b, sizeof b, "%s#%zu %.0f: plan %.1f, queued %.1f, pack %.1f, launch %.1f, "
                  "gpu %.1f, taken %.1f (the previous batch's settle %.1f, done callback %.1f), "
                  "seen done %.1f, copied out %.1f", w == 0 ? "" : "; ",
                  order[w], total(p), p.plan_us, p.queue_us, p.pack_us, p.launch_us, p.gpu_us,
                  p.handoff_us, p.previous_settle_us, p.previous_done_callback_us, p.wait_us,
                  p.copy_out_us);
    if (order[w] > 0) {  // what the completion thread did before taking it
      const runtime::PieceTimings& before = t[order[w] - 1];
      char c[96];
      std::snprintf(c, sizeof c, " [#%zu before it: seen done %.1f, copied out %.1f]",
                    order[w] - 1, before.wait_us, before.copy_out_us);
      std::strncat(b, c, sizeof b - std::strlen(b) - 1);
    }
    worst += b;
  }
  std::printf("    pieces over 1 ms in all: %lld; the longest (us): %s\n",
              static_cast<long long>(over_ms), worst.c_str());
  return median(&runtime::PieceTimings::gpu_us);
}

// SchedulerOptions::mapped_staging_bytes for the output: "auto" or "N MiB".
std::string StagingName(std::int64_t bytes) {
  return bytes == defaults::kMappedStagingAuto ? std::string("auto")
                                               : std::to_string(bytes >> 20) + " MiB";
}

// Submitting threads for the saturation rows at `batch`: enough to offer 1.5x the capacity
// (H100 host, 2026-11-27: one producer submits ~190 k host-memory requests/s of H32 Hkv8 D128,
// so 4 offered 754-774 k/s, under max batch 128's ~860 k capacity), and no more: 8 at max batch
// 32 left the runtime's own threads short of CPU (19% of the pieces launched into an idle GPU).
int ProducersFor(int batch) { return batch >= 128 ? 8 : 4; }

struct Saturation {
  double capacity = 0, step_us = 0, ratio = 0, p99_70_us = 0, bound_us = 0;
  double p99_70_with_warmup_us = 0;  // the 70%-load runs' p99 with their warm-ups counted
  std::vector<double> p99_70_runs_us;  // each 70%-load run's own p99 (after its warm-up)
  // Each 70%-load run's host canary: its wake-ups' lateness over tools::kCanaryThreshold,
  // summed (ms; milliseconds of it mean the host stopped the process's threads, not the runtime).
  std::vector<double> canary_late_ms_70_runs;
  // Each 70%-load run's longest wait of one thread for a CPU (ms; tools/thread_waits.h): a
  // thread of the run woken onto a busy CPU, which the canary does not see.
  std::vector<double> longest_thread_wait_ms_70_runs;
  // ... and the CPU time the hypervisor stole over it (ms, all CPUs; -1 unknown): the runs
  // with milliseconds of p99 had 110-210 ms stolen in 0.5 s, the quiet ones 0-10 (H200 r8).
  std::vector<double> cpu_stolen_ms_70_runs;
  // The 70%-load p99 pooled over the runs the host left alone (tools::HostDisturbed false), and
  // how many they were; -1 when every run was disturbed. Beside p99_70_us, never instead of it.
  double p99_70_undisturbed_us = -1;
  int undisturbed_70_runs = 0;
  // batch / the capacity run's median GPU time per piece (CUDA events around each launch), and
  // the 1.5x run's throughput over it. Since each pipeline buffer has a stream (2026-11-26) a
  // piece's events also span its wait behind the previous piece's compute, so this understates
  // what the GPU can do; it was the GPU's own bound while pieces ran one after another.
  double gpu_capacity = 0, gpu_ratio = 0;
  double submitted_1_5x = 0;  // the rate the 1.5x run's producers actually submitted at
  int producers = 0;
  // The 1.5x run's producers submitted more than the capacity: the runtime was overloaded, so
  // its throughput is its own; otherwise the producers set it and the ratio says nothing.
  bool overloaded() const { return submitted_1_5x > capacity; }
};

// A lone piece of `batch` requests (H32 Hkv8 D128, T=512) through Executor::Run, one piece at a
// time, nothing else in flight: staged in the executor's mapped staging memory (kDevice: the
// device-memory graph, its gather and scatter crossing PCIe) or plain host memory (the
// host-memory graph). Medians of Run's wall time and of the piece's GPU time (events around
// the launch); `disabled_stages` as
// CudaExecutor::SetDisabledStagesForBenchmark (what a stage costs, as a difference).
struct LonePiece {
  double run_us = 0, gpu_us = 0;
  // The executor's host medians: plan, pack, launch, and of the launch the graph launch call.
  double plan_us = 0, pack_us = 0, launch_us = 0, graph_launch_us = 0;
  std::string Host() const {
    char b[160];
    std::snprintf(b, sizeof b, "plan %.1f, pack %.1f, launch %.1f (the graph launch %.1f)",
                  plan_us, pack_us, launch_us, graph_launch_us);
    return b;
  }
};
// The model of the lone-piece and saturation rows: H32 Hkv8 D128, one layer, blocks of 16.
ModelShape LoadShape(int max_context) {
  ModelShape shape;
  shape.num_layers = 1;
  shape.num_q_heads = 32;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  shape.block_size = 16;
  shape.max_context = max_context;
  return shape;
}
LonePiece MeasureLonePiece(int batch, bool staged, int iterations,
                           unsigned disabled_stages = 0) {
  constexpr int kSequences = 256;  // 537 MB of K/V rotated: far more than L2
  const ModelShape shape = LoadShape(kContext + (iterations + 20) * batch / kSequences + 64);
  runtime::CudaExecutorOptions co;
  co.shape = shape;
  co.num_blocks = kSequences * (shape.max_blocks_per_sequence() + 1) + 64;
  co.max_batch_size = batch;
  co.record_timings = true;
  co.offer_staging_memory = true;
  auto ex = runtime::CreateCudaExecutor(co);
  if (!ex.ok()) Die("CreateCudaExecutor: " + ex.status().ToString());
  PrefillSequences(**ex, shape, kSequences);
  (*ex)->SetDisabledStagesForBenchmark(disabled_stages);
  const std::size_t qn = std::size_t(shape.num_q_heads) * shape.head_dim;
  const std::size_t kvn = shape.kv_token_elems();
  const std::size_t row = 2 * qn + 2 * kvn + 2 * shape.num_q_heads;  // [q][k][v][out][lse] halves
  Half* rows = nullptr;
  std::vector<Half> heap;
  if (staged) {
    rows = static_cast<Half*>((*ex)->staging_memory()->Allocate(row * batch * sizeof(Half)));
    if (rows == nullptr) Die("staging memory: could not allocate the lone piece's rows");
  } else {
    heap.resize(row * batch);
    rows = heap.data();
  }
  testing::NormalRng rng(5);
  testing::FillNormal(std::span<Half>(rows, row * batch), rng);
  std::vector<double> run_us, gpu_us, plan_us, pack_us, launch_us, graph_launch_us;
  for (int i = 0; i < iterations + 20; ++i) {
    runtime::Batch b;
    b.requests.resize(batch);
    for (int r = 0; r < batch; ++r) {
      runtime::BatchRequest& req = b.requests[r];
      Half* at = rows + std::size_t(r) * row;
      req.sequence_id = static_cast<SequenceId>((std::size_t(i) * batch + r) % kSequences);
      req.layer = 0;
      req.memory = staged ? runtime::MemoryKind::kDevice : runtime::MemoryKind::kHost;
      req.q = at;
      req.k = at + qn;
      req.v = at + qn + kvn;
      req.out = at + qn + 2 * kvn;
      req.lse = reinterpret_cast<float*>(at + 2 * qn + 2 * kvn);
    }
    const Clock::time_point t0 = Clock::now();
    StatusOr<std::vector<Status>> per = (*ex)->Run(std::move(b));
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!per.ok()) Die("executor Run: " + per.status().ToString());
    for (const Status& st : *per) {
      if (!st.ok()) Die("lone piece: " + st.ToString());
    }
    double gpu = 0, plan = 0, pack = 0, launch = 0, graph_launch = 0;
    for (const runtime::PieceTimings& pt : (*ex)->TakeTimings()) {
      gpu += pt.gpu_us;
      plan += pt.plan_us;
      pack += pt.pack_us;
      launch += pt.launch_us;
      graph_launch += pt.graph_launch_us;
    }
    if (i >= 20) {
      run_us.push_back(t);
      gpu_us.push_back(gpu);
      plan_us.push_back(plan);
      pack_us.push_back(pack);
      launch_us.push_back(launch);
      graph_launch_us.push_back(graph_launch);
    }
  }
  for (int r = 0; r < batch && disabled_stages == 0; ++r) {  // every row's output (|out| < 8)
    const Half* out = rows + std::size_t(r) * row + qn + 2 * kvn;
    for (std::size_t e = 0; e < qn; e += 61) {
      if (!(std::fabs(HalfToFloat(out[e])) < 8.0f)) {
        Die("lone piece: output of row " + std::to_string(r));
      }
    }
  }
  if (staged) (*ex)->staging_memory()->Free(rows);
  return {Percentile(run_us, 0.5), Percentile(gpu_us, 0.5), Percentile(plan_us, 0.5),
          Percentile(pack_us, 0.5), Percentile(launch_us, 0.5), Percentile(graph_launch_us, 0.5)};
}

// `v`'s numbers, each printed with `format`, joined by `separator`.
std::string JoinNumbers(const std::vector<double>& v, const char* format,
                        const char* separator = " / ") {
  std::string out;
  for (double x : v) {
    char b[32];
    std::snprintf(b, sizeof b, format, x);
    out += (out.empty() ? "" : separator) + std::string(b);
  }
  return out;
}

// The saturation open loops' warm-up, left out of their percentiles (tools::OpenLoopConfig::
// warmup; the summary keeps the p99 with it too): the first ~8 ms after a scheduler's creation
// were its cold start on the H200 (2026-11-29).
constexpr std::chrono::milliseconds kSaturationWarmup{20};

// As tune_window --criteria: kernel-only capacity at `batch`, throughput at 1.5x offered load,
// p99 at 70% load against window + 2 steps.
// Every sequence starts each run at `context` tokens.
Saturation MeasureSaturation(int batch, int context, double duration_s,
                             Variation variation = {}) {
  constexpr int kWindowUs = 200;
  // 1024 sequences at T=512 (1 GiB of K/V), 256 from T=2048 on (4 GiB at T=4096; each run's
  // reset prefills them all again).
  const int sequences = context >= 2048 ? 256 : 1024;
  // Room for the growth of one run (each starts again at `context`) at up to 3 M requests/s
  // at T=512, and proportionally fewer at longer contexts (a step's time grows with T).
  const double max_rate = 3.0e6 * std::min(1.0, double(kContext) / context);
  const ModelShape shape =
      LoadShape(context + static_cast<int>(max_rate * duration_s / sequences * 1.5) + 64);
  runtime::CudaExecutorOptions co;
  co.shape = shape;
  co.num_blocks = sequences * (shape.max_blocks_per_sequence() + 1) + 64;
  co.max_batch_size = batch;
  co.record_timings = variation.record_timings;  // where a step's host time goes
  co.sleep_through_steps = variation.sleep_through_steps;
  co.pack_threads = variation.pack_threads;
  co.num_buffers = variation.buffers;
  co.offer_staging_memory = variation.stage_in_mapped_memory;
  if (variation.busy_gather_max_rows >= 0) {
    co.busy_gather_max_rows = variation.busy_gather_max_rows;
    co.busy_gather_min_kv_length = 0;
  }
  auto ex = runtime::CreateCudaExecutor(co);
  if (!ex.ok()) Die("CreateCudaExecutor: " + ex.status().ToString());
  // Every run starts with every sequence at `context` tokens (tools::ResetSequences: runs
  // compared with each other attend over the same lengths).
  std::mt19937_64 rng(9);
  const std::vector<Half> kv =
      tools::UniformHalves(rng, std::size_t(context) * shape.kv_token_elems());
  auto reset = [&] {
    const Status p = tools::ResetSequences(ex->get(), sequences, context, kv);
    if (!p.ok()) Die("ResetSequences: " + p.ToString());
  };
  const Clock::time_point prefill_start = Clock::now();
  reset();
  const double prefill_s = std::chrono::duration<double>(Clock::now() - prefill_start).count();
  (void)(*ex)->TakeTimings();
  const int producers = variation.producers > 0 ? variation.producers : ProducersFor(batch);
  std::printf("  prefilled %d sequences of %d tokens in %.2f s; pack threads %d, buffers %d, mapped "
              "staging %s, completion threads %d, producers %d, requests in %s memory, %s\n",
              sequences, context, prefill_s, variation.pack_threads, variation.buffers,
              StagingName(variation.mapped_staging_bytes).c_str(),
              variation.completion_threads, producers,
              variation.device_memory_requests ? "device-visible" : "host",
              variation.tokens_per_sequence > 0
                  ? ("a generation of forks every " +
                     std::to_string(variation.tokens_per_sequence) + " rounds").c_str()
                  : "the sequences growing a token a round");
  // The best of the closed-loop runs (each from the same lengths): two with host-memory
  // requests (the copy path) and, when the executor offers staging memory, two with requests
  // staged there (the in-place path the scheduler's mapped records take). A stricter
  // denominator, steadier on a shared host than one run, which a stall on the submitting
  // thread lowers.
  const bool staged_capacity = (*ex)->staging_memory() != nullptr;
  auto capacity_watchdog = WatchRun("capacity runs", 4 * duration_s + 60);
  StatusOr<tools::CapacityResult> cap = InternalError("no capacity run");
  double capacity_gpu_us = 0;
  for (int staged = 0; staged <= (staged_capacity ? 1 : 0); ++staged) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (staged == 1 || attempt > 0) reset();  // the first run starts from the reset above
      auto c = tools::MeasureExecutorCapacity(
          ex->get(), batch, sequences, duration_s, staged == 1, variation.tokens_per_sequence,
          static_cast<std::int64_t>(max_rate * duration_s));
      if (!c.ok()) Die("capacity: " + c.status().ToString());
      std::printf("  capacity run %d, %s: %.0f req/s (step %.1f us)%s\n", attempt + 1,
                  staged ? "staged (in place)" : "host memory (copied)", c->throughput_per_s,
                  c->step_us,
                  c->timed_forks > 0
                      ? (", " + std::to_string(c->timed_forks) + " forks inside the timed loop")
                            .c_str()
                      : "");
      if (!cap.ok() || c->throughput_per_s > cap->throughput_per_s) cap = c;
    }
    const double gpu_us =
        PrintPieceTimings(staged ? "capacity, staged" : "capacity, host memory",
                          (*ex)->TakeTimings());
    if (capacity_gpu_us == 0 || gpu_us < capacity_gpu_us) capacity_gpu_us = gpu_us;
  }
  capacity_watchdog.reset();
  const double bound_us = kWindowUs + 2 * cap->step_us;  // the 70%-load bound
  auto run = [&](double rate, std::uint64_t seed) {
    const auto watchdog =
        WatchRun("open-loop run at " + std::to_string(rate) + " req/s", duration_s + 40);
    tools::OpenLoopConfig c;
    c.rate_per_s = rate;
    c.window = std::chrono::microseconds(kWindowUs);
    c.max_batch = batch;
    c.duration_s = duration_s;
    c.num_sequences = sequences;
    c.producers = producers;
    c.mapped_staging_bytes = variation.mapped_staging_bytes;
    c.completion_threads = variation.completion_threads;
    c.batcher_spin = variation.batcher_spin;
    c.part_size = variation.part_size;
    c.pass_trace = variation.pass_trace ? scheduler::kMaxPassTrace : 0;
    c.tokens_per_sequence = variation.tokens_per_sequence;
    c.device_memory_requests = variation.device_memory_requests;
    c.warmup = kSaturationWarmup;
    c.keep_latencies = true;  // the 70%-load runs are pooled
    c.seed = seed;
    c.late_threshold = std::chrono::microseconds(static_cast<std::int64_t>(bound_us));
    c.host_canary_period = tools::kCanaryPeriod;
    c.host_canary_threshold = tools::kCanaryThreshold;
    auto r = tools::RunOpenLoop(c, ex->get());
    if (!r.ok()) Die("open loop: " + r.status().ToString());
    if (r->failures() > 0) Die("open loop: failed requests: " + r->first_error);
    return *r;
  };
  reset();
  const tools::OpenLoopResult sat = run(1.5 * cap->throughput_per_s, 1);
  PrintPieceTimings("1.5x offered (batch mean " + std::to_string(sat.batch_mean) + ")",
                    (*ex)->TakeTimings());
  // The 70%-load p99 over kLoadedRuns runs (each from the reset lengths, its own arrival
  // schedule), their samples pooled: the p99 of a 1.5 s run at T=512's lengths. One run of 0.5 s
  // holds ~3,000 requests over its p99 at max batch 32: a single stall of the host of a few
  // milliseconds (the load generator's own threads late by as much, 2026-11-29) decided it.
  // While the host disturbs runs (tools::HostDisturbed), up to kExtraLoadedRuns more, so that
  // the undisturbed p99 has kLoadedRuns runs behind it when the host allows; every run counts in
  // the pooled p99 (H200, 2026-11-29: whole calls fell on stretches the hypervisor stole
  // 110-210 ms of CPU in each 0.5 s run at max batch 128).
  constexpr int kLoadedRuns = 3, kExtraLoadedRuns = 3;
  int undisturbed_so_far = 0;
  std::vector<tools::OpenLoopResult> loaded_runs;
  std::vector<std::int64_t> pooled, pooled_with_warmup, pooled_undisturbed;
  for (int i = 0; i < kLoadedRuns + kExtraLoadedRuns &&
                  (i < kLoadedRuns || undisturbed_so_far < kLoadedRuns);
       ++i) {
    reset();
    tools::OpenLoopResult r = run(0.7 * cap->throughput_per_s, 1 + i);
    if (!r.host_disturbed) ++undisturbed_so_far;
    std::vector<runtime::PieceTimings> pieces = (*ex)->TakeTimings();
    if (!variation.piece_log_dir.empty()) {
      WritePieceLog(variation.piece_log_dir + "/b" + std::to_string(batch) + "_t" +
                        std::to_string(context) + "_run" + std::to_string(i + 1) + ".csv",
                    pieces, r.start_steady_ns);
    }
    PrintPieceTimings("70% load, run " + std::to_string(i + 1) + " (batch mean " +
                          std::to_string(r.batch_mean) + ")",
                      std::move(pieces));
    std::printf("  70%% load, run %d: p99 %.0f us (%.0f with the warm-up); tail: %s; the "
                "producers' lateness p99 %.1f us; p99s: queue %.0f us, executor %.0f, the "
                "scheduler's latency %.0f (histogram estimates)\n", i + 1, r.p99_us,
                r.p99_with_warmup_us, tools::DescribeLateClusters(r.late).c_str(),
                r.submit_late_p99_us, r.queue_delay_p99_us, r.executor_p99_us,
                r.scheduler_latency_p99_us);
    if (!r.passes.empty()) std::printf("  70%% load, run %d, batching thread: %s\n", i + 1,
                                       r.passes.c_str());
    std::printf("  70%% load, run %d, host canary: %s; %.0f us of it in the largest cluster; "
                "CPU stolen by the hypervisor %.0f ms\n",
                i + 1, r.canary.c_str(), r.canary_in_largest_cluster_us, r.stolen_cpu_ms);
    std::printf("  70%% load, run %d, threads waiting for a CPU: %s; memory: %s\n", i + 1,
                r.thread_waits_text.c_str(), r.vm_counters_text.c_str());
    std::printf("  70%% load, run %d, start: %s; the first %lld ms (%lld requests, latency max "
                "%.0f us) are a warm-up\n", i + 1, r.start.c_str(),
                static_cast<long long>(kSaturationWarmup.count()),
                static_cast<long long>(r.warmup_requests), r.warmup_max_us);
    pooled.insert(pooled.end(), r.latencies_ns.begin(), r.latencies_ns.end());
    if (!r.host_disturbed) {
      pooled_undisturbed.insert(pooled_undisturbed.end(), r.latencies_ns.begin(),
                                r.latencies_ns.end());
    }
    pooled_with_warmup.insert(pooled_with_warmup.end(), r.latencies_with_warmup_ns.begin(),
                              r.latencies_with_warmup_ns.end());
    r.latencies_ns = {};
    r.latencies_with_warmup_ns = {};
    loaded_runs.push_back(std::move(r));
  }
  std::sort(pooled.begin(), pooled.end());
  std::sort(pooled_with_warmup.begin(), pooled_with_warmup.end());
  std::int64_t loaded_rejected = 0;
  double loaded_submitted = 0;
  for (const tools::OpenLoopResult& r : loaded_runs) {
    loaded_rejected += r.rejected;
    loaded_submitted += r.submitted_per_s / static_cast<double>(loaded_runs.size());
  }
  const double pooled_p99_us = tools::PercentileOfSorted(pooled, 0.99) * 1e-3;
  const double pooled_p99_with_warmup_us =
      tools::PercentileOfSorted(pooled_with_warmup, 0.99) * 1e-3;
  std::vector<double> run_p99s, run_executor_p50s;
  for (const tools::OpenLoopResult& r : loaded_runs) {
    run_p99s.push_back(r.p99_us);
    run_executor_p50s.push_back(r.executor_p50_us);
  }
  Saturation s;
  s.capacity = cap->throughput_per_s;
  s.step_us = cap->step_us;
  s.ratio = sat.throughput_per_s / cap->throughput_per_s;
  s.gpu_capacity = capacity_gpu_us > 0 ? batch * 1e6 / capacity_gpu_us : 0;
  s.gpu_ratio = s.gpu_capacity > 0 ? sat.throughput_per_s / s.gpu_capacity : 0;
  // Shedding at 70% fails the bound.
  s.p99_70_us = loaded_rejected > 0 ? 1e9 : pooled_p99_us;
  s.p99_70_with_warmup_us = loaded_rejected > 0 ? 1e9 : pooled_p99_with_warmup_us;
  s.p99_70_runs_us = run_p99s;
  std::int64_t undisturbed_rejected = 0;
  for (const tools::OpenLoopResult& r : loaded_runs) {
    s.canary_late_ms_70_runs.push_back(r.canary_late_ms);
    s.longest_thread_wait_ms_70_runs.push_back(r.longest_thread_wait_ms);
    s.cpu_stolen_ms_70_runs.push_back(r.stolen_cpu_ms);
    if (!r.host_disturbed) {
      ++s.undisturbed_70_runs;
      undisturbed_rejected += r.rejected;
    }
  }
  if (s.undisturbed_70_runs > 0) {
    std::sort(pooled_undisturbed.begin(), pooled_undisturbed.end());
    s.p99_70_undisturbed_us =
        undisturbed_rejected > 0 ? 1e9 : tools::PercentileOfSorted(pooled_undisturbed, 0.99) * 1e-3;
  }
  s.bound_us = bound_us;
  s.submitted_1_5x = sat.submitted_per_s;
  s.producers = producers;
  if (!s.overloaded()) {
    std::printf("  NOT OVERLOADED: the producers submitted %.0f req/s, under the capacity: the "
                "ratio below measures them (more --producers)\n", s.submitted_1_5x);
  }
  std::printf("  1.5x offered: %.0f req/s scheduled, %.0f submitted (%.0f shed); 70%%: %.0f "
              "scheduled, %.0f submitted (%.0f shed)\n", 1.5 * s.capacity, sat.submitted_per_s,
              static_cast<double>(sat.rejected), 0.7 * s.capacity, loaded_submitted,
              static_cast<double>(loaded_rejected));
  std::printf("saturation B=%d T=%d%s: capacity %.0f req/s (step %.1f us), 1.5x offered -> %.0f req/s = "
              "%.3f x (of batch / piece event time %.0f req/s: %.3f x); 70%% load p99 %.0f us "
              "(%d runs pooled: %s; %.0f with their warm-ups; executor p50 %.0f, the runs' median) "
              "vs bound %.0f us\n",
              batch, context, variation.Name().c_str(), s.capacity, s.step_us,
              sat.throughput_per_s, s.ratio, s.gpu_capacity, s.gpu_ratio, s.p99_70_us,
              static_cast<int>(loaded_runs.size()), JoinNumbers(run_p99s, "%.0f").c_str(),
              s.p99_70_with_warmup_us,
              tools::Median(run_executor_p50s), s.bound_us);
  if (s.undisturbed_70_runs < static_cast<int>(loaded_runs.size())) {
    std::printf("  70%% load: the host disturbed %d of %d runs (canary late >= %.0f ms or CPU "
                "stolen >= %.0f%% of a run); the others pooled: %s\n",
                static_cast<int>(loaded_runs.size()) - s.undisturbed_70_runs,
                static_cast<int>(loaded_runs.size()),
                tools::kDisturbingCanaryLateMs, 100 * tools::kDisturbingStolenFraction,
                s.undisturbed_70_runs > 0
                    ? ("p99 " + std::to_string(static_cast<long long>(s.p99_70_undisturbed_us)) +
                       " us vs bound " + std::to_string(static_cast<long long>(s.bound_us)) + " us")
                          .c_str()
                    : "none");
  }
  return s;
}

// The summary's keys for the saturation rows at the long context (`context` 0: not measured,
// every value null).
// p99_70_undisturbed_us for the summary: null when every run was disturbed.
std::string UndisturbedP99Json(const Saturation& s) {
  if (s.undisturbed_70_runs == 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s.p99_70_undisturbed_us);
  return b;
}

std::string LongSaturationJson(int context, const Saturation& b32, const Saturation& b128) {
  auto number = [&](double v, const char* format) {
    if (context == 0) return std::string("null");
    char buf[64];
    std::snprintf(buf, sizeof(buf), format, v);
    return std::string(buf);
  };
  auto flag = [&](bool v) {
    return context == 0 ? std::string("null") : std::string(v ? "true" : "false");
  };
  std::string json = " \"long_context\": " + number(context, "%.0f");
  for (const auto& [name, s] : {std::pair<const char*, const Saturation&>{"b32", b32},
                                {"b128", b128}}) {
    const std::string key = std::string(name) + "_long";
    json += ",\n \"saturation_" + key + "\": " + number(s.ratio, "%.3f") +
            ", \"p99_70_" + key + "_us\": " + number(s.p99_70_us, "%.1f") +
            ", \"p99_70_with_warmup_" + key + "_us\": " + number(s.p99_70_with_warmup_us, "%.1f") +
            ", \"p99_70_runs_" + key + "_us\": " +
            (context == 0 ? std::string("null")
                          : "[" + JoinNumbers(s.p99_70_runs_us, "%.1f", ", ") + "]") +
            ", \"canary_late_ms_70_runs_" + key + "\": " +
            (context == 0 ? std::string("null")
                          : "[" + JoinNumbers(s.canary_late_ms_70_runs, "%.2f", ", ") + "]") +
            ", \"cpu_stolen_ms_70_runs_" + key + "\": " +
            (context == 0 ? std::string("null")
                          : "[" + JoinNumbers(s.cpu_stolen_ms_70_runs, "%.0f", ", ") + "]") +
            ", \"p99_70_undisturbed_" + key + "_us\": " +
            (context == 0 ? std::string("null") : UndisturbedP99Json(s)) +
            ", \"undisturbed_70_runs_" + key + "\": " +
            (context == 0 ? std::string("null") : std::to_string(s.undisturbed_70_runs)) +
            ", \"bound_" + key + "_us\": " + number(s.bound_us, "%.1f") +
            ", \"capacity_" + key + "\": " + number(s.capacity, "%.0f") +
            ", \"submitted_1_5x_" + key + "\": " + number(s.submitted_1_5x, "%.0f") +
            ", \"overloaded_" + key + "\": " + flag(s.overloaded());
  }
  return json;
}

int Run(const Options& o) {
  int device = 0;
  cudaDeviceProp prop{};
  Check(cudaGetDevice(&device), "cudaGetDevice");
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const int iters = o.quick ? 300 : o.iterations;
  const double dur = o.quick ? 0.2 : o.duration_s;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured (a long run shows progress)

  if (!o.out_dir.empty()) {
    // Before the minutes of measuring: a record that cannot be written fails now.
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec) Die("--out " + o.out_dir + ": cannot create the directory: " + ec.message());
  }
  std::printf("device: %s\n", prop.name);
  const Clock::time_point start = Clock::now();
  auto section = [&](const char* what) {
    std::printf("[%.0f s] %s\n", std::chrono::duration<double>(Clock::now() - start).count(),
                what);
  };
  std::vector<std::pair<int, LatencyUs>> floors;
  LatencyUs floor1, floor_decode, floor_decode_kernel_copies, graph, eager, decode, decode_eager,
      executor1, executor_run, callback1, short_poll;
  if (o.b1) {
    section("floors and B=1 rows");
    std::printf("%-34s %10s %10s %8s\n", "row", "p50 us", "p99 us", "p50/floor");
    for (int b : {1, 32, 128}) {
      floors.emplace_back(b, MeasureFloor(b, iters));
      std::printf("%-34s %10.2f %10.2f %8s\n", ("floor B=" + std::to_string(b)).c_str(),
                  floors.back().second.p50, floors.back().second.p99, "1.00");
    }
    floor1 = floors[0].second;
    for (const auto& [await, name] : {std::pair{Await::kEventSync, "  floor B=1, event sync"},
                                      std::pair{Await::kEventQuery, "  floor B=1, event query"},
                                      std::pair{Await::kOtherThreadSpins,
                                                "  floor B=1, other thread (spins)"},
                                      std::pair{Await::kOtherThreadWoken,
                                                "  floor B=1, other thread (woken)"}}) {
      const LatencyUs l = MeasureFloor(1, iters, false, await);
      std::printf("%-34s %10.2f %10.2f %8.2f\n", name, l.p50, l.p99, l.p50 / floor1.p50);
    }
    floor_decode = MeasureFloorWithDecode(iters);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "floor B=1 with the decode step",
                floor_decode.p50, floor_decode.p99, floor_decode.p50 / floor1.p50);
    floor_decode_kernel_copies = MeasureFloorWithDecode(iters, {.io = StepIo::kCopyKernels});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "floor B=1 with the step, copy kernels",
                floor_decode_kernel_copies.p50, floor_decode_kernel_copies.p99,
                floor_decode_kernel_copies.p50 / floor1.p50);
    // What the executor's B=1 graph and wait add to that step: the compute-order event nodes
    // (all but the solo graph have them) and a `done` event recorded and awaited.
    for (const auto& [order, await, name] :
         {std::tuple{true, Await::kStreamSync, "  step, copy kernels, order nodes"},
          std::tuple{false, Await::kEventSync, "  step, copy kernels, done event"},
          std::tuple{true, Await::kEventSync, "  step, copy kernels, both"}}) {
      const LatencyUs l = MeasureFloorWithDecode(
          iters, {.io = StepIo::kCopyKernels, .order_events = order, .await = await});
      std::printf("%-34s %10.2f %10.2f %8.2f\n", name, l.p50, l.p99, l.p50 / floor1.p50);
    }
    // The step's own span on the GPU (timing events around the replay, as the executor's timed
    // pieces have), alone and with the host writing its inputs and reading its outputs between
    // replays, as the executor's pack and copy-out do (a plan for the executor's max_context of
    // 1024 instead of 512 changed nothing: 2026-11-27_h100_pdl-edges, r3).
    for (const auto& [host, name] :
         {std::pair{HostTraffic::kNone, "  step, timed"},
          std::pair{HostTraffic::kWriteInReadOut, "  step, timed, host writes/reads"},
          std::pair{HostTraffic::kWriteCombinedIn, "  step, timed, h/w, in write-comb."}}) {
      const LatencyUs l = MeasureFloorWithDecode(
          iters, {.io = StepIo::kCopyKernels, .await = Await::kTimedEvents, .host = host});
      std::printf("%-34s %10.2f %10.2f %8.2f  gpu %.2f us\n", name, l.p50, l.p99,
                  l.p50 / floor1.p50, l.gpu_p50);
    }
    for (const auto& [io, name] : {std::pair{StepIo::kZeroCopyData, "  step, zero-copy q/k/v/out"},
                                   std::pair{StepIo::kZeroCopy, "  step, zero-copy everything"}}) {
      const LatencyUs l = MeasureFloorWithDecode(iters, {.io = io});
      std::printf("%-34s %10.2f %10.2f %8.2f\n", name, l.p50, l.p99, l.p50 / floor1.p50);
    }
    const LatencyUs zero_copy_floor = MeasureFloor(1, iters, /*kernel_copies=*/true);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "floor B=1, zero-copy kernels", zero_copy_floor.p50,
                zero_copy_floor.p99, zero_copy_floor.p50 / floor1.p50);
    graph = MeasureB1(true, iters);
    eager = MeasureB1(false, iters);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "runtime B=1 graph (Submit->result)", graph.p50,
                graph.p99, graph.p50 / floor1.p50);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "runtime B=1 eager (Submit->result)", eager.p50,
                eager.p99, eager.p50 / floor1.p50);
    decode = MeasureB1(true, iters, B1Call::kDecode);
    decode_eager = MeasureB1(false, iters, B1Call::kDecode);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "runtime B=1 graph (Decode)", decode.p50,
                decode.p99, decode.p50 / floor1.p50);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "runtime B=1 eager (Decode)", decode_eager.p50,
                decode_eager.p99, decode_eager.p50 / floor1.p50);
    // The output into the caller's buffer (DecodeRequest::out): no result vector allocated and
    // zeroed per call.
    const LatencyUs decode_out = MeasureB1(true, iters, B1Call::kDecodeOut);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  Decode into the caller's out", decode_out.p50,
                decode_out.p99, decode_out.p50 / floor1.p50);
    executor1 = MeasureExecutorB1(iters);
    executor_run = MeasureExecutorB1(iters, {.run = true});
    callback1 = MeasureB1(true, iters, B1Call::kCallbackSpin);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  of it: executor (caller spins)", executor1.p50,
                executor1.p99, executor1.p50 / floor1.p50);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  of Decode: executor Run", executor_run.p50,
                executor_run.p99, executor_run.p50 / floor1.p50);
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  of it: runtime, callback (spins)",
                callback1.p50, callback1.p99, callback1.p50 / floor1.p50);
    const LatencyUs executor_memcpy = MeasureExecutorB1(iters, {.memcpy_nodes = true});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  A/B: executor, memcpy nodes", executor_memcpy.p50,
                executor_memcpy.p99, executor_memcpy.p50 / floor1.p50);
    const LatencyUs executor_zero_copy = MeasureExecutorB1(iters, {.zero_copy = true});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  executor, zero-copy request", executor_zero_copy.p50,
                executor_zero_copy.p99, executor_zero_copy.p50 / floor1.p50);
    const LatencyUs executor_timed = MeasureExecutorB1(iters, {.timed = true});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  executor, timed pieces", executor_timed.p50,
                executor_timed.p99, executor_timed.p50 / floor1.p50);
    // Where Run's time goes (its pieces' plan, pack, launch, wait and copy-out medians; the
    // rest of the row is bookkeeping around them).
    const LatencyUs run_timed = MeasureExecutorB1(iters, {.timed = true, .run = true});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  executor Run, timed pieces", run_timed.p50,
                run_timed.p99, run_timed.p50 / floor1.p50);
    short_poll =
        MeasureB1(true, iters, B1Call::kFuture,
                  Variation{.result_spin = std::chrono::microseconds(4)});
    std::printf("%-34s %10.2f %10.2f %8.2f\n", "  A/B: graph, result_spin 4 us", short_poll.p50,
                short_poll.p99, short_poll.p50 / floor1.p50);
    std::printf("  B=1 graph p50 over the floor with the decode step: %.2f (copy kernels: %.2f)\n",
                graph.p50 / floor_decode.p50, graph.p50 / floor_decode_kernel_copies.p50);
  }
  HostCpu host, host_spun, host_device;
  if (o.host) {
    section("host CPU at B=128 (host-memory requests)");
    host = MeasureHostCpu(dur);
    std::printf("host cpu per request at B=128: runtime %.3f us (in Submit %.3f), whole process "
                "%.3f us\n", host.runtime_us, host.submit_us, host.process_us);
    section("host CPU at B=128, steps spin-waited (A/B)");
    host_spun = MeasureHostCpu(dur, false, Variation{.sleep_through_steps = false});
    std::printf("host cpu per request at B=128, steps spin-waited (A/B): runtime %.3f us (in "
                "Submit %.3f), whole process %.3f us\n", host_spun.runtime_us,
                host_spun.submit_us, host_spun.process_us);
    section("host CPU at B=128 (device-memory requests)");
    host_device = MeasureHostCpu(dur, /*device_inputs=*/true);
    std::printf("host cpu per request at B=128, device-memory requests: runtime %.3f us (in "
                "Submit %.3f), whole process %.3f us\n", host_device.runtime_us,
                host_device.submit_us, host_device.process_us);
  }
  if (o.saturation_ab) {
    for (int round = 0; round < 2; ++round) {
      for (int batch : {32, 128}) {
        for (bool sleep : {true, false}) {
          section(("saturation A/B, round " + std::to_string(round + 1)).c_str());
          (void)MeasureSaturation(
              batch, kContext, dur, ForSaturation(o, {.sleep_through_steps = sleep}));
        }
      }
    }
  }
  if (o.lone_ab) {
    // A lone device-memory piece at max batch 128 (the 70%-load runs' pieces), a lone
    // host-memory piece, and each side of the device-memory piece alone: its PCIe I/O
    // (metadata, gather, scatter: compute off) and its compute (a host-memory piece with its
    // copies off). Twice, alternating.
    section("lone piece at B=128 through Executor::Run");
    using runtime::CudaExecutor;
    const int n = o.quick ? 100 : 400;
    for (int round = 0; round < 2; ++round) {
      for (int b : {1, 32}) {
        const LonePiece small = MeasureLonePiece(b, true, n);
        std::printf("lone staged piece B=%-3d                   Run p50 %7.1f us, gpu p50 %7.1f "
                    "us; %s\n", b, small.run_us, small.gpu_us, small.Host().c_str());
      }
      const LonePiece staged = MeasureLonePiece(128, true, n);
      std::printf("lone staged piece B=128:                  Run p50 %7.1f us, gpu p50 %7.1f "
                  "us; %s\n", staged.run_us, staged.gpu_us, staged.Host().c_str());
      const LonePiece h = MeasureLonePiece(128, false, n);
      std::printf("lone host-memory piece B=128:             Run p50 %7.1f us, gpu p50 %7.1f "
                  "us; %s\n", h.run_us, h.gpu_us, h.Host().c_str());
      const LonePiece io = MeasureLonePiece(128, true, n, CudaExecutor::kStageCompute);
      std::printf("lone staged piece B=128, compute off:     Run p50 %7.1f us, gpu p50 %7.1f "
                  "us; %s\n", io.run_us, io.gpu_us, io.Host().c_str());
      const LonePiece compute =
          MeasureLonePiece(128, false, n, CudaExecutor::kStageH2DInputs | CudaExecutor::kStageD2H);
      std::printf("lone host-memory piece B=128, copies off: Run p50 %7.1f us, gpu p50 %7.1f "
                  "us; %s\n", compute.run_us, compute.gpu_us, compute.Host().c_str());
    }
  }
  if (o.staging_ab) {
    // Where a host-memory request's q/k/v travel: staged once at Submit in mapped pinned
    // memory that the step gathers from, or packed by the batching thread into the step's
    // staging. Alternating, twice.
    const Variation variants[] = {
        ForSaturation(o, {.stage_in_mapped_memory = true}),
        ForSaturation(o, {.stage_in_mapped_memory = false})};
    for (int round = 0; round < 2; ++round) {
      for (const Variation& v : variants) {
        section(("staging A/B, B=1, round " + std::to_string(round + 1) + v.Name()).c_str());
        const LatencyUs b1 = MeasureB1(true, iters, B1Call::kFuture, v);
        std::printf("%-34s %10.2f %10.2f\n", ("runtime B=1 graph" + v.Name()).c_str(), b1.p50,
                    b1.p99);
        const HostCpu h = MeasureHostCpu(dur, false, v);
        std::printf("host cpu per request at B=128%s: runtime %.3f us (in Submit %.3f), whole "
                    "process %.3f us\n", v.Name().c_str(), h.runtime_us, h.submit_us,
                    h.process_us);
      }
      for (int batch : {32, 128}) {
        for (const Variation& v : variants) {
          section(("staging A/B, saturation, round " + std::to_string(round + 1)).c_str());
          (void)MeasureSaturation(batch, kContext, dur, v);
        }
      }
    }
  }
  if (o.in_place_ab) {
    for (int batch : {32, 128}) {
      for (int gather_rows : {0, 1024}) {
        section("in-place A/B");
        (void)MeasureSaturation(batch, o.long_context, dur,
                                ForSaturation(o, {.busy_gather_max_rows = gather_rows}));
      }
    }
  }
  Saturation s32, s128, long32, long128;
  if (o.saturation) {
    section("saturation at max batch 32");
    s32 = MeasureSaturation(32, kContext, dur, ForSaturation(o, {}));
    section("saturation at max batch 128");
    s128 = MeasureSaturation(128, kContext, dur, ForSaturation(o, {}));
  }
  if (o.long_saturation) {
    const std::string t = " (T=" + std::to_string(o.long_context) + ")";
    section(("saturation at max batch 32" + t).c_str());
    long32 = MeasureSaturation(32, o.long_context, dur, ForSaturation(o, {}));
    section(("saturation at max batch 128" + t).c_str());
    long128 = MeasureSaturation(128, o.long_context, dur, ForSaturation(o, {}));
  }
  section("done");

  if (o.out_dir.empty()) return 0;
  if (!(o.b1 && o.host && o.saturation)) {
    std::printf("no summary: --sections left some out\n");
    return 0;
  }
  const std::string path = o.out_dir + "/summary.json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) Die("cannot write " + path);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f,
               "{\"device\": \"%s\", \"date\": \"%s\", \"commit\": \"%s\",\n"
               " \"shape\": \"H32 Hkv32 D128 T512 (b1, host); H32 Hkv8 D128 T512 (saturation; and long_context)\",\n"
               " \"floor_us\": %.2f, \"floor_p99_us\": %.2f, \"floor_b32_us\": %.2f, "
               "\"floor_b128_us\": %.2f, \"floor_with_decode_us\": %.2f, "
               "\"floor_with_decode_copy_kernels_us\": %.2f,\n"
               " \"b1_e2e_p50_us\": %.2f, \"b1_e2e_p99_us\": %.2f, \"b1_ratio\": %.3f, "
               "\"b1_p99_ratio\": %.3f,\n"
               " \"b1_eager_p50_us\": %.2f, \"b1_eager_p99_us\": %.2f,\n"
               " \"b1_decode_p50_us\": %.2f, \"b1_decode_p99_us\": %.2f, \"b1_decode_ratio\": %.3f, "
               "\"b1_decode_p99_ratio\": %.3f, \"b1_decode_eager_p50_us\": %.2f,\n"
               " \"b1_executor_p50_us\": %.2f, \"b1_executor_run_p50_us\": %.2f, "
               "\"b1_callback_spin_p50_us\": %.2f, "
               "\"b1_result_spin_4us_p50_us\": %.2f, \"b1_ratio_to_floor_with_decode\": %.3f,\n"
               " \"host_us_per_request_b128\": %.3f, \"host_submit_us_b128\": %.3f, "
               "\"host_process_us_b128\": %.3f,\n"
               " \"host_us_per_request_b128_steps_spun\": %.3f,\n"
               " \"host_us_per_request_b128_device_memory\": %.3f, "
               "\"host_submit_us_b128_device_memory\": %.3f,\n"
               " \"saturation_b32\": %.3f, \"saturation_b128\": %.3f,\n"
               " \"p99_70_b32_us\": %.1f, \"bound_b32_us\": %.1f, \"p99_70_b128_us\": %.1f, "
               "\"bound_b128_us\": %.1f,\n"
               " \"p99_70_warmup_ms\": %lld, \"p99_70_with_warmup_b32_us\": %.1f, "
               "\"p99_70_with_warmup_b128_us\": %.1f, \"saturation_batcher_spin_us\": %lld, "
               "\"saturation_part_size\": %d,\n"
               " \"p99_70_runs_b32_us\": [%s], \"p99_70_runs_b128_us\": [%s],\n"
               " \"canary_late_ms_70_runs_b32\": [%s], \"canary_late_ms_70_runs_b128\": [%s], "
               "\"longest_thread_wait_ms_70_runs_b32\": [%s], "
               "\"longest_thread_wait_ms_70_runs_b128\": [%s],\n"
               " \"cpu_stolen_ms_70_runs_b32\": [%s], \"cpu_stolen_ms_70_runs_b128\": [%s], "
               "\"p99_70_undisturbed_b32_us\": %s, \"undisturbed_70_runs_b32\": %d, "
               "\"p99_70_undisturbed_b128_us\": %s, \"undisturbed_70_runs_b128\": %d,\n "
               "\"canary_period_us\": %lld, \"canary_threshold_us\": %lld, "
               "\"saturation_tokens_per_sequence\": %d,\n"
               " \"capacity_b32\": %.0f, \"capacity_b128\": %.0f,\n"
               " \"saturation_gpu_b32\": %.3f, \"saturation_gpu_b128\": %.3f, "
               "\"gpu_capacity_b32\": %.0f, \"gpu_capacity_b128\": %.0f,\n"
               " \"saturation_piece_timings\": %s, \"saturation_completion_threads\": %d, "
               "\"saturation_mapped_staging\": \"%s\", \"saturation_requests\": \"%s\", "
               "\"saturation_producers_b32\": %d, \"saturation_producers_b128\": %d,\n"
               " \"submitted_1_5x_b32\": %.0f, \"submitted_1_5x_b128\": %.0f, "
               "\"overloaded_b32\": %s, \"overloaded_b128\": %s,\n%s}\n",
               prop.name, date, o.commit.c_str(), floor1.p50, floor1.p99, floors[1].second.p50,
               floors[2].second.p50, floor_decode.p50, floor_decode_kernel_copies.p50, graph.p50,
               graph.p99,
               graph.p50 / floor1.p50, graph.p99 / floor1.p50, eager.p50, eager.p99, decode.p50,
               decode.p99, decode.p50 / floor1.p50, decode.p99 / floor1.p50, decode_eager.p50,
               executor1.p50, executor_run.p50, callback1.p50, short_poll.p50, graph.p50 / floor_decode.p50,
               host.runtime_us, host.submit_us, host.process_us, host_spun.runtime_us,
               host_device.runtime_us,
               host_device.submit_us, s32.ratio, s128.ratio,
               s32.p99_70_us, s32.bound_us, s128.p99_70_us, s128.bound_us,
               static_cast<long long>(kSaturationWarmup.count()), s32.p99_70_with_warmup_us,
               s128.p99_70_with_warmup_us, static_cast<long long>(o.batcher_spin.count()), o.part_size,
               JoinNumbers(s32.p99_70_runs_us, "%.1f", ", ").c_str(),
               JoinNumbers(s128.p99_70_runs_us, "%.1f", ", ").c_str(),
               JoinNumbers(s32.canary_late_ms_70_runs, "%.2f", ", ").c_str(),
               JoinNumbers(s128.canary_late_ms_70_runs, "%.2f", ", ").c_str(),
               JoinNumbers(s32.longest_thread_wait_ms_70_runs, "%.2f", ", ").c_str(),
               JoinNumbers(s128.longest_thread_wait_ms_70_runs, "%.2f", ", ").c_str(),
               JoinNumbers(s32.cpu_stolen_ms_70_runs, "%.0f", ", ").c_str(),
               JoinNumbers(s128.cpu_stolen_ms_70_runs, "%.0f", ", ").c_str(),
               UndisturbedP99Json(s32).c_str(), s32.undisturbed_70_runs,
               UndisturbedP99Json(s128).c_str(), s128.undisturbed_70_runs,
               static_cast<long long>(tools::kCanaryPeriod.count()),
               static_cast<long long>(tools::kCanaryThreshold.count()), o.tokens_per_sequence,
               s32.capacity,
               s128.capacity,
               s32.gpu_ratio, s128.gpu_ratio, s32.gpu_capacity, s128.gpu_capacity,
               o.saturation_timings ? "true" : "false", o.completion_threads,
               StagingName(o.mapped_staging_bytes).c_str(),
               o.device_memory_requests ? "device-visible" : "host", s32.producers,
               s128.producers, s32.submitted_1_5x, s128.submitted_1_5x,
               s32.overloaded() ? "true" : "false", s128.overloaded() ? "true" : "false",
               LongSaturationJson(o.long_saturation ? o.long_context : 0, long32, long128)
                   .c_str());
  std::fclose(f);
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) {
  attnrt::bench::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "api_host_path_bench: %s needs a value (--help)\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::printf(
          "api_host_path_bench [--out DIR] [--commit SHA] [--iterations N] [--duration S] "
          "[--quick] [--sections LIST] [--long-context T] [--b1-only] [--saturation-ab] [--staging-ab] [--in-place-ab]\n"
          "  The host path's record (issue 11) on one GPU, in one process: the round-trip floor\n"
          "  (graph of H2D q/k/v, a trivial kernel, D2H out), the Runtime's B=1 latency against\n"
          "  it (graph and eager), host CPU per request at B=128, and the scheduler's saturation\n"
          "  and 70%%-load p99 at max batch 32 and 128. Writes DIR/summary.json.\n"
          "  --out DIR        write DIR/summary.json, creating DIR (default: print only)\n"
          "  --commit SHA     recorded in the summary\n"
          "  --iterations N   latency samples per row (default 2000)\n"
          "  --duration S     seconds per load run (default 0.5)\n"
          "  --quick          300 samples, 0.2 s runs\n"
          "  --sections LIST  comma-separated, of b1 (floors and B=1 rows), host (host CPU at\n"
          "                   B=128), saturation (max batch 32 and 128, T=512), long (the same\n"
          "                   at T=--long-context); default all (the summary is written only\n"
          "                   with the first three; long's keys are null without it); none:\n"
          "                   only the A/B sections asked for\n"
          "  --long-context T the long section's prefilled tokens per sequence (default 4096)\n"
          "  --b1-only        --sections b1\n"
          "  --saturation-ab  also: saturation at max batch 32 and 128 with steps slept through\n"
          "                   and spin-waited, alternating, twice (sleep_through_steps A/B)\n"
          "  --staging-ab     also: B=1, host CPU at B=128 and saturation with q/k/v staged in\n"
          "                   mapped memory at Submit or packed into the step's staging\n"
          "                   (stage_in_mapped_memory on / off), alternating, twice\n"
          "  --lone-ab        also: a lone piece of 128 staged requests through Executor::Run, a\n"
          "                   lone host-memory piece, and each side of the staged one alone\n"
          "                   (compute off; copies off), twice\n"
          "  --in-place-ab    also: saturation at max batch 32 and 128 (T=--long-context) with\n"
          "                   staged pieces read and written in place always, and only when\n"
          "                   the GPU is idle (CudaExecutorOptions::busy_gather_max_rows 0 and\n"
          "                   1024 at busy_gather_min_kv_length 0)\n"
          "  --untimed-saturation  the saturation executors record no per-piece timings (no\n"
          "                   breakdown lines; the launch path as a Runtime runs it)\n"
          "  --pack-threads N the saturation executors' pack helper threads (default -1: auto)\n"
          "  --buffers N      the saturation executors' pipeline buffers (batches in flight;\n"
          "                   default: CudaExecutorOptions::num_buffers)\n"
          "  --mapped-staging-mb N  the saturation schedulers' mapped_staging_bytes in MiB\n"
          "                   (default: auto, the queue's and the working set's records; 0: the\n"
          "                   working set's only)\n"
          "  --completion-threads N  the saturation schedulers' completion_threads (default 2)\n"
          "  --batcher-spin-us N  the saturation schedulers' batcher_spin (default -1: auto)\n"
          "  --part-size N    the saturation schedulers' part_size (default -1: auto; 0: whole\n"
          "                   batches only)\n"
          "  --pass-trace     the saturation schedulers keep the batching thread's passes\n"
          "                   (SchedulerOptions::pass_trace); each 70%%-load run prints them\n"
          "                   around its largest cluster of late requests\n"
          "  --piece-log DIR  write each 70%%-load run's pieces (launch time, every stage) as\n"
          "                   DIR/b<max batch>_t<context>_run<i>.csv\n"
          "  --tokens-per-sequence G  the saturation runs' requests go to forks of the reset\n"
          "                   sequences, a new generation every G rounds, so each attends over\n"
          "                   T..T+G-1 tokens; 0 (default): the sequences themselves, which\n"
          "                   grow a token a round (at T=512, by 290-520 tokens a 0.5 s run)\n"
          "  --producers N    the saturation open loops' submitting threads (default: 4 at max\n"
          "                   batch 32, 8 at 128)\n"
          "  --device-memory-saturation  the saturation open loops submit requests whose q/k/v\n"
          "                   and output lie in the executor's mapped staging memory, as\n"
          "                   TensorMemory::kDevice (nothing copied at Submit or delivery)\n");
      return 0;
    } else if (a == "--out") {
      o.out_dir = value("--out");
    } else if (a == "--commit") {
      o.commit = value("--commit");
    } else if (a == "--iterations") {
      o.iterations = std::atoi(value("--iterations").c_str());
    } else if (a == "--duration") {
      o.duration_s = std::atof(value("--duration").c_str());
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--b1-only") {
      o.b1 = true;
      o.host = o.saturation = o.long_saturation = false;
    } else if (a == "--long-context") {
      o.long_context = std::atoi(value("--long-context").c_str());
      if (o.long_context < 64 || o.long_context > 65536) {
        std::fprintf(stderr, "api_host_path_bench: --long-context must be 64..65536\n");
        return 2;
      }
    } else if (a == "--untimed-saturation") {
      o.saturation_timings = false;
    } else if (a == "--pack-threads") {
      o.pack_threads = std::atoi(value("--pack-threads").c_str());
    } else if (a == "--buffers") {
      o.buffers = std::atoi(value("--buffers").c_str());
    } else if (a == "--mapped-staging-mb") {
      const long long mb = std::atoll(value("--mapped-staging-mb").c_str());
      if (mb < 0) {
        std::fprintf(stderr, "api_host_path_bench: --mapped-staging-mb must be >= 0\n");
        return 2;
      }
      o.mapped_staging_bytes = static_cast<std::int64_t>(mb) << 20;
    } else if (a == "--completion-threads") {
      o.completion_threads = std::atoi(value("--completion-threads").c_str());
      if (o.completion_threads < 1 || o.completion_threads > 64) {
        std::fprintf(stderr, "api_host_path_bench: --completion-threads must be 1..64\n");
        return 2;
      }
    } else if (a == "--pass-trace") {
      o.pass_trace = true;
    } else if (a == "--piece-log") {
      o.piece_log_dir = value("--piece-log");
      std::error_code ec;
      std::filesystem::create_directories(o.piece_log_dir, ec);
    } else if (a == "--tokens-per-sequence") {
      o.tokens_per_sequence = std::atoi(value("--tokens-per-sequence").c_str());
      if (o.tokens_per_sequence < 0 || o.tokens_per_sequence > 4096) {
        std::fprintf(stderr, "api_host_path_bench: --tokens-per-sequence must be 0..4096\n");
        return 2;
      }
    } else if (a == "--batcher-spin-us") {
      const long long us = std::atoll(value("--batcher-spin-us").c_str());
      if (us < -1 || us > 1'000'000) {
        std::fprintf(stderr, "api_host_path_bench: --batcher-spin-us must be -1..1000000\n");
        return 2;
      }
      o.batcher_spin = std::chrono::microseconds(us);
    } else if (a == "--part-size") {
      o.part_size = std::atoi(value("--part-size").c_str());
      if (o.part_size < -1 || o.part_size > 1024) {
        std::fprintf(stderr, "api_host_path_bench: --part-size must be -1..1024\n");
        return 2;
      }
    } else if (a == "--producers") {
      o.producers = std::atoi(value("--producers").c_str());
      if (o.producers < 1 || o.producers > 64) {
        std::fprintf(stderr, "api_host_path_bench: --producers must be 1..64\n");
        return 2;
      }
    } else if (a == "--device-memory-saturation") {
      o.device_memory_requests = true;
    } else if (a == "--saturation-ab") {
      o.saturation_ab = true;
    } else if (a == "--in-place-ab") {
      o.in_place_ab = true;
    } else if (a == "--lone-ab") {
      o.lone_ab = true;
    } else if (a == "--staging-ab") {
      o.staging_ab = true;
    } else if (a == "--sections") {
      const std::string list = "," + value("--sections") + ",";
      o.b1 = list.find(",b1,") != std::string::npos;
      o.host = list.find(",host,") != std::string::npos;
      o.saturation = list.find(",saturation,") != std::string::npos;
      o.long_saturation = list.find(",long,") != std::string::npos;
      if (!(o.b1 || o.host || o.saturation || o.long_saturation) && list != ",none,") {
        std::fprintf(stderr, "api_host_path_bench: --sections names none of b1, host, "
                             "saturation, long (or none: only the A/B sections)\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "api_host_path_bench: unknown argument '%s' (--help)\n", a.c_str());
      return 2;
    }
  }
  if (!(o.b1 || o.host || o.saturation || o.long_saturation || o.in_place_ab || o.saturation_ab || o.staging_ab || o.lone_ab)) {
    std::fprintf(stderr, "api_host_path_bench: nothing to run (--sections none without an A/B)\n");
    return 2;
  }
  if (o.iterations < 10 || !(o.duration_s > 0)) {
    std::fprintf(stderr, "api_host_path_bench: --iterations >= 10 and --duration > 0\n");
    return 2;
  }
  if (!attnrt::CudaDeviceAvailable()) {
    std::fprintf(stderr, "api_host_path_bench: no CUDA device; this benchmark needs a GPU\n");
    return 1;
  }
  return attnrt::bench::Run(o);
}
