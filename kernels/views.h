// Plain views shared by the host reference and the CUDA kernels: the paged KV pools and one
// decode batch. No CUDA header: host code (CPU executor, tests) builds these from host memory,
// the CUDA executor from device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include <attnrt/half.h>

namespace attnrt::kernels {

// K and V pools of every layer. Layout (the KV contract, kvcache/kvcache.h):
//   per layer: [num_blocks][num_kv_heads][block_size][head_dim] FP16 ("HND": one head's page is
//   contiguous, block_size*head_dim*2 bytes), layer l at k + l * layer_stride (same for v).
// An FP8 E4M3 cache (ModelShape::kv_cache_type, as the plan's shape says) has the same element
// offsets with one byte per element: k and v then point at E4M3 codes (read them through
// k_bytes()/v_bytes()), and `scales` at its [2][num_layers][num_kv_heads] FP32 scales
// (ModelShape::kv_scale_index), in the pools' memory. `scales` is null for FP16.
struct KvPoolView {
  Half* k = nullptr;
  Half* v = nullptr;
  const float* scales = nullptr;
  int num_layers = 0;
  int num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;

  std::int64_t block_stride() const {
    return static_cast<std::int64_t>(num_kv_heads) * block_size * head_dim;
  }
  std::int64_t layer_stride() const { return block_stride() * num_blocks; }
  // The pools as bytes (FP8 codes: element offsets are byte offsets).
  std::uint8_t* k_bytes() const { return reinterpret_cast<std::uint8_t*>(k); }
  std::uint8_t* v_bytes() const { return reinterpret_cast<std::uint8_t*>(v); }
  // Offset (elements) of token `offset` of head `h` in block `block` of layer `layer`.
  std::int64_t TokenOffset(int layer, int block, int h, int offset) const {
    return layer * layer_stride() + block * block_stride() +
           (static_cast<std::int64_t>(h) * block_size + offset) * head_dim;
  }
};

// One decode batch of `capacity` rows (the batch bucket; a CUDA grid is sized from it). Row i
// is one request: one new token of one sequence at one layer. A row with kv_lengths[i] == 0 is
// padding and is skipped by every kernel (no read, no write).
struct DecodeBatchView {
  int capacity = 0;
  int num_q_heads = 0;           // H (num_kv_heads and head_dim come from the pool view)
  int max_blocks_per_seq = 0;    // row stride of block_tables
  const std::int32_t* kv_lengths = nullptr;    // [capacity] tokens attended, incl. the new one
  const std::int32_t* layers = nullptr;        // [capacity]
  const std::int32_t* block_tables = nullptr;  // [capacity][max_blocks_per_seq]
  const Half* q = nullptr;      // [capacity][H][D]
  const Half* k_new = nullptr;  // [capacity][Hkv][D], written at position kv_lengths[i] - 1
  const Half* v_new = nullptr;  // [capacity][Hkv][D]
  Half* out = nullptr;          // [capacity][H][D]
  float* lse = nullptr;         // [capacity][H] natural-log LSE of the scaled scores; may be null
  float scale = 1.0f;           // softmax scale
  // Optional, all three or none: device arrays of `capacity` addresses. Row i's q is then read at
  // q_rows[i] and its out and LSE written at out_rows[i] and lse_rows[i] (0: no LSE) instead of
  // at row i of q/out/lse: requests in the caller's device-addressable memory (device memory, or
  // mapped pinned memory across PCIe) are read and written in place, with no gather or scatter
  // around the kernels. q and out 16-byte aligned. Only the split-KV variants read them
  // (DecodeVariant::reads_rows_in_place); the others refuse a view that sets them.
  const std::uint64_t* q_rows = nullptr;
  const std::uint64_t* out_rows = nullptr;
  const std::uint64_t* lse_rows = nullptr;
  // Optional, both or none, for every variant: row i's new K and V ([Hkv][D] each, 16-byte
  // aligned, device-addressable) read at k_rows[i] and v_rows[i] instead of at row i of
  // k_new/v_new; with q_rows, a step over requests in place needs no gather at all. Read only
  // where the new token is appended (kAppendAndDecode, LaunchAppendKv).
  const std::uint64_t* k_rows = nullptr;
  const std::uint64_t* v_rows = nullptr;
};

// Device scratch a decode plan asks for (DecodePlan::workspace_bytes: split-KV partials, the GEMM
// path's gathered K/V and scores). Allocated once per plan set, never in a run.
struct DecodeWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

}  // namespace attnrt::kernels
