// The CPU reference for append-KV and paged decode attention (reference.cc): what every GPU
// variant is checked against and what the CPU executor runs. No CUDA header, so it builds
// without the CUDA toolkit; kernels/decode.h includes it beside the CUDA paths.
#pragma once

#include "kernels/views.h"

namespace attnrt::kernels {

enum class ReferencePrecision { kFloat32, kFloat64 };

// Writes each live row's k_new/v_new into its page (position kv_lengths[i] - 1). Host memory.
void ReferenceAppendKv(const DecodeBatchView& batch, const KvPoolView& pools);
// Decode attention for every live row over host pools (after the append): GQA, any head dim,
// variable lengths. Writes out (FP16) and lse (if non-null). `out_f32`, if non-null, receives the
// unrounded output [capacity][H][D] for tighter checks.
void ReferenceDecode(const DecodeBatchView& batch, const KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32 = nullptr);

}  // namespace attnrt::kernels
