#include <attnrt/config.h>

#include <cmath>
#include <string>

namespace attnrt {

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
  return Status::Ok();
}

}  // namespace attnrt
