// Model shape and runtime configuration: the leaf types every component may include.
#pragma once

#include <cstdint>

#include "api/status.h"

namespace attnrt {

// The attention shape of one model. H = G * Hkv (GQA group size G).
struct ModelShape {
  int num_layers = 1;
  int num_q_heads = 32;   // H
  int num_kv_heads = 32;  // Hkv; H % Hkv == 0
  int head_dim = 128;     // D: 64, 128 or 256
  int block_size = 16;    // tokens per KV page: 8, 16, 32 or 64
  int max_context = 4096; // longest sequence the cache admits, in tokens
  float softmax_scale = 0.0f;  // 0 means 1/sqrt(head_dim)

  int group_size() const { return num_q_heads / num_kv_heads; }
  float scale() const;
  // Blocks a sequence of max_context tokens needs.
  int max_blocks_per_sequence() const { return (max_context + block_size - 1) / block_size; }
  // K or V elements of one token of one layer (Hkv * D).
  std::int64_t kv_token_elems() const {
    return static_cast<std::int64_t>(num_kv_heads) * head_dim;
  }

  // Rejects unsupported shapes with InvalidArgument naming the field and value.
  Status Validate() const;
};

}  // namespace attnrt
