// Variant "split_kv" (production): flash-decoding over the paged cache. One CTA per
// (slot, kv head, split) serves all G q heads of its kv head, so each K/V byte is read once per
// GQA group. K/V stream through a 3-stage cp.async pipeline (16-byte copies, each thread copies
// exactly the chunks it later reads, so the main loop has no barrier); block ids are fetched one
// tile ahead. Splits are decided on the device from each slot's length inside a grid fixed per
// (shape, capacity); partial results (FP32, with their LSE) are merged by a second kernel.
// Measured figures: bench/NOTES.md ("## kernels").
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerThread = 4;  // 16-byte K (and V) chunks each thread copies per tile
constexpr int kStages = 3;         // tiles in flight: 2 loading while 1 is consumed
constexpr int kMaxSplits = 64;
// Contexts shorter than this are not split: below it the partial write and merge cost more
// than the parallelism gains.
constexpr int kMinSplitTokens = 256;

template <int kHeadDim>
struct TileShape {
  static constexpr int kLanesPerRow = kHeadDim / 8;               // 16-byte chunks in a row
  static constexpr int kRowsPerPass = kThreads / kLanesPerRow;    // rows one CTA-wide copy covers
  static constexpr int kTokens = kRowsPerPass * kRowsPerThread;   // 64, 32, 16 tokens
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "a row must fit in one warp");
};

// Per stage: K and V chunks, indexed so that thread i's chunks sit at consecutive 16-byte
// addresses across a warp (conflict-free). 3 x 2 x 4 x 128 x 16 B = 48 KB.
struct StageBuffers {
  uint4 chunk[kStages][2][kRowsPerThread][kThreads];
};

struct SplitKvParams {
  const Half* k;
  const Half* v;
  std::int64_t layer_stride;
  std::int64_t block_stride;
  int log2_block_size;
  int num_q_heads;
  int max_blocks_per_seq;
  const std::int32_t* kv_lengths;
  const std::int32_t* layers;
  const std::int32_t* block_tables;
  const Half* q;
  Half* out;
  float* lse;
  float scale_log2;
  SplitKvPlan plan;
  float* partial_out;  // [capacity][H][max_splits][D]
  float* partial_lse;  // [capacity][H][max_splits], log2 units
};

template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kThreads) SplitKvDecodeKernel(const SplitKvParams p) {
  using Tile = TileShape<kHeadDim>;
  constexpr int kLanesPerRow = Tile::kLanesPerRow;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int slot = blockIdx.z;
  const int len = p.kv_lengths[slot];
  if (len <= 0) return;  // padding
  const SlotSplit ss = SplitSlot(len, p.plan);
  if (split >= ss.num_splits) return;  // this slot needs fewer splits than the grid has
  const int begin = split * ss.tiles_per_split * Tile::kTokens;
  const int end = min(len, begin + ss.tiles_per_split * Tile::kTokens);
  const int num_tiles = (end - begin + Tile::kTokens - 1) / Tile::kTokens;

  const int tid = threadIdx.x;
  const int lane_in_row = tid % kLanesPerRow;
  const int row0 = tid / kLanesPerRow;
  const int bs_mask = (1 << p.log2_block_size) - 1;
  const std::int64_t head_off =
      p.layers[slot] * p.layer_stride +
      static_cast<std::int64_t>(kv_head) * (bs_mask + 1) * kHeadDim + lane_in_row * 8;
  const Half* k_base = p.k + head_off;
  const Half* v_base = p.v + head_off;
  const std::int32_t* table = p.block_tables + static_cast<std::int64_t>(slot) * p.max_blocks_per_seq;

  __shared__ StageBuffers smem;

  // Block ids of the next tile to issue, loaded one tile ahead so the page-table read is off
  // the copy's critical path.
  int next_block[kRowsPerThread];
  auto load_blocks = [&](int tile) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + tile * Tile::kTokens + i * Tile::kRowsPerPass + row0;
      next_block[i] = (tile < num_tiles && t < end) ? __ldg(table + (t >> p.log2_block_size)) : 0;
    }
  };
  auto issue = [&](int tile) {
    if (tile >= num_tiles) return;
    const int stage = tile % kStages;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + tile * Tile::kTokens + i * Tile::kRowsPerPass + row0;
      const bool valid = t < end;
      const std::int64_t off = static_cast<std::int64_t>(next_block[i]) * p.block_stride +
                               static_cast<std::int64_t>(t & bs_mask) * kHeadDim;
      CpAsync16(&smem.chunk[stage][0][i][tid], valid ? k_base + off : k_base, valid);
      CpAsync16(&smem.chunk[stage][1][i][tid], valid ? v_base + off : v_base, valid);
    }
  };

  load_blocks(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue(s);
    CpAsyncCommit();
    load_blocks(s + 1);
  }

  // q of the group's heads, pre-scaled into log2 units.
  float q[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const std::int64_t row =
        (static_cast<std::int64_t>(slot) * p.num_q_heads + kv_head * kGroup + g) * kHeadDim;
    Half8ToFloat(*reinterpret_cast<const uint4*>(p.q + row + lane_in_row * 8), q[g]);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[g][e] *= p.scale_log2;
  }

  // Each row group (kLanesPerRow lanes sharing token rows) keeps its own online softmax.
  float m[kGroup], l[kGroup], acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = kNoScore;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  for (int j = 0; j < num_tiles; ++j) {
    issue(j + kStages - 1);
    CpAsyncCommit();
    load_blocks(j + kStages);
    CpAsyncWait<kStages - 1>();  // this thread's copies of tile j have landed
    const int stage = j % kStages;

    float s[kRowsPerThread][kGroup];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      float kf[8];
      Half8ToFloat(smem.chunk[stage][0][i][tid], kf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[g][e], kf[e], dot);
        s[i][g] = dot;
      }
    }
    // Sum the row's partial dots across its lanes (xor butterfly: every lane gets the same sum).
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int t = begin + j * Tile::kTokens + i * Tile::kRowsPerPass + row0;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int o = kLanesPerRow / 2; o >= 1; o /= 2) {
          s[i][g] += __shfl_xor_sync(0xffffffffu, s[i][g], o);
        }
        if (t >= end) s[i][g] = -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float mx = m[g];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) mx = fmaxf(mx, s[i][g]);
      const float corr = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        s[i][g] = exp2f(s[i][g] - mx);  // 0 for masked rows; their V chunk is zero-filled
        l[g] += s[i][g];
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      float vf[8];
      Half8ToFloat(smem.chunk[stage][1][i][tid], vf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(s[i][g], vf[e], acc[g][e]);
      }
    }
  }
  CpAsyncWait<0>();

  // Merge the row groups of a warp (lanes kLanesPerRow apart hold the same d chunk).
#pragma unroll
  for (int o = kLanesPerRow; o < 32; o *= 2) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mx = fmaxf(m[g], m_o);
      const float a = exp2f(m[g] - mx), b = exp2f(m_o - mx);
      l[g] = l[g] * a + l_o * b;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        acc[g][e] = acc[g][e] * a + __shfl_xor_sync(0xffffffffu, acc[g][e], o) * b;
      }
      m[g] = mx;
    }
  }

  // Merge the warps through shared memory (the stage buffers, now idle).
  static_assert(sizeof(float) * kWarps * kGroup * (kHeadDim + 2) <= sizeof(StageBuffers),
                "reduction scratch must fit in the stage buffers");
  __syncthreads();  // every warp is done reading its stage chunks
  float* red_acc = reinterpret_cast<float*>(&smem);   // [kWarps][kGroup][kHeadDim]
  float* red_ml = red_acc + kWarps * kGroup * kHeadDim;  // [kWarps][kGroup][2]
  const int warp = tid / 32;
  const int lane = tid % 32;
  if (lane < kLanesPerRow) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float* dst = red_acc + (warp * kGroup + g) * kHeadDim + lane * 8;
      reinterpret_cast<float4*>(dst)[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
      if (lane == 0) {
        red_ml[(warp * kGroup + g) * 2] = m[g];
        red_ml[(warp * kGroup + g) * 2 + 1] = l[g];
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kGroup * kHeadDim; idx += kThreads) {
    const int g = idx / kHeadDim;
    const int d = idx % kHeadDim;
    float mx = kNoScore;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_ml[(w * kGroup + g) * 2]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float scale = exp2f(red_ml[(w * kGroup + g) * 2] - mx);
      sum += red_ml[(w * kGroup + g) * 2 + 1] * scale;
      o += red_acc[(w * kGroup + g) * kHeadDim + d] * scale;
    }
    const std::int64_t row = static_cast<std::int64_t>(slot) * p.num_q_heads + kv_head * kGroup + g;
    if (ss.num_splits == 1) {
      reinterpret_cast<__half*>(p.out)[row * kHeadDim + d] = __float2half_rn(o / sum);
      if (d == 0 && p.lse != nullptr) p.lse[row] = (mx + log2f(sum)) * kLn2;
    } else {
      const std::int64_t part = row * p.plan.max_splits + split;
      p.partial_out[part * kHeadDim + d] = o / sum;
      if (d == 0) p.partial_lse[part] = mx + log2f(sum);
    }
  }
}

// One CTA per (q head, slot) that was split: out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M).
template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim / 4) SplitKvMergeKernel(const SplitKvParams p) {
  const int h = blockIdx.x;
  const int slot = blockIdx.y;
  const int len = p.kv_lengths[slot];
  if (len <= 0) return;
  const SlotSplit ss = SplitSlot(len, p.plan);
  if (ss.num_splits == 1) return;  // the decode kernel wrote this slot's output itself
  const std::int64_t row = static_cast<std::int64_t>(slot) * p.num_q_heads + h;
  const float* lse = p.partial_lse + row * p.plan.max_splits;
  float mx = kNoScore;
  for (int s = 0; s < ss.num_splits; ++s) mx = fmaxf(mx, lse[s]);
  float sum = 0.0f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  const int d = threadIdx.x * 4;
  for (int s = 0; s < ss.num_splits; ++s) {
    const float w = exp2f(lse[s] - mx);
    sum += w;
    const float4 part = *reinterpret_cast<const float4*>(
        p.partial_out + (row * p.plan.max_splits + s) * kHeadDim + d);
    o.x += w * part.x;
    o.y += w * part.y;
    o.z += w * part.z;
    o.w += w * part.w;
  }
  const float inv = 1.0f / sum;
  __half2 packed[2] = {__floats2half2_rn(o.x * inv, o.y * inv),
                       __floats2half2_rn(o.z * inv, o.w * inv)};
  *reinterpret_cast<uint2*>(p.out + row * kHeadDim + d) = *reinterpret_cast<const uint2*>(packed);
  if (threadIdx.x == 0 && p.lse != nullptr) p.lse[row] = (mx + log2f(sum)) * kLn2;
}

using DecodeKernelFn = void (*)(SplitKvParams);

template <int kHeadDim>
DecodeKernelFn KernelForGroup(int group) {
  switch (group) {
    case 1: return SplitKvDecodeKernel<kHeadDim, 1>;
    case 2: return SplitKvDecodeKernel<kHeadDim, 2>;
    case 4: return SplitKvDecodeKernel<kHeadDim, 4>;
    default: return SplitKvDecodeKernel<kHeadDim, 8>;
  }
}

DecodeKernelFn KernelFor(int head_dim, int group) {
  switch (head_dim) {
    case 64: return KernelForGroup<64>(group);
    case 128: return KernelForGroup<128>(group);
    default: return KernelForGroup<256>(group);
  }
}

int TileTokens(int head_dim) {
  switch (head_dim) {
    case 64: return TileShape<64>::kTokens;
    case 128: return TileShape<128>::kTokens;
    default: return TileShape<256>::kTokens;
  }
}

int DimIndex(int head_dim) { return head_dim == 64 ? 0 : head_dim == 128 ? 1 : 2; }
int GroupIndex(int group) { return group == 1 ? 0 : group == 2 ? 1 : group == 4 ? 2 : 3; }

// Resident CTAs per SM x SMs of the current device, cached per (D, G): the plan (and so the grid
// and workspace) must not change between a capture and its replays. Without a device (host-only
// builds asking for workspace sizes) an H100 is assumed: 132 SMs, 4 CTAs each.
int ResidentCtas(int head_dim, int group) {
  static std::atomic<int> cache[3][4] = {};
  std::atomic<int>& slot = cache[DimIndex(head_dim)][GroupIndex(group)];
  int cached = slot.load(std::memory_order_relaxed);
  if (cached > 0) return cached;
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, reinterpret_cast<const void*>(KernelFor(head_dim, group)), kThreads, 0) !=
          cudaSuccess ||
      sms <= 0 || per_sm <= 0) {
    cudaGetLastError();  // clear a sticky "no device" error from the queries
    return 132 * 4;
  }
  cached = sms * per_sm;
  slot.store(cached, std::memory_order_relaxed);
  return cached;
}

std::size_t AlignUp(std::size_t x) { return (x + 255) / 256 * 256; }

struct WorkspaceLayout {
  std::size_t out_bytes = 0;
  std::size_t lse_bytes = 0;
  std::size_t total() const { return out_bytes + lse_bytes; }
};

WorkspaceLayout Layout(const ModelShape& shape, int capacity, const SplitKvPlan& plan) {
  WorkspaceLayout w;
  if (plan.max_splits <= 1 || capacity <= 0) return w;
  const std::size_t rows = static_cast<std::size_t>(capacity) * shape.num_q_heads * plan.max_splits;
  w.out_bytes = AlignUp(rows * shape.head_dim * sizeof(float));
  w.lse_bytes = AlignUp(rows * sizeof(float));
  return w;
}

}  // namespace

SplitKvPlan MakeSplitKvPlan(const ModelShape& shape, int capacity) {
  SplitKvPlan plan;
  plan.tile_tokens = TileTokens(shape.head_dim);
  plan.min_tiles = std::max(1, kMinSplitTokens / plan.tile_tokens);
  // Enough splits that one wave of resident CTAs is filled when every slot is live; a slot's
  // own length then decides how many of them it uses.
  const int work = std::max(1, capacity * shape.num_kv_heads);
  int splits = std::max(1, ResidentCtas(shape.head_dim, shape.group_size()) / work);
  const int max_tiles = (shape.max_context + plan.tile_tokens - 1) / plan.tile_tokens;
  splits = std::min({splits, std::max(1, max_tiles / plan.min_tiles), kMaxSplits});
  plan.max_splits = splits;
  return plan;
}

Status SplitKvSupports(const ModelShape& shape) { return CheckKernelShape(shape, "split_kv"); }

std::size_t SplitKvWorkspaceBytes(const ModelShape& shape, int capacity) {
  if (!SplitKvSupports(shape).ok()) return 0;
  return Layout(shape, capacity, MakeSplitKvPlan(shape, capacity)).total();
}

Status SplitKvLaunch(const ModelShape& shape, const DecodeBatchView& batch,
                     const KvPoolView& pools, DecodeWorkspace workspace, cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(SplitKvSupports(shape));
  ATTNRT_RETURN_IF_ERROR(CheckLaunchViews(shape, batch, pools));
  if (batch.capacity == 0) return Status::Ok();
  const SplitKvPlan plan = MakeSplitKvPlan(shape, batch.capacity);
  const WorkspaceLayout layout = Layout(shape, batch.capacity, plan);
  if (workspace.bytes < layout.total() || (layout.total() > 0 && workspace.data == nullptr)) {
    return InvalidArgumentError("workspace.bytes = " + std::to_string(workspace.bytes) +
                                (workspace.data == nullptr ? " (data null)" : "") +
                                ", expected >= " + std::to_string(layout.total()) +
                                " (DecodeVariant::workspace_bytes for capacity " +
                                std::to_string(batch.capacity) + ")");
  }
  SplitKvParams p{};
  p.k = pools.k;
  p.v = pools.v;
  p.layer_stride = pools.layer_stride();
  p.block_stride = pools.block_stride();
  p.log2_block_size = __builtin_ctz(static_cast<unsigned>(shape.block_size));
  p.num_q_heads = batch.num_q_heads;
  p.max_blocks_per_seq = batch.max_blocks_per_seq;
  p.kv_lengths = batch.kv_lengths;
  p.layers = batch.layers;
  p.block_tables = batch.block_tables;
  p.q = batch.q;
  p.out = batch.out;
  p.lse = batch.lse;
  p.scale_log2 = batch.scale * kLog2e;
  p.plan = plan;
  if (layout.total() > 0) {
    p.partial_out = static_cast<float*>(workspace.data);
    p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(workspace.data) + layout.out_bytes);
  }
  const dim3 grid(plan.max_splits, shape.num_kv_heads, batch.capacity);
  KernelFor(shape.head_dim, shape.group_size())<<<grid, kThreads, 0, stream>>>(p);
  ATTNRT_CUDA_RETURN_LAUNCH();
  if (plan.max_splits > 1) {  // else no slot can split: no merge launch at all
    const dim3 merge_grid(batch.num_q_heads, batch.capacity);
    switch (shape.head_dim) {
      case 64: SplitKvMergeKernel<64><<<merge_grid, 16, 0, stream>>>(p); break;
      case 128: SplitKvMergeKernel<128><<<merge_grid, 32, 0, stream>>>(p); break;
      default: SplitKvMergeKernel<256><<<merge_grid, 64, 0, stream>>>(p); break;
    }
    ATTNRT_CUDA_RETURN_LAUNCH();
  }
  return Status::Ok();
}

}  // namespace attnrt::kernels
