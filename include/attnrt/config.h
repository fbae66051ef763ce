// Model shape and runtime configuration: the leaf types every component may include.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <attnrt/export.h>
#include <attnrt/status.h>

namespace attnrt {

// Names a sequence (its KV history over every layer) everywhere: the public API, the scheduler,
// the executors and the KV cache.
using SequenceId = std::uint64_t;

// How the KV cache stores K and V (ModelShape::kv_cache_type).
//
// kFp16: IEEE binary16, 2 bytes per element, stored exactly as given (the default).
// kFp8E4M3: OCP E4M3 ("E4M3FN", CUDA's __nv_fp8_e4m3), 1 byte per element: the same paged HND
//   layout (kvcache/kvcache.h), so a block holds the same tokens in half the bytes and a
//   kv_cache_bytes budget holds twice the blocks, hence twice the sequences.
//   Scaling rule: one FP32 scale per (layer, KV head), separate for K and V
//   (ModelShape::kv_scales). Append and prefill store code = E4M3(x / scale) (FP32 division,
//   round to nearest even, saturating: |x| past 448 * scale stores +-448 * scale); decode reads
//   code * scale in FP32. The default scale is 1.0 everywhere, which needs no calibration pass:
//   E4M3 spans +-448 down to 2^-9 (normals from 2^-6), which covers typical K/V, and its relative
//   precision (3 mantissa bits: a rounding error of at most 2^-4 of the value) does not depend
//   on the scale.
//   Calibrated scales (e.g. max|x| / 448 per head) matter only for K/V past +-448 or mostly
//   below 2^-6.
//   Accuracy: against the FP64 decode over the *dequantised* cache, FP8 decodes hold the FP16
//   tolerances (max |out - ref| <= 2e-3, relative L2 <= 1e-3). Against the FP64 decode over the
//   original FP16 K/V (CPU executor, default scales, H 8, Hkv 2, D 64/128/256, contexts of
//   1..1000 tokens, per-request error, 40 seeds x 4 requests per D; the FP16 cache in the same
//   runs, N(0,1) / outliers: max 8e-4 / 1.5e-2, relative L2 2.4e-4 / 3.8e-4):
//                                     max |out - ref|   relative L2 worst (mean)   test bound
//     N(0,1) q, k, v                  0.097             0.050 (0.038)              0.15 / 0.075
//     N(0,1), 1% of K and V channels  7.4               0.66  (0.10 - 0.15)        11 / 1.0
//       x20 (outputs there ~20)
//   The outlier case is the weak spot of any per-head scale: a channel 20x larger carries its
//   ~3% relative error into every score (q . k moves by up to ~0.5), and a softmax peaked by
//   that same channel turns it into large output changes. A scale cannot help (relative
//   precision is fixed); only finer-grained scaling could. tests/api/api_fp8_kv_cache_test.cc
//   holds the bounds (ATTNRT_FP8_ACCURACY_SEEDS=40 reruns the measurement).
//   With check_finite off, NaN K/V stay NaN and +-Inf saturate to +-448 * scale.
//   Both executors: the CPU one through its reference, the CUDA one through every kernel path
//   (split_kv, the default; split_kv_simt; simple); decode_path gemm refuses FP8 at Create.
enum class KvCacheType {
  kFp16,
  kFp8E4M3,
};

// "fp16" or "fp8_e4m3" (the spelling flags, the C API's docs and messages use).
ATTNRT_EXPORT std::string_view KvCacheTypeName(KvCacheType type);
// The inverse of KvCacheTypeName; false (and *type untouched) for any other string.
ATTNRT_EXPORT bool ParseKvCacheType(std::string_view name, KvCacheType* type);
// Bytes one stored K or V element takes: 2 (fp16) or 1 (fp8_e4m3).
ATTNRT_EXPORT int KvElementBytes(KvCacheType type);

// The attention shape of one model. H = G * Hkv (GQA group size G).
struct ATTNRT_EXPORT ModelShape {
  int num_layers = 1;
  int num_q_heads = 32;   // H
  int num_kv_heads = 32;  // Hkv; H % Hkv == 0
  int head_dim = 128;     // D: 64, 128 or 256
  int block_size = 16;    // tokens per KV page: 8, 16, 32 or 64
  int max_context = 4096; // longest sequence the cache admits, in tokens
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)
  KvCacheType kv_cache_type = KvCacheType::kFp16;
  // kFp8E4M3 only (see KvCacheType): empty means 1.0 for every (layer, KV head); otherwise
  // exactly 2 * num_layers * num_kv_heads finite scales > 0, K's first, then V's, each
  // layer-major: kv_scales[(kv * num_layers + layer) * num_kv_heads + kv_head] with kv = 0 for K,
  // 1 for V. Must be empty with kFp16.
  std::vector<float> kv_scales;

  int group_size() const { return num_q_heads / num_kv_heads; }
  float scale() const;
  // Blocks a sequence of max_context tokens needs.
  int max_blocks_per_sequence() const { return (max_context + block_size - 1) / block_size; }
  // K or V elements of one token of one layer (Hkv * D).
  std::int64_t kv_token_elems() const {
    return static_cast<std::int64_t>(num_kv_heads) * head_dim;
  }

  // Bytes of one stored K or V element (KvElementBytes(kv_cache_type)).
  int kv_element_bytes() const { return KvElementBytes(kv_cache_type); }
  // K + V bytes one token takes in the cache over every layer (the unit of capacity).
  std::int64_t kv_bytes_per_token() const {
    return 2 * static_cast<std::int64_t>(num_layers) * kv_token_elems() * kv_element_bytes();
  }
  // Index of the scale of (K or V, layer, kv_head) in kv_scales (and in the cache's scale array).
  int kv_scale_index(bool value, int layer, int kv_head) const {
    return ((value ? 1 : 0) * num_layers + layer) * num_kv_heads + kv_head;
  }

  // Rejects unsupported shapes with InvalidArgument naming the field and value.
  // Also the cache type and kv_scales (naming the bad entry, "ModelShape.kv_scales[5] = -1").
  Status Validate() const;
};

// The batching and queue defaults, in one place: RuntimeOptions and the scheduler's own options
// both start from these (exact semantics in scheduler/scheduler.h).
namespace defaults {
inline constexpr int kMaxBatchSize = 64;
inline constexpr int kMaxQueueDelayUs = 100;
inline constexpr int kMinBatchSize = 0;
// 8192: ~10 ms of queueing at the H100's B=32..128 capacity for H32 Hkv8 D128 (650-900 k
// requests/s); past it an overloaded runtime sheds at once (ResourceExhausted) instead of
// holding requests for longer than a decode step's latency budget.
inline constexpr int kMaxQueueSize = 8192;
inline constexpr std::int64_t kTimeoutUs = 10'000'000;  // 10 s; 0 would mean no deadline
inline constexpr int kNumPriorityLevels = 2;
// Non-finite q/k/v are rejected at Submit: a NaN or Inf in K/V would be stored in the cache and
// poison every later output of its sequence. The scan is vectorised and costs far less than the
// copy Submit makes anyway (bench/NOTES.md).
inline constexpr bool kCheckFinite = true;
inline constexpr int kCompletionThreads = 2;
// Pinned host memory the scheduler stages requests in when the executor offers it (the CUDA
// executor with RuntimeOptions::stage_in_mapped_memory). A backlog past it goes on the heap,
// whose pieces take the slower copy path: at 70% load a stall of the batching path then kept
// the runtime behind its load (H100, 2026-11-27: p99 0.28-1.5 ms with every piece staged,
// 12-246 ms with 26-99% of them on the heap), and under overload (a full queue) the runtime
// served 0.76-0.81 of the executor's capacity at max batch 32 instead of 0.95-0.99 with every
// record staged. The default, auto (kMappedStagingAuto): records for the whole queue and the
// working set, at most kMappedStagingAutoMaxBytes (at the defaults, H32 Hkv8 D128: ~9,000
// records, ~185 MB).
inline constexpr std::int64_t kMappedStagingAuto = -1;
inline constexpr std::int64_t kMappedStagingAutoMaxBytes = std::int64_t{512} << 20;
// The batching thread polls this long for new work before it blocks: a request arriving within
// it is taken without waking a sleeping thread (several microseconds saved on every step of a
// closed-loop decode). 0 = block at once (no idle CPU spent).
inline constexpr int kBatcherSpinUs = 100;
// batcher_spin's default, "auto": kBatcherSpinUs on a machine with at least
// kSpinMinHardwareThreads hardware threads, 0 below, where the polling thread would take the CPU
// from the producers and completion threads it waits for (2-core VM, 8 producers: 1.7-2.1 M
// requests/s end to end polling, 2.1-2.7 M not; bench/NOTES.md).
inline constexpr int kBatcherSpinAuto = -1;
// SchedulerOptions::part_size's default, "auto": the executor's preferred part size where a
// batch waits for a full bucket of at least two parts (scheduler/scheduler.h).
inline constexpr int kPartSizeAuto = -1;
inline constexpr unsigned kSpinMinHardwareThreads = 4;
// A thread waiting on a ResultFuture polls this long before it sleeps: a closed-loop caller at
// B=1 gets its result without a futex wake-up (~10 us of a ~50 us round trip on an H100 host).
// "auto" (the default): kResultSpinUs with at least kSpinMinHardwareThreads hardware threads,
// else kResultSpinShortUs; and at most one waiter in kHardwareThreadsPerResultSpinner polls the
// long way at once (the others poll kResultSpinShortUs), so a thousand waiting threads cannot
// take the cores the runtime's own threads need.
inline constexpr int kResultSpinUs = 200;
inline constexpr int kResultSpinShortUs = 4;
inline constexpr int kResultSpinAuto = -1;
inline constexpr unsigned kHardwareThreadsPerResultSpinner = 4;
}  // namespace defaults

}  // namespace attnrt
