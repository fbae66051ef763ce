// Model shape and runtime configuration: the leaf types every component may include.
#pragma once

#include <cstdint>

#include <attnrt/export.h>
#include <attnrt/status.h>

namespace attnrt {

// Names a sequence (its KV history over every layer) everywhere: the public API, the scheduler,
// the executors and the KV cache.
using SequenceId = std::uint64_t;

// The attention shape of one model. H = G * Hkv (GQA group size G).
struct ATTNRT_EXPORT ModelShape {
  int num_layers = 1;
  int num_q_heads = 32;   // H
  int num_kv_heads = 32;  // Hkv; H % Hkv == 0
  int head_dim = 128;     // D: 64, 128 or 256
  int block_size = 16;    // tokens per KV page: 8, 16, 32 or 64
  int max_context = 4096; // longest sequence the cache admits, in tokens
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)

  int group_size() const { return num_q_heads / num_kv_heads; }
  float scale() const;
  // Blocks a sequence of max_context tokens needs.
  int max_blocks_per_sequence() const { return (max_context + block_size - 1) / block_size; }
  // K or V elements of one token of one layer (Hkv * D).
  std::int64_t kv_token_elems() const {
    return static_cast<std::int64_t>(num_kv_heads) * head_dim;
  }

  // Rejects unsupported shapes with InvalidArgument naming the field and value.
  Status Validate() const;
};

// The batching and queue defaults, in one place: RuntimeOptions and the scheduler's own options
// both start from these (exact semantics in scheduler/scheduler.h).
namespace defaults {
inline constexpr int kMaxBatchSize = 64;
inline constexpr int kMaxQueueDelayUs = 100;
inline constexpr int kMinBatchSize = 0;
inline constexpr int kMaxQueueSize = 65536;
inline constexpr std::int64_t kTimeoutUs = 10'000'000;  // 10 s; 0 would mean no deadline
inline constexpr int kNumPriorityLevels = 2;
// Non-finite q/k/v are rejected at Submit: a NaN or Inf in K/V would be stored in the cache and
// poison every later output of its sequence. The scan is vectorised and costs far less than the
// copy Submit makes anyway (bench/NOTES.md).
inline constexpr bool kCheckFinite = true;
inline constexpr int kCompletionThreads = 2;
// The batching thread polls this long for new work before it blocks: a request arriving within
// it is taken without waking a sleeping thread (several microseconds saved on every step of a
// closed-loop decode). 0 = block at once (no idle CPU spent).
inline constexpr int kBatcherSpinUs = 100;
}  // namespace defaults

}  // namespace attnrt
