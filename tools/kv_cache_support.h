// What the self-checking programs (attnrt-check, attnrt-loadgen --verify, the demo) need to know
// of the KV cache's storage type: the value a cache holds for an input (what their host mirrors
// and FP64 references run over), and whether a Status is a decode path's refusal of the type
// (attnrt-check reports those as n/a, not as failures). Public API plus the header-only FP8
// codec (api/internal/fp8_e4m3.h, the one definition of the scaling rule).
#pragma once

#include <string>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "api/internal/fp8_e4m3.h"

namespace attnrt::tools {

// What a cache of `type` holds for the input value `h` under `scale` (1.0: the default, no
// ModelShape::kv_scales): h itself (fp16), or its E4M3 code read back (fp8_e4m3), exactly as
// the cache quantizes (QuantizeE4M3 of the FP32 value) and dequantizes.
inline float StoredKvValue(KvCacheType type, Half h, float scale = 1.0f) {
  const float x = HalfToFloat(h);
  if (type == KvCacheType::kFp8E4M3) return DequantizeE4M3(QuantizeE4M3(x, scale), scale);
  return x;
}

// True when `status` is a decode path refusing the cache type `type` (not fp16): code
// Unimplemented or InvalidArgument and a message that names the type ("fp8_e4m3"), as
// Runtime::Create and the kernels' `supports` answer for a path that does not read it. Any other
// error, and any error with an fp16 cache, is not a refusal.
inline bool IsKvCacheTypeRefusal(const Status& status, KvCacheType type) {
  if (type == KvCacheType::kFp16 || status.ok()) return false;
  if (status.code() != StatusCode::kUnimplemented &&
      status.code() != StatusCode::kInvalidArgument) {
    return false;
  }
  return status.message().find(std::string(KvCacheTypeName(type))) != std::string::npos;
}

}  // namespace attnrt::tools
