// Internal to kernels/: the launchers each variant file defines, the launch-time checks every
// variant shares, and the split-KV plan that the host (grid, workspace) and the device (which
// CTAs work, on which tokens) must compute identically.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

#include "api/config.h"
#include "api/status.h"
#include "kernels/decode.h"
#include "kernels/views.h"

namespace attnrt::kernels {

// Unimplemented naming the combination if (D, block size, group) is outside what the CUDA
// variants instantiate; InvalidArgument if the shape itself is invalid.
Status CheckKernelShape(const ModelShape& shape, std::string_view variant);
// InvalidArgument naming the field when the views disagree with the shape, a pointer is null or
// misaligned for 16-byte access.
Status CheckLaunchViews(const ModelShape& shape, const DecodeBatchView& batch,
                        const KvPoolView& pools);

// ---- variant "simple": one CTA per (slot, q head), online softmax, no workspace -----------
Status SimpleSupports(const ModelShape& shape);
std::size_t SimpleWorkspaceBytes(const ModelShape& shape, int capacity);
Status SimpleLaunch(const ModelShape& shape, const DecodeBatchView& batch, const KvPoolView& pools,
                    DecodeWorkspace workspace, cudaStream_t stream);

// ---- variant "split_kv": flash-decoding, one CTA per (slot, kv head, split) ------------------
Status SplitKvSupports(const ModelShape& shape);
std::size_t SplitKvWorkspaceBytes(const ModelShape& shape, int capacity);
Status SplitKvLaunch(const ModelShape& shape, const DecodeBatchView& batch,
                     const KvPoolView& pools, DecodeWorkspace workspace, cudaStream_t stream);

// How a slot's context is cut into splits. The grid has `max_splits` CTAs per (slot, kv head);
// a slot uses as many as its own length allows (at least `min_tiles` tiles each), the rest exit.
struct SplitKvPlan {
  int max_splits = 1;
  int tile_tokens = 32;  // tokens one pipeline stage holds
  int min_tiles = 8;     // fewest tiles a split is given (short contexts are not split)
};
struct SlotSplit {
  int num_splits;
  int tiles_per_split;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline SlotSplit SplitSlot(int kv_length, const SplitKvPlan& plan) {
  const int tiles = (kv_length + plan.tile_tokens - 1) / plan.tile_tokens;
  int splits = tiles / plan.min_tiles;
  splits = splits < 1 ? 1 : (splits > plan.max_splits ? plan.max_splits : splits);
  const int tiles_per_split = (tiles + splits - 1) / splits;
  return {(tiles + tiles_per_split - 1) / tiles_per_split, tiles_per_split};
}
// The plan for a (shape, capacity): fixed for the life of the process (the device's SM count and
// the kernel's occupancy enter it), so a graph captured once stays valid.
SplitKvPlan MakeSplitKvPlan(const ModelShape& shape, int capacity);

}  // namespace attnrt::kernels
