// The FP8 E4M3 codec and the KV cache's scaling rule for kernels and the CPU reference: the one
// definition lives in api/internal/fp8_e4m3.h (kvcache/ writes prefills with it too, and may not
// include kernels/); this header names it in attnrt::kernels.
#pragma once

#include "api/internal/fp8_e4m3.h"

namespace attnrt::kernels {

using attnrt::DecodeE4M3;
using attnrt::DequantizeE4M3;
using attnrt::EncodeE4M3;
using attnrt::Fp8BitsFloat;
using attnrt::Fp8FloatBits;
using attnrt::kE4M3Max;
using attnrt::kE4M3NaN;
using attnrt::QuantizeE4M3;

}  // namespace attnrt::kernels
