// The CPU reference for append-KV and paged decode attention (reference.cc): what every GPU
// variant is checked against and what the CPU executor runs. No CUDA header, so it builds
// without the CUDA toolkit; kernels/decode.h includes it beside the CUDA paths.
#pragma once

#include <cstdint>

#include "kernels/views.h"

namespace attnrt::kernels {

enum class ReferencePrecision { kFloat32, kFloat64 };

// The pools of an FP8 E4M3 KV cache (ModelShape::kv_cache_type = kFp8E4M3): the layout of
// KvPoolView with one byte per element, so `geometry`'s offsets (TokenOffset, strides) are the
// byte offsets from k and v; geometry.k and geometry.v are unused. Element j of (layer, kv head
// h) reads DequantizeE4M3(code, scale) (kernels/fp8_e4m3.h). Host memory.
struct Fp8KvPoolView {
  KvPoolView geometry;
  std::uint8_t* k = nullptr;
  std::uint8_t* v = nullptr;
  // [2][num_layers][num_kv_heads]: K's scales, then V's (kvcache::KvCache::kv_scales()).
  const float* scales = nullptr;
  float scale(bool value, int layer, int kv_head) const {
    return scales[((value ? 1 : 0) * geometry.num_layers + layer) * geometry.num_kv_heads +
                  kv_head];
  }
};

// Writes each live row's k_new/v_new into its page (position kv_lengths[i] - 1). Host memory.
// The FP8 form stores QuantizeE4M3(x, scale) (saturating, nearest even).
void ReferenceAppendKv(const DecodeBatchView& batch, const KvPoolView& pools);
void ReferenceAppendKv(const DecodeBatchView& batch, const Fp8KvPoolView& pools);
// Decode attention for every live row over host pools (after the append): GQA, any head dim,
// variable lengths. Writes out (FP16) and lse (if non-null). `out_f32`, if non-null, receives the
// unrounded output [capacity][H][D] for tighter checks. The FP8 form dequantises each element
// on read (in FP32, as a kernel does) and then runs the same arithmetic: with kFloat64 it is the
// FP64 reference over the dequantised cache.
void ReferenceDecode(const DecodeBatchView& batch, const KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32 = nullptr);
void ReferenceDecode(const DecodeBatchView& batch, const Fp8KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32 = nullptr);

}  // namespace attnrt::kernels
