// Host builder of a random paged decode batch for tests and benchmarks: K/V pools with every
// layer, block tables made of shuffled block ids, per-row lengths and layers, q/k_new/v_new
// drawn from N(0,1), outputs poisoned. Header-only, no CUDA (a device mirror lives beside the
// GPU tests). Positions a kernel must never read (past each row's history, unused blocks, the
// new token's position before the append) are NaN, so a stray read shows up in the output.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include "kernels/views.h"
#include "tests/support/random_fp16.h"

namespace attnrt::testing {

// A decode shape from a case's numbers, in the order the kernel tests name them.
inline ModelShape DecodeShape(int num_q_heads, int num_kv_heads, int head_dim, int block_size,
                              int num_layers, int max_context) {
  ModelShape s;
  s.num_layers = num_layers;
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.block_size = block_size;
  s.max_context = max_context;
  return s;
}

struct PagedBatchOptions {
  std::uint64_t seed = 1;
  int capacity = 0;        // rows; 0 means lengths.size(). Rows past lengths are padding.
  int extra_blocks = 3;    // unused (poisoned) blocks in the pool beside the ones in use
  float q_scale = 1.0f;    // q ~ q_scale * N(0,1); 20 makes the softmax peaky
  bool random_layers = true;  // each row attends a random layer (else layer 0)
  // > 1: the pools are drawn by this many threads (FillNormalParallel; other numbers for a seed
  // than with 1). Long-context tests draw gigabytes of K/V.
  int fill_threads = 1;
};

// The kernel views of a batch over its arrays, one copy for the host batch below and its device
// mirror (tests/support/device_paged_batch.h): `b` has the geometry (shape, capacity, num_blocks,
// max_blocks_per_seq) and arrays whose data() is their first element.
template <typename Batch>
kernels::KvPoolView PoolViewOf(Batch& b) {
  kernels::KvPoolView p;
  p.k = b.k_pool.data();
  p.v = b.v_pool.data();
  p.num_layers = b.shape.num_layers;
  p.num_blocks = b.num_blocks;
  p.num_kv_heads = b.shape.num_kv_heads;
  p.block_size = b.shape.block_size;
  p.head_dim = b.shape.head_dim;
  return p;
}
template <typename Batch>
kernels::DecodeBatchView BatchViewOf(Batch& b) {
  kernels::DecodeBatchView v;
  v.capacity = b.capacity;
  v.num_q_heads = b.shape.num_q_heads;
  v.max_blocks_per_seq = b.max_blocks_per_seq;
  v.kv_lengths = b.kv_lengths.data();
  v.layers = b.layers.data();
  v.block_tables = b.block_tables.data();
  v.q = b.q.data();
  v.k_new = b.k_new.data();
  v.v_new = b.v_new.data();
  v.out = b.out.data();
  v.lse = b.lse.data();
  v.scale = b.shape.scale();
  return v;
}

// Owns host memory; pools() and view() are views into it (valid while the batch lives and is
// not resized).
struct PagedBatch {
  ModelShape shape;
  int capacity = 0;
  int num_blocks = 0;
  int max_blocks_per_seq = 0;
  std::vector<Half> k_pool, v_pool;          // [num_layers][num_blocks][Hkv][bs][D]
  std::vector<std::int32_t> kv_lengths;      // [capacity]; 0 = padding
  std::vector<std::int32_t> layers;          // [capacity]
  std::vector<std::int32_t> block_tables;    // [capacity][max_blocks_per_seq]; -1 unused
  std::vector<Half> q, k_new, v_new, out;    // [capacity][H or Hkv][D]
  std::vector<float> lse;                    // [capacity][H]

  kernels::KvPoolView pools() { return PoolViewOf(*this); }
  kernels::DecodeBatchView view() { return BatchViewOf(*this); }
  // Element offset of token t (kv head h) of a batch row in its layer's pool.
  std::int64_t TokenOffset(int batch_row, int t, int h) {
    const int block = block_tables[static_cast<std::size_t>(batch_row) * max_blocks_per_seq +
                                   t / shape.block_size];
    return pools().TokenOffset(layers[batch_row], block, h, t % shape.block_size);
  }
  bool live(int batch_row) const { return kv_lengths[batch_row] > 0; }
  std::int64_t live_kv_tokens() const {
    return std::accumulate(kv_lengths.begin(), kv_lengths.end(), std::int64_t{0});
  }
};

// Builds a batch for `lengths` (each >= 0; 0 = padding row). Every length must be
// <= shape.max_context.
inline PagedBatch MakePagedBatch(const ModelShape& shape, std::span<const int> lengths,
                                 const PagedBatchOptions& options = {}) {
  PagedBatch b;
  b.shape = shape;
  b.capacity = std::max<int>(options.capacity, static_cast<int>(lengths.size()));
  b.max_blocks_per_seq = shape.max_blocks_per_sequence();
  const int bs = shape.block_size;
  const int hkv = shape.num_kv_heads;
  const int d = shape.head_dim;
  const int h = shape.num_q_heads;
  NormalRng rng(options.seed);

  b.kv_lengths.assign(b.capacity, 0);
  b.layers.assign(b.capacity, 0);
  int blocks_used = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    b.kv_lengths[i] = lengths[i];
    blocks_used += (lengths[i] + bs - 1) / bs;
  }
  b.num_blocks = blocks_used + options.extra_blocks;
  for (int i = 0; i < b.capacity; ++i) {
    b.layers[i] = options.random_layers ? rng.NextInt(0, shape.num_layers - 1) : 0;
  }

  // Shuffled block ids (Fisher-Yates with our own generator, so a seed is portable).
  std::vector<std::int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  for (int i = b.num_blocks - 1; i > 0; --i) std::swap(ids[i], ids[rng.NextInt(0, i)]);
  b.block_tables.assign(static_cast<std::size_t>(b.capacity) * b.max_blocks_per_seq, -1);
  int next = 0;
  for (int i = 0; i < b.capacity; ++i) {
    const int nb = (b.kv_lengths[i] + bs - 1) / bs;
    for (int j = 0; j < nb; ++j) {
      b.block_tables[static_cast<std::size_t>(i) * b.max_blocks_per_seq + j] = ids[next++];
    }
  }

  // Pools: random everywhere (other layers' pages of a block hold real-looking data, so reading
  // the wrong layer gives a wrong answer), then NaN where the row's own layer must not be read.
  const std::size_t pool_elems = static_cast<std::size_t>(shape.num_layers) * b.num_blocks * hkv *
                                 bs * d;
  b.k_pool.resize(pool_elems);
  b.v_pool.resize(pool_elems);
  if (options.fill_threads > 1) {
    FillNormalParallel(b.k_pool, rng.NextU64(), options.fill_threads);
    FillNormalParallel(b.v_pool, rng.NextU64(), options.fill_threads);
  } else {
    FillNormal(b.k_pool, rng);
    FillNormal(b.v_pool, rng);
  }
  const kernels::KvPoolView pv = b.pools();
  for (int l = 0; l < shape.num_layers; ++l) {  // unused blocks
    for (int j = blocks_used; j < b.num_blocks; ++j) {
      const std::int64_t off = pv.TokenOffset(l, ids[j], 0, 0);
      std::fill_n(b.k_pool.begin() + off, pv.block_stride(), kHalfNaN);
      std::fill_n(b.v_pool.begin() + off, pv.block_stride(), kHalfNaN);
    }
  }
  for (int i = 0; i < b.capacity; ++i) {  // the new token's position and the rest of its block
    const int len = b.kv_lengths[i];
    if (len == 0) continue;
    for (int t = len - 1; t < (len + bs - 1) / bs * bs; ++t) {
      for (int hh = 0; hh < hkv; ++hh) {
        const std::int64_t off = b.TokenOffset(i, t, hh);
        std::fill_n(b.k_pool.begin() + off, d, kHalfNaN);
        std::fill_n(b.v_pool.begin() + off, d, kHalfNaN);
      }
    }
  }

  b.q.resize(static_cast<std::size_t>(b.capacity) * h * d);
  FillNormal(b.q, rng, options.q_scale);
  b.k_new.resize(static_cast<std::size_t>(b.capacity) * hkv * d);
  b.v_new.resize(b.k_new.size());
  FillNormal(b.k_new, rng);
  FillNormal(b.v_new, rng);
  b.out.resize(b.q.size());
  Poison(b.out);
  b.lse.resize(static_cast<std::size_t>(b.capacity) * h);
  Poison(b.lse);
  return b;
}

// Error of an FP16 output against an FP32/FP64 reference over the live rows.
struct OutputError {
  double max_abs = 0.0;
  double rel_l2 = 0.0;     // ||got - ref|| / ||ref||
  std::int64_t non_finite = 0;
};

inline OutputError CompareOutput(const PagedBatch& b, std::span<const Half> got,
                                 std::span<const float> ref) {
  OutputError e;
  double diff2 = 0.0, ref2 = 0.0;
  const std::size_t row = static_cast<std::size_t>(b.shape.num_q_heads) * b.shape.head_dim;
  for (int i = 0; i < b.capacity; ++i) {
    if (!b.live(i)) continue;
    for (std::size_t j = i * row; j < (i + 1) * row; ++j) {
      const double g = HalfToFloat(got[j]);
      if (!std::isfinite(g)) {
        ++e.non_finite;
        continue;
      }
      const double d = g - ref[j];
      e.max_abs = std::max(e.max_abs, std::abs(d));
      diff2 += d * d;
      ref2 += static_cast<double>(ref[j]) * ref[j];
    }
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return e;
}

// Largest |got - ref| of the LSE over live rows (infinity if any is not finite).
inline double MaxLseError(const PagedBatch& b, std::span<const float> got,
                          std::span<const float> ref) {
  double m = 0.0;
  const int h = b.shape.num_q_heads;
  for (int i = 0; i < b.capacity; ++i) {
    if (!b.live(i)) continue;
    for (int j = i * h; j < (i + 1) * h; ++j) {
      if (!std::isfinite(got[j])) return INFINITY;
      m = std::max(m, static_cast<double>(std::abs(got[j] - ref[j])));
    }
  }
  return m;
}

// True if every padded row's out and lse still hold the poison they were built with.
inline bool PaddedRowsUntouched(const PagedBatch& b, std::span<const Half> out,
                                std::span<const float> lse) {
  const std::size_t row = static_cast<std::size_t>(b.shape.num_q_heads) * b.shape.head_dim;
  const int h = b.shape.num_q_heads;
  for (int i = 0; i < b.capacity; ++i) {
    if (b.live(i)) continue;
    for (std::size_t j = i * row; j < (i + 1) * row; ++j) {
      if (!IsNaN(out[j])) return false;
    }
    for (int j = i * h; j < (i + 1) * h; ++j) {
      if (!std::isnan(lse[j])) return false;
    }
  }
  return true;
}

}  // namespace attnrt::testing
