// The CPU reference (kernels/reference.cc) against hand-computed tiny cases and a naive dense
// attention built by gathering the paged layout with its own index arithmetic; FP8 E4M3 pools
// (append quantises, decode over the dequantised cache) likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/fp8_e4m3.h"
#include "kernels/reference.h"
#include "tests/support/paged_batch.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kernels {
namespace {

using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::PagedBatchOptions;

ModelShape Shape(int h, int hkv, int d, int bs, int layers = 1, int max_context = 4096) {
  return testing::DecodeShape(h, hkv, d, bs, layers, max_context);
}

void SetRow(Half* row, int d, float value) {
  for (int j = 0; j < d; ++j) row[j] = FloatToHalf(value);
}

// q = 8 e0 with scale 1/8 and D = 64: score_t = K_t[0]. K_0 = e0, K_1 = 0 -> scores (1, 0);
// V_0 = +1, V_1 = -1 -> out = (e - 1)/(e + 1) = tanh(1/2); lse = log(e + 1).
TEST(ReferenceDecodeTest, TwoTokensHandComputed) {
  const ModelShape shape = Shape(1, 1, 64, 16);
  const std::vector<int> lengths = {2};
  PagedBatch b = MakePagedBatch(shape, lengths);
  SetRow(b.q.data(), 64, 0.0f);
  b.q[0] = FloatToHalf(8.0f);
  SetRow(&b.k_pool[b.TokenOffset(0, 0, 0)], 64, 0.0f);
  b.k_pool[b.TokenOffset(0, 0, 0)] = FloatToHalf(1.0f);
  SetRow(&b.v_pool[b.TokenOffset(0, 0, 0)], 64, 1.0f);
  SetRow(b.k_new.data(), 64, 0.0f);   // token 1 arrives through the append
  SetRow(b.v_new.data(), 64, -1.0f);
  ASSERT_FLOAT_EQ(b.shape.scale(), 0.125f);

  ReferenceAppendKv(b.view(), b.pools());
  for (ReferencePrecision p : {ReferencePrecision::kFloat32, ReferencePrecision::kFloat64}) {
    std::vector<float> out_f32(b.out.size());
    ReferenceDecode(b.view(), b.pools(), p, out_f32.data());
    const double e = std::exp(1.0);
    for (int j = 0; j < 64; ++j) {
      EXPECT_NEAR(out_f32[j], (e - 1) / (e + 1), 1e-6) << "j=" << j;
      EXPECT_NEAR(HalfToFloat(b.out[j]), std::tanh(0.5), 5e-4) << "j=" << j;
    }
    EXPECT_NEAR(b.lse[0], std::log(e + 1), 1e-6);
  }
}

// One token: out = V_0 exactly, lse = its score.
TEST(ReferenceDecodeTest, LengthOneReturnsTheNewValue) {
  const ModelShape shape = Shape(2, 1, 128, 8);
  const std::vector<int> lengths = {1};
  PagedBatch b = MakePagedBatch(shape, lengths);
  ReferenceAppendKv(b.view(), b.pools());
  ReferenceDecode(b.view(), b.pools(), ReferencePrecision::kFloat64);
  for (int h = 0; h < 2; ++h) {
    double dot = 0;
    for (int j = 0; j < 128; ++j) {
      EXPECT_EQ(b.out[h * 128 + j].bits, b.v_new[j].bits) << "h=" << h << " j=" << j;
      dot += HalfToFloat(b.q[h * 128 + j]) * HalfToFloat(b.k_new[j]);
    }
    EXPECT_NEAR(b.lse[h], dot / std::sqrt(128.0), 1e-5);
  }
}

// Equal scores: out is the mean of V, lse = score + log(len).
TEST(ReferenceDecodeTest, EqualScoresAverageValues) {
  const ModelShape shape = Shape(1, 1, 64, 8);
  const int len = 19;  // spans three blocks
  const std::vector<int> lengths = {len};
  PagedBatch b = MakePagedBatch(shape, lengths);
  SetRow(b.q.data(), 64, 0.0f);
  b.q[5] = FloatToHalf(2.0f);
  double mean = 0;
  for (int t = 0; t < len; ++t) {
    Half* k = t == len - 1 ? b.k_new.data() : &b.k_pool[b.TokenOffset(0, t, 0)];
    Half* v = t == len - 1 ? b.v_new.data() : &b.v_pool[b.TokenOffset(0, t, 0)];
    SetRow(k, 64, 0.5f);
    SetRow(v, 64, static_cast<float>(t));
    mean += t;
  }
  mean /= len;
  ReferenceAppendKv(b.view(), b.pools());
  std::vector<float> out_f32(b.out.size());
  ReferenceDecode(b.view(), b.pools(), ReferencePrecision::kFloat32, out_f32.data());
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(out_f32[j], mean, 1e-5);
  EXPECT_NEAR(b.lse[0], 2.0 * 0.5 / 8.0 + std::log(len), 1e-6);
}

// GQA: H = 4 over Hkv = 2; heads 0,1 read kv head 0 and heads 2,3 kv head 1. Each kv head has
// constant V rows (kv head 0: 3, kv head 1: -7), so the output names the head that was read.
TEST(ReferenceDecodeTest, GqaHeadsReadTheirKvHead) {
  const ModelShape shape = Shape(4, 2, 64, 16);
  const std::vector<int> lengths = {5};
  PagedBatch b = MakePagedBatch(shape, lengths);
  for (int t = 0; t < 4; ++t) {
    SetRow(&b.v_pool[b.TokenOffset(0, t, 0)], 64, 3.0f);
    SetRow(&b.v_pool[b.TokenOffset(0, t, 1)], 64, -7.0f);
  }
  SetRow(b.v_new.data(), 64, 3.0f);
  SetRow(b.v_new.data() + 64, 64, -7.0f);
  ReferenceAppendKv(b.view(), b.pools());
  ReferenceDecode(b.view(), b.pools(), ReferencePrecision::kFloat64);
  for (int h = 0; h < 4; ++h) {
    EXPECT_FLOAT_EQ(HalfToFloat(b.out[h * 64 + 7]), h < 2 ? 3.0f : -7.0f) << "h=" << h;
  }
}

TEST(ReferenceAppendKvTest, WritesOnlyTheNewTokenOfLiveRows) {
  const ModelShape shape = Shape(4, 2, 64, 8, /*layers=*/3);
  const std::vector<int> lengths = {9, 0, 16, 1, 0, 8};
  PagedBatchOptions opt;
  opt.capacity = 8;  // two more padding rows at the end
  PagedBatch b = MakePagedBatch(shape, lengths, opt);
  std::vector<Half> k_before = b.k_pool, v_before = b.v_pool;
  ReferenceAppendKv(b.view(), b.pools());
  std::vector<Half> k_want = k_before, v_want = v_before;
  for (int i = 0; i < b.capacity; ++i) {
    if (!b.live(i)) continue;
    for (int h = 0; h < 2; ++h) {
      const std::int64_t off = b.TokenOffset(i, b.kv_lengths[i] - 1, h);
      for (int j = 0; j < 64; ++j) {
        k_want[off + j] = b.k_new[(i * 2 + h) * 64 + j];
        v_want[off + j] = b.v_new[(i * 2 + h) * 64 + j];
      }
    }
  }
  auto same = [](const std::vector<Half>& a, const std::vector<Half>& c) {
    for (std::size_t j = 0; j < a.size(); ++j) {
      if (a[j].bits != c[j].bits) return false;
    }
    return true;
  };
  EXPECT_TRUE(same(b.k_pool, k_want));
  EXPECT_TRUE(same(b.v_pool, v_want));
}

// ---- Property test against a naive dense attention -----------------------------------------

struct DenseCase {
  int h, hkv, d, bs, layers;
  std::vector<int> lengths;
  int capacity;
  float q_scale;
};

// Gathers a batch row's K and V into dense [len][D] rows per kv head with the layout written out by
// hand (not through KvPoolView::TokenOffset), then runs softmax(q K^T * scale) V in long double.
// With k_f/v_f (pools of floats in the same layout: an FP8 cache dequantised) it reads those
// instead of b's FP16 pools.
void NaiveDense(PagedBatch& b, int batch_row, std::vector<long double>* out,
                std::vector<long double>* lse, const std::vector<float>* k_f = nullptr,
                const std::vector<float>* v_f = nullptr) {
  const ModelShape& s = b.shape;
  const int len = b.kv_lengths[batch_row], d = s.head_dim, bs = s.block_size, hkv = s.num_kv_heads;
  const int layer = b.layers[batch_row];
  const std::int64_t block_elems = static_cast<std::int64_t>(hkv) * bs * d;
  out->assign(static_cast<std::size_t>(s.num_q_heads) * d, 0.0L);
  lse->assign(s.num_q_heads, 0.0L);
  for (int kvh = 0; kvh < hkv; ++kvh) {
    std::vector<long double> k(static_cast<std::size_t>(len) * d), v(k.size());
    for (int t = 0; t < len; ++t) {
      const std::int64_t block = b.block_tables[batch_row * b.max_blocks_per_seq + t / bs];
      const std::int64_t base = (layer * b.num_blocks + block) * block_elems +
                                (static_cast<std::int64_t>(kvh) * bs + t % bs) * d;
      for (int j = 0; j < d; ++j) {
        k[t * d + j] = k_f != nullptr ? (*k_f)[base + j] : HalfToFloat(b.k_pool[base + j]);
        v[t * d + j] = v_f != nullptr ? (*v_f)[base + j] : HalfToFloat(b.v_pool[base + j]);
      }
    }
    for (int g = 0; g < s.group_size(); ++g) {
      const int h = kvh * s.group_size() + g;
      std::vector<long double> p(len);
      long double mx = -INFINITY;
      for (int t = 0; t < len; ++t) {
        long double dot = 0;
        for (int j = 0; j < d; ++j) dot += HalfToFloat(b.q[(batch_row * s.num_q_heads + h) * d + j]) * k[t * d + j];
        p[t] = dot * s.scale();
        mx = std::max(mx, p[t]);
      }
      long double z = 0;
      for (int t = 0; t < len; ++t) z += std::exp(p[t] - mx);
      for (int t = 0; t < len; ++t) {
        const long double w = std::exp(p[t] - mx) / z;
        for (int j = 0; j < d; ++j) (*out)[h * d + j] += w * v[t * d + j];
      }
      (*lse)[h] = mx + std::log(z);
    }
  }
}

class ReferenceDenseTest : public ::testing::TestWithParam<DenseCase> {};

TEST_P(ReferenceDenseTest, MatchesNaiveDenseAttention) {
  const DenseCase& c = GetParam();
  const ModelShape shape = Shape(c.h, c.hkv, c.d, c.bs, c.layers);
  if (c.d == 64 || c.d == 128 || c.d == 256) {  // other D: the reference alone ("any D")
    ASSERT_TRUE(shape.Validate().ok());
  }
  PagedBatchOptions opt;
  opt.seed = 7 + c.d + c.bs + c.h;
  opt.capacity = c.capacity;
  opt.q_scale = c.q_scale;
  PagedBatch b = MakePagedBatch(shape, c.lengths, opt);
  ReferenceAppendKv(b.view(), b.pools());
  const std::size_t row = static_cast<std::size_t>(c.h) * c.d;
  for (ReferencePrecision p : {ReferencePrecision::kFloat32, ReferencePrecision::kFloat64}) {
    SCOPED_TRACE(p == ReferencePrecision::kFloat64 ? "fp64" : "fp32");
    const double tol = p == ReferencePrecision::kFloat64 ? 1e-9 : 2e-5 * c.q_scale;
    testing::Poison(b.out);
    testing::Poison(b.lse);
    std::vector<float> out_f32(b.out.size());
    ReferenceDecode(b.view(), b.pools(), p, out_f32.data());
    EXPECT_TRUE(testing::PaddedRowsUntouched(b, b.out, b.lse));
    double max_err = 0, max_lse_err = 0, max_half_err = 0;
    for (int i = 0; i < b.capacity; ++i) {
      if (!b.live(i)) continue;
      std::vector<long double> want, want_lse;
      NaiveDense(b, i, &want, &want_lse);
      for (std::size_t j = 0; j < row; ++j) {
        max_err = std::max<double>(max_err, std::abs(out_f32[i * row + j] - want[j]));
        max_half_err = std::max<double>(max_half_err,
                                        std::abs(HalfToFloat(b.out[i * row + j]) - want[j]));
      }
      for (int h = 0; h < c.h; ++h) {
        max_lse_err = std::max<double>(max_lse_err, std::abs(b.lse[i * c.h + h] - want_lse[h]));
      }
    }
    // FP64 results round to float once (6e-8 relative); FP32 accumulates rounding over D and L.
    EXPECT_LE(max_err, std::max(tol, 1e-6));
    EXPECT_LE(max_lse_err, std::max(tol, 1e-5) * 4);
    EXPECT_LE(max_half_err, 1e-3);  // FP16 rounding of |out| < 2
  }
}

void PrintTo(const DenseCase& c, std::ostream* os) {
  *os << "H" << c.h << "_Hkv" << c.hkv << "_D" << c.d << "_bs" << c.bs << "_L" << c.layers
      << "_q" << static_cast<int>(c.q_scale) << "_n" << c.lengths.size();
}

std::string CaseName(const ::testing::TestParamInfo<DenseCase>& info) {
  std::ostringstream os;
  PrintTo(info.param, &os);
  return os.str();
}

// ---- FP8 E4M3 pools ------------------------------------------------------------------------

// The batch's FP16 pools quantised to E4M3 codes under per-(K/V, layer, head) scales (NaN
// poison stays NaN), with the dequantised values beside them as floats.
struct Fp8Pools {
  std::vector<std::uint8_t> k, v;
  std::vector<float> k_deq, v_deq;
  std::vector<float> scales;  // [2][layers][Hkv]
  Fp8KvPoolView view(PagedBatch& b) {
    Fp8KvPoolView p;
    p.geometry = b.pools();
    p.geometry.k = p.geometry.v = nullptr;
    p.k = k.data();
    p.v = v.data();
    p.scales = scales.data();
    return p;
  }
};

Fp8Pools Quantise(PagedBatch& b, std::uint64_t seed) {
  const ModelShape& s = b.shape;
  Fp8Pools f;
  testing::NormalRng rng(seed);
  f.scales.resize(2 * static_cast<std::size_t>(s.num_layers) * s.num_kv_heads);
  for (float& x : f.scales) x = std::exp2(static_cast<float>(rng.NextInt(-3, 3))) * 0.75f;
  f.k.resize(b.k_pool.size());
  f.v.resize(b.v_pool.size());
  f.k_deq.resize(b.k_pool.size());
  f.v_deq.resize(b.v_pool.size());
  const Fp8KvPoolView view = f.view(b);
  for (int l = 0; l < s.num_layers; ++l) {
    for (int blk = 0; blk < b.num_blocks; ++blk) {
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const std::int64_t at = view.geometry.TokenOffset(l, blk, h, 0);
        for (std::int64_t j = at; j < at + s.block_size * s.head_dim; ++j) {
          f.k[j] = QuantizeE4M3(HalfToFloat(b.k_pool[j]), view.scale(false, l, h));
          f.v[j] = QuantizeE4M3(HalfToFloat(b.v_pool[j]), view.scale(true, l, h));
          f.k_deq[j] = DequantizeE4M3(f.k[j], view.scale(false, l, h));
          f.v_deq[j] = DequantizeE4M3(f.v[j], view.scale(true, l, h));
        }
      }
    }
  }
  return f;
}

// The FP8 reference appends codes (QuantizeE4M3 of the new token) and decodes over the
// dequantised cache exactly as the FP16 one does over FP16: against a naive long-double
// attention over the dequantised values, the same tolerances as FP16.
class ReferenceFp8DenseTest : public ::testing::TestWithParam<DenseCase> {};

TEST_P(ReferenceFp8DenseTest, MatchesNaiveDenseAttentionOverTheDequantisedCache) {
  const DenseCase& c = GetParam();
  const ModelShape shape = Shape(c.h, c.hkv, c.d, c.bs, c.layers);
  PagedBatchOptions opt;
  opt.seed = 17 + c.d + c.bs + c.h;
  opt.capacity = c.capacity;
  opt.q_scale = c.q_scale;
  PagedBatch b = MakePagedBatch(shape, c.lengths, opt);
  Fp8Pools f = Quantise(b, opt.seed);
  const std::vector<std::uint8_t> k_before = f.k, v_before = f.v;
  ReferenceAppendKv(b.view(), f.view(b));
  // The append wrote each live row's new token, quantised, and nothing else.
  std::vector<std::uint8_t> k_want = k_before, v_want = v_before;
  for (int i = 0; i < b.capacity; ++i) {
    if (!b.live(i)) continue;
    for (int h = 0; h < c.hkv; ++h) {
      const std::int64_t off = b.TokenOffset(i, b.kv_lengths[i] - 1, h);
      const float ks = f.view(b).scale(false, b.layers[i], h);
      const float vs = f.view(b).scale(true, b.layers[i], h);
      for (int j = 0; j < c.d; ++j) {
        const std::size_t src = (static_cast<std::size_t>(i) * c.hkv + h) * c.d + j;
        k_want[off + j] = QuantizeE4M3(HalfToFloat(b.k_new[src]), ks);
        v_want[off + j] = QuantizeE4M3(HalfToFloat(b.v_new[src]), vs);
        f.k_deq[off + j] = DequantizeE4M3(k_want[off + j], ks);
        f.v_deq[off + j] = DequantizeE4M3(v_want[off + j], vs);
      }
    }
  }
  ASSERT_EQ(f.k, k_want);
  ASSERT_EQ(f.v, v_want);

  const std::size_t row = static_cast<std::size_t>(c.h) * c.d;
  for (ReferencePrecision p : {ReferencePrecision::kFloat32, ReferencePrecision::kFloat64}) {
    SCOPED_TRACE(p == ReferencePrecision::kFloat64 ? "fp64" : "fp32");
    const double tol = p == ReferencePrecision::kFloat64 ? 1e-9 : 2e-5 * c.q_scale;
    testing::Poison(b.out);
    testing::Poison(b.lse);
    std::vector<float> out_f32(b.out.size());
    ReferenceDecode(b.view(), f.view(b), p, out_f32.data());
    EXPECT_TRUE(testing::PaddedRowsUntouched(b, b.out, b.lse));
    double max_err = 0, max_lse_err = 0, max_half_err = 0;
    for (int i = 0; i < b.capacity; ++i) {
      if (!b.live(i)) continue;
      std::vector<long double> want, want_lse;
      NaiveDense(b, i, &want, &want_lse, &f.k_deq, &f.v_deq);
      for (std::size_t j = 0; j < row; ++j) {
        max_err = std::max<double>(max_err, std::abs(out_f32[i * row + j] - want[j]));
        max_half_err = std::max<double>(max_half_err,
                                        std::abs(HalfToFloat(b.out[i * row + j]) - want[j]));
      }
      for (int h = 0; h < c.h; ++h) {
        max_lse_err = std::max<double>(max_lse_err, std::abs(b.lse[i * c.h + h] - want_lse[h]));
      }
    }
    EXPECT_LE(max_err, std::max(tol, 1e-6));
    EXPECT_LE(max_lse_err, std::max(tol, 1e-5) * 4);
    EXPECT_LE(max_half_err, 2e-3);  // FP16 rounding of |out| (scales up to 6 widen V's range)
  }
}

// With scale 1 every E4M3 value is an FP16 value: the FP8 decode equals the FP16 decode over
// FP16 pools holding the dequantised values, bit for bit.
TEST(ReferenceFp8Test, UnitScalesDecodeLikeFp16PoolsOfTheDequantisedValues) {
  const ModelShape shape = Shape(8, 2, 128, 16, 2);
  const std::vector<int> lengths = {1, 40, 0, 129};
  PagedBatchOptions opt;
  opt.seed = 99;
  PagedBatch b = MakePagedBatch(shape, lengths, opt);
  Fp8Pools f = Quantise(b, 1);
  std::fill(f.scales.begin(), f.scales.end(), 1.0f);
  for (std::size_t j = 0; j < b.k_pool.size(); ++j) {
    f.k[j] = EncodeE4M3(HalfToFloat(b.k_pool[j]));
    f.v[j] = EncodeE4M3(HalfToFloat(b.v_pool[j]));
    b.k_pool[j] = FloatToHalf(DecodeE4M3(f.k[j]));
    b.v_pool[j] = FloatToHalf(DecodeE4M3(f.v[j]));
    ASSERT_TRUE(std::isnan(DecodeE4M3(f.k[j])) ||
                HalfToFloat(b.k_pool[j]) == DecodeE4M3(f.k[j]));
  }
  for (std::size_t j = 0; j < b.k_new.size(); ++j) {  // the new tokens, as they will be stored
    b.k_new[j] = FloatToHalf(DecodeE4M3(EncodeE4M3(HalfToFloat(b.k_new[j]))));
    b.v_new[j] = FloatToHalf(DecodeE4M3(EncodeE4M3(HalfToFloat(b.v_new[j]))));
  }
  ReferenceAppendKv(b.view(), b.pools());
  ReferenceAppendKv(b.view(), f.view(b));
  std::vector<float> want(b.out.size()), got(b.out.size());
  ReferenceDecode(b.view(), b.pools(), ReferencePrecision::kFloat32, want.data());
  const std::vector<Half> want_half = b.out;
  ReferenceDecode(b.view(), f.view(b), ReferencePrecision::kFloat32, got.data());
  for (int i = 0; i < b.capacity; ++i) {
    if (!b.live(i)) continue;
    const std::size_t row = std::size_t{8} * 128;
    for (std::size_t j = i * row; j < (i + 1) * row; ++j) {
      ASSERT_EQ(got[j], want[j]) << "row " << i << " element " << j;
      ASSERT_EQ(b.out[j].bits, want_half[j].bits);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceFp8DenseTest,
    ::testing::Values(DenseCase{1, 1, 64, 16, 1, {2}, 1, 1.0f},
                      DenseCase{4, 4, 64, 8, 2, {1, 8, 9, 17, 0, 33}, 8, 1.0f},
                      DenseCase{8, 2, 128, 16, 3, {15, 16, 17, 100, 0}, 6, 1.0f},
                      DenseCase{8, 1, 256, 32, 1, {31, 32, 33, 250}, 4, 1.0f},
                      DenseCase{16, 2, 128, 64, 2, {64, 65, 200}, 3, 1.0f},
                      DenseCase{4, 2, 128, 16, 2, {300, 1, 77}, 3, 20.0f}),  // peaky
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceDenseTest,
    ::testing::Values(DenseCase{1, 1, 64, 16, 1, {2}, 1, 1.0f},
                      DenseCase{4, 4, 64, 8, 2, {1, 8, 9, 17, 0, 33}, 8, 1.0f},
                      DenseCase{8, 2, 128, 16, 3, {15, 16, 17, 100, 0}, 6, 1.0f},
                      DenseCase{8, 1, 256, 32, 1, {31, 32, 33, 250}, 4, 1.0f},
                      DenseCase{16, 2, 128, 64, 2, {64, 65, 200}, 3, 1.0f},
                      DenseCase{4, 4, 96, 16, 1, {40, 7}, 2, 1.0f},  // "any D" (reference only)
                      DenseCase{4, 2, 128, 16, 2, {300, 1, 77}, 3, 20.0f}),  // peaky
    CaseName);

}  // namespace
}  // namespace attnrt::kernels
