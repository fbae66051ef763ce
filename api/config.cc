// ModelShape's validation and the KV cache type's names.
#include <attnrt/config.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace attnrt {

std::string_view KvCacheTypeName(KvCacheType type) {
  switch (type) {
    case KvCacheType::kFp16: return "fp16";
    case KvCacheType::kFp8E4M3: return "fp8_e4m3";
  }
  return "unknown";
}

bool ParseKvCacheType(std::string_view name, KvCacheType* type) {
  for (KvCacheType t : {KvCacheType::kFp16, KvCacheType::kFp8E4M3}) {
    if (name == KvCacheTypeName(t)) {
      *type = t;
      return true;
    }
  }
  return false;
}

int KvElementBytes(KvCacheType type) { return type == KvCacheType::kFp8E4M3 ? 1 : 2; }

namespace {

Status ValidateKvScales(const ModelShape& shape) {
  if (shape.kv_cache_type != KvCacheType::kFp16 &&
      shape.kv_cache_type != KvCacheType::kFp8E4M3) {
    return InvalidArgumentError("ModelShape.kv_cache_type = " +
                                std::to_string(static_cast<int>(shape.kv_cache_type)) +
                                ", expected fp16 or fp8_e4m3");
  }
  if (shape.kv_scales.empty()) return Status::Ok();
  if (shape.kv_cache_type == KvCacheType::kFp16) {
    return InvalidArgumentError("ModelShape.kv_scales has " +
                                std::to_string(shape.kv_scales.size()) +
                                " values, but kv_cache_type = fp16 takes none (scales are for "
                                "fp8_e4m3)");
  }
  const std::size_t expected = 2 * static_cast<std::size_t>(shape.num_layers) * shape.num_kv_heads;
  if (shape.kv_scales.size() != expected) {
    return InvalidArgumentError("ModelShape.kv_scales has " +
                                std::to_string(shape.kv_scales.size()) +
                                " values, expected 2 * num_layers * num_kv_heads = " +
                                std::to_string(expected) + " (or none: 1.0 everywhere)");
  }
  // 448 * scale must stay finite: that is the largest value a code reads back as.
  constexpr float kMaxScale = std::numeric_limits<float>::max() / 448.0f;
  for (std::size_t i = 0; i < shape.kv_scales.size(); ++i) {
    const float s = shape.kv_scales[i];
    if (!std::isfinite(s) || !(s > 0.0f) || s > kMaxScale) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g", static_cast<double>(s));
      return InvalidArgumentError("ModelShape.kv_scales[" + std::to_string(i) + "] = " + value +
                                  ", expected a finite value > 0 and <= FLT_MAX / 448");
    }
  }
  return Status::Ok();
}

}  // namespace

float ModelShape::scale() const {
  return softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

Status ModelShape::Validate() const {
  auto bad = [](const char* field, long long value, const char* expected) {
    return InvalidArgumentError(std::string("ModelShape.") + field + " = " + std::to_string(value) +
                                ", expected " + expected);
  };
  if (num_layers < 1) return bad("num_layers", num_layers, ">= 1");
  if (num_q_heads < 1) return bad("num_q_heads", num_q_heads, ">= 1");
  if (num_kv_heads < 1) return bad("num_kv_heads", num_kv_heads, ">= 1");
  if (num_q_heads % num_kv_heads != 0) {
    return InvalidArgumentError("ModelShape.num_q_heads = " + std::to_string(num_q_heads) +
                                " is not a multiple of num_kv_heads = " +
                                std::to_string(num_kv_heads));
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    return bad("head_dim", head_dim, "64, 128 or 256");
  }
  if (block_size != 8 && block_size != 16 && block_size != 32 && block_size != 64) {
    return bad("block_size", block_size, "8, 16, 32 or 64");
  }
  if (max_context < 1) return bad("max_context", max_context, ">= 1");
  if (!std::isfinite(softmax_scale) || softmax_scale < 0.0f) {
    return InvalidArgumentError("ModelShape.softmax_scale = " + std::to_string(softmax_scale) +
                                ", expected a finite value >= 0 (0 means 1/sqrt(head_dim))");
  }
  return ValidateKvScales(*this);
}

}  // namespace attnrt
