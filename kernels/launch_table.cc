// The tuned launch tables of the split-KV kernels (study 4), one per GPU model swept, and their
// lookup: dispatch asks TunedSplitKvLaunch for a (shape, capacity, device model) and launches
// the family and configuration the sweep on that model found fastest there.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

// The rows of a GPU model's table for a KV cache type. FP8 is swept on the H100 only; the H200
// reads the same FP8 rows (on the H200 with them, 2026-11-28: 0.54-0.60x FP16 SDPA on the large
// shapes, bench/results/2026-11-28_h200_check/).
const std::vector<TunedLaunchRow>& Rows(TunedGpu gpu, KvCacheType kv_cache_type) {
  static const std::vector<TunedLaunchRow> h100_fp16 = {
#include "kernels/launch_tables/h100_fp16.inc"
  };
  static const std::vector<TunedLaunchRow> h200_fp16 = {
#include "kernels/launch_tables/h200_fp16.inc"
  };
  static const std::vector<TunedLaunchRow> fp8 = {
#include "kernels/launch_tables/h100_fp8.inc"
  };
  if (kv_cache_type == KvCacheType::kFp8E4M3) return fp8;
  return gpu == TunedGpu::kH200 ? h200_fp16 : h100_fp16;
}

// The last row of `rows` for (head_dim, group) and the context class of a plan of
// `max_kv_length` with min_work <= work (the any-length rows where the short class has none),
// or null.
const TunedLaunchRow* FindRow(const std::vector<TunedLaunchRow>& rows, int head_dim, int group,
                              int work, int max_kv_length) {
  auto find = [&](int row_class) {
    const TunedLaunchRow* found = nullptr;
    for (const TunedLaunchRow& row : rows) {
      if (row.head_dim == head_dim && row.group == group && row.max_kv_length == row_class &&
          row.min_work <= work) {
        found = &row;
      }
    }
    return found;
  };
  const int row_class = SplitKvRowClass(max_kv_length);
  const TunedLaunchRow* found = row_class != 0 ? find(row_class) : nullptr;
  return found != nullptr ? found : find(0);
}

}  // namespace

std::string ToString(const SplitKvLaunchConfig& config) {
  return "warps=" + std::to_string(config.warps) +
         " ctas_per_sm=" + std::to_string(config.ctas_per_sm) +
         " min_split_tokens=" + std::to_string(config.min_split_tokens);
}

Status CheckLaunchConfig(SplitKvFamily family, const SplitKvLaunchConfig& config, int head_dim,
                         KvCacheType kv_cache_type) {
  if (family == SplitKvFamily::kTensorCore) {
    ATTNRT_RETURN_IF_ERROR(
        TcKernelFor(head_dim, config.warps, kv_cache_type == KvCacheType::kFp8E4M3).status());
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

std::span<const TunedLaunchRow> TunedLaunchTable(TunedGpu gpu, KvCacheType kv_cache_type) {
  return Rows(gpu, kv_cache_type);
}

TunedSplitKv TunedSplitKvLaunch(const ModelShape& shape, int capacity, int max_kv_length,
                                TunedGpu gpu) {
  TunedSplitKv tuned;
  // Invalid shapes get the default: the launch rejects them with a Status naming the field.
  if (shape.num_kv_heads <= 0) return tuned;
  const int work = std::max(1, capacity) * shape.num_kv_heads;
  const int group = shape.group_size();
  const int length = max_kv_length > 0 ? max_kv_length : shape.max_context;
  const bool fp8 = shape.kv_cache_type == KvCacheType::kFp8E4M3;
  if (fp8) {
    if (const TunedLaunchRow* row =
            FindRow(Rows(gpu, KvCacheType::kFp8E4M3), shape.head_dim, group, work, length)) {
      return {row->family, row->config};
    }
  }
  if (const TunedLaunchRow* row =
          FindRow(Rows(gpu, KvCacheType::kFp16), shape.head_dim, group, work, length)) {
    tuned = {row->family, row->config};
  }
  if (fp8) tuned = {SplitKvFamily::kTensorCore, {kTcFp8Warps, tuned.config.ctas_per_sm,
                                                  tuned.config.min_split_tokens}};
  return tuned;
}

SplitKvLaunchConfig TunedLaunchConfig(SplitKvFamily family, const ModelShape& shape,
                                      int capacity, int max_kv_length, TunedGpu gpu) {
  const TunedSplitKv tuned = TunedSplitKvLaunch(shape, capacity, max_kv_length, gpu);
  return tuned.family == family ? tuned.config : SplitKvLaunchConfig{};
}

}  // namespace attnrt::kernels
