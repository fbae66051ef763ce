// CPU reference for append-KV and paged decode attention: the plain two-pass softmax, FP32 or
// FP64 accumulation, over host pools in the KV contract layout (views.h). Every GPU variant is
// checked against this; it favours obviousness over speed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "api/check.h"
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

template <typename Acc>
void DecodeRow(const DecodeBatchView& batch, const KvPoolView& pools, int batch_row,
               float* out_f32) {
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
  for (int h = 0; h < h_q; ++h) {
    const int kv_head = h / group;
    const Half* q_row = batch.q + (static_cast<std::int64_t>(batch_row) * h_q + h) * d;
    for (int j = 0; j < d; ++j) q[j] = static_cast<Acc>(HalfToFloat(q_row[j]));

    // Pass 1: scaled scores and their max.
    Acc max_score = -INFINITY;
    for (int t = 0; t < len; ++t) {
      const std::int32_t block = BlockOf(batch, batch_row, t, bs);
      ATTNRT_DCHECK(block >= 0 && block < pools.num_blocks);
      const Half* k = pools.k + pools.TokenOffset(layer, block, kv_head, t % bs);
      Acc dot = 0;
      for (int j = 0; j < d; ++j) dot += q[j] * static_cast<Acc>(HalfToFloat(k[j]));
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
      const Half* v = pools.v + pools.TokenOffset(layer, block, kv_head, t % bs);
      for (int j = 0; j < d; ++j) acc[j] += p * static_cast<Acc>(HalfToFloat(v[j]));
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

}  // namespace

void ReferenceAppendKv(const DecodeBatchView& batch, const KvPoolView& pools) {
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
      const std::int64_t dst = pools.TokenOffset(batch.layers[i], block, h, t % bs);
      std::copy_n(batch.k_new + src, d, pools.k + dst);
      std::copy_n(batch.v_new + src, d, pools.v + dst);
    }
  }
}

void ReferenceDecode(const DecodeBatchView& batch, const KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32) {
  ATTNRT_DCHECK(pools.num_kv_heads > 0 && batch.num_q_heads % pools.num_kv_heads == 0);
  for (int i = 0; i < batch.capacity; ++i) {
    if (batch.kv_lengths[i] <= 0) continue;  // padding: no read, no write
    if (precision == ReferencePrecision::kFloat64) {
      DecodeRow<double>(batch, pools, i, out_f32);
    } else {
      DecodeRow<float>(batch, pools, i, out_f32);
    }
  }
}

}  // namespace attnrt::kernels
