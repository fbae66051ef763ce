// The tuned launch table of the split-KV kernels (study 4) and its lookup: dispatch asks
// TunedLaunchConfig for a (shape, capacity) and launches what the sweep found fastest there.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

const std::vector<TunedLaunchRow>& Rows() {
  static const std::vector<TunedLaunchRow> rows = {
#include "kernels/tc_launch_table.inc"
  };
  return rows;
}

}  // namespace

std::string ToString(const SplitKvLaunchConfig& config) {
  return "warps=" + std::to_string(config.warps) +
         " ctas_per_sm=" + std::to_string(config.ctas_per_sm) +
         " min_split_tokens=" + std::to_string(config.min_split_tokens);
}

Status CheckLaunchConfig(SplitKvFamily family, const SplitKvLaunchConfig& config, int head_dim) {
  if (family == SplitKvFamily::kTensorCore) {
    ATTNRT_RETURN_IF_ERROR(TcKernelFor(head_dim, config.warps).status());
  }
  if (config.ctas_per_sm < 0 || config.ctas_per_sm > 64) {
    return InvalidArgumentError("config.ctas_per_sm = " + std::to_string(config.ctas_per_sm) +
                                ", expected 0 (occupancy rule) .. 64");
  }
  if (config.min_split_tokens < 16 || config.min_split_tokens > (1 << 20)) {
    return InvalidArgumentError("config.min_split_tokens = " +
                                std::to_string(config.min_split_tokens) +
                                ", expected 16 .. 1048576");
  }
  return Status::Ok();
}

std::span<const TunedLaunchRow> TunedLaunchTable() { return Rows(); }

SplitKvLaunchConfig TunedLaunchConfig(SplitKvFamily family, const ModelShape& shape,
                                      int capacity) {
  SplitKvLaunchConfig config;
  // Invalid shapes get the default: the launch rejects them with a Status naming the field.
  if (family != SplitKvFamily::kTensorCore || shape.num_kv_heads <= 0) return config;
  const int work = std::max(1, capacity) * shape.num_kv_heads;
  const int group = shape.group_size();
  // Rows are sorted by (head_dim, group, min_work): the last matching row with min_work <= work.
  for (const TunedLaunchRow& row : Rows()) {
    if (row.head_dim == shape.head_dim && row.group == group && row.min_work <= work) {
      config = row.config;
    }
  }
  // The table was swept over FP16 caches; an FP8 cache keeps the row's splitting and the one CTA
  // size built for it.
  if (shape.kv_cache_type == KvCacheType::kFp8E4M3) config.warps = kTcFp8Warps;
  return config;
}

}  // namespace attnrt::kernels
