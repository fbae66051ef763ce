// CPU reference for append-KV and paged decode attention: the plain two-pass softmax, FP32 or
// FP64 accumulation, over host pools in the KV contract layout (views.h), FP16 or FP8 E4M3
// (dequantised on read). Every GPU variant is checked against this; it favours obviousness over
// speed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "api/check.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/reference.h"

namespace attnrt::kernels {
namespace {

// Block id holding token t of batch row `batch_row`.
std::int32_t BlockOf(const DecodeBatchView& batch, int batch_row, int t, int block_size) {
  const std::int32_t block =
      batch.block_tables[static_cast<std::int64_t>(batch_row) * batch.max_blocks_per_seq +
                         t / block_size];
  return block;
}

// The two pool types, read the same way: Row() fills one token's D values of one kv head.
struct Fp16Pools {
  const KvPoolView& view;
  const KvPoolView& geometry() const { return view; }
  template <typename Acc>
  void Row(bool value, int layer, int block, int h, int offset, Acc* out) const {
    const Half* src = (value ? view.v : view.k) + view.TokenOffset(layer, block, h, offset);
    for (int j = 0; j < view.head_dim; ++j) out[j] = static_cast<Acc>(HalfToFloat(src[j]));
  }
};

struct Fp8Pools {
  const Fp8KvPoolView& view;
  const KvPoolView& geometry() const { return view.geometry; }
  template <typename Acc>
  void Row(bool value, int layer, int block, int h, int offset, Acc* out) const {
    const std::uint8_t* src =
        (value ? view.v : view.k) + view.geometry.TokenOffset(layer, block, h, offset);
    const float scale = view.scale(value, layer, h);
    for (int j = 0; j < view.geometry.head_dim; ++j) {
      out[j] = static_cast<Acc>(DequantizeE4M3(src[j], scale));
    }
  }
};

template <typename Acc, typename Pools>
void DecodeRow(const DecodeBatchView& batch, const Pools& source, int batch_row,
               float* out_f32) {
  const KvPoolView& pools = source.geometry();
  const int len = batch.kv_lengths[batch_row];
  const int layer = batch.layers[batch_row];
  const int h_q = batch.num_q_heads;
  const int h_kv = pools.num_kv_heads;
  const int d = pools.head_dim;
  const int bs = pools.block_size;
  const int group = h_q / h_kv;
  ATTNRT_DCHECK(len <= batch.max_blocks_per_seq * bs);
  ATTNRT_DCHECK(layer >= 0 && layer < pools.num_layers);

  std::vector<Acc> scores(len);
  std::vector<Acc> acc(d);
  std::vector<Acc> q(d);
  std::vector<Acc> kv_row(d);  // one token of K or V, as Acc
  for (int h = 0; h < h_q; ++h) {
    const int kv_head = h / group;
    const Half* q_row = batch.q + (static_cast<std::int64_t>(batch_row) * h_q + h) * d;
    for (int j = 0; j < d; ++j) q[j] = static_cast<Acc>(HalfToFloat(q_row[j]));

    // Pass 1: scaled scores and their max.
    Acc max_score = -INFINITY;
    for (int t = 0; t < len; ++t) {
      const std::int32_t block = BlockOf(batch, batch_row, t, bs);
      ATTNRT_DCHECK(block >= 0 && block < pools.num_blocks);
      source.Row(/*value=*/false, layer, block, kv_head, t % bs, kv_row.data());
      Acc dot = 0;
      for (int j = 0; j < d; ++j) dot += q[j] * kv_row[j];
      scores[t] = dot * static_cast<Acc>(batch.scale);
      max_score = std::max(max_score, scores[t]);
    }
    // Pass 2: exp-weights (shifted by the max so nothing overflows) and the weighted V sum.
    std::fill(acc.begin(), acc.end(), Acc{0});
    Acc sum = 0;
    for (int t = 0; t < len; ++t) {
      const Acc p = std::exp(scores[t] - max_score);
      sum += p;
      const std::int32_t block = BlockOf(batch, batch_row, t, bs);
      source.Row(/*value=*/true, layer, block, kv_head, t % bs, kv_row.data());
      for (int j = 0; j < d; ++j) acc[j] += p * kv_row[j];
    }
    const std::int64_t row = (static_cast<std::int64_t>(batch_row) * h_q + h) * d;
    for (int j = 0; j < d; ++j) {
      const float o = static_cast<float>(acc[j] / sum);
      batch.out[row + j] = FloatToHalf(o);
      if (out_f32 != nullptr) out_f32[row + j] = o;
    }
    if (batch.lse != nullptr) {
      batch.lse[static_cast<std::int64_t>(batch_row) * h_q + h] =
          static_cast<float>(max_score + std::log(sum));
    }
  }
}

// Calls store(layer, kv_head, dst_offset, src_offset) for each head of each live row's new token
// (offsets in elements: the pool's TokenOffset, and k_new/v_new's [row][Hkv][D]).
template <typename Store>
void ForEachNewRow(const DecodeBatchView& batch, const KvPoolView& pools, Store store) {
  const int d = pools.head_dim;
  const int bs = pools.block_size;
  for (int i = 0; i < batch.capacity; ++i) {
    const int len = batch.kv_lengths[i];
    if (len <= 0) continue;  // padding
    const int t = len - 1;
    const std::int32_t block = BlockOf(batch, i, t, bs);
    ATTNRT_DCHECK(block >= 0 && block < pools.num_blocks);
    for (int h = 0; h < pools.num_kv_heads; ++h) {
      const std::int64_t src = (static_cast<std::int64_t>(i) * pools.num_kv_heads + h) * d;
      store(batch.layers[i], h, pools.TokenOffset(batch.layers[i], block, h, t % bs), src);
    }
  }
}

template <typename Pools>
void Decode(const DecodeBatchView& batch, const Pools& source, ReferencePrecision precision,
            float* out_f32) {
  [[maybe_unused]] const KvPoolView& pools = source.geometry();
  ATTNRT_DCHECK(pools.num_kv_heads > 0 && batch.num_q_heads % pools.num_kv_heads == 0);
  for (int i = 0; i < batch.capacity; ++i) {
    if (batch.kv_lengths[i] <= 0) continue;  // padding: no read, no write
    if (precision == ReferencePrecision::kFloat64) {
      DecodeRow<double>(batch, source, i, out_f32);
    } else {
      DecodeRow<float>(batch, source, i, out_f32);
    }
  }
}

}  // namespace

void ReferenceAppendKv(const DecodeBatchView& batch, const KvPoolView& pools) {
  const int d = pools.head_dim;
  ForEachNewRow(batch, pools, [&](int, int, std::int64_t dst, std::int64_t src) {
    std::copy_n(batch.k_new + src, d, pools.k + dst);
    std::copy_n(batch.v_new + src, d, pools.v + dst);
  });
}

void ReferenceAppendKv(const DecodeBatchView& batch, const Fp8KvPoolView& pools) {
  const int d = pools.geometry.head_dim;
  ForEachNewRow(batch, pools.geometry, [&](int layer, int h, std::int64_t dst, std::int64_t src) {
    const float k_scale = pools.scale(false, layer, h);
    const float v_scale = pools.scale(true, layer, h);
    for (int j = 0; j < d; ++j) {
      pools.k[dst + j] = QuantizeE4M3(HalfToFloat(batch.k_new[src + j]), k_scale);
      pools.v[dst + j] = QuantizeE4M3(HalfToFloat(batch.v_new[src + j]), v_scale);
    }
  });
}

void ReferenceDecode(const DecodeBatchView& batch, const KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32) {
  Decode(batch, Fp16Pools{pools}, precision, out_f32);
}

void ReferenceDecode(const DecodeBatchView& batch, const Fp8KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32) {
  Decode(batch, Fp8Pools{pools}, precision, out_f32);
}

}  // namespace attnrt::kernels
