// Variant "simple": one CTA per (slot, q head); each warp walks every 4th token with an online
// softmax, the four warps merge at the end. No split, no workspace, scalar page-table lookups:
// the correctness baseline the tuned variant is measured against (it re-reads each K/V byte
// once per q head of a GQA group).
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"

namespace attnrt::kernels {
namespace {

constexpr int kSimpleThreads = 128;
constexpr int kSimpleWarps = kSimpleThreads / 32;

template <int kHeadDim>
__global__ void __launch_bounds__(kSimpleThreads) SimpleDecodeKernel(const PagedDecodeParams p) {
  constexpr int kPerLane = kHeadDim / 32;  // 2, 4 or 8 consecutive elements per lane
  const int h = blockIdx.x;
  const int slot = blockIdx.y;
  const int len = p.kv_lengths[slot];
  if (len <= 0) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_head = h / p.group;
  const int block_size = 1 << p.log2_block_size;

  const std::int64_t q_row = (static_cast<std::int64_t>(slot) * p.num_q_heads + h) * kHeadDim;
  float q[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    q[e] = __half2float(reinterpret_cast<const __half*>(p.q)[q_row + lane * kPerLane + e]) *
           p.scale_log2;
  }
  const std::int64_t head_base = p.layers[slot] * p.layer_stride +
                                 static_cast<std::int64_t>(kv_head) * block_size * kHeadDim;
  const std::int32_t* table = p.block_tables + static_cast<std::int64_t>(slot) * p.max_blocks_per_seq;

  float m = kNoScore, l = 0.0f, acc[kPerLane] = {};
  for (int t = warp; t < len; t += kSimpleWarps) {
    const std::int64_t off = head_base + table[t >> p.log2_block_size] * p.block_stride +
                             static_cast<std::int64_t>(t & (block_size - 1)) * kHeadDim +
                             lane * kPerLane;
    const __half* k = reinterpret_cast<const __half*>(p.k) + off;
    const __half* v = reinterpret_cast<const __half*>(p.v) + off;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) s += q[e] * __half2float(k[e]);
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new);
    const float w = exp2f(s - m_new);
    l = l * corr + w;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * corr + w * __half2float(v[e]);
    m = m_new;
  }

  // Merge the four warps' (m, l, acc).
  __shared__ float s_m[kSimpleWarps], s_l[kSimpleWarps];
  __shared__ float s_acc[kSimpleWarps][kHeadDim];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) s_acc[warp][lane * kPerLane + e] = acc[e];
  __syncthreads();
  float m_all = kNoScore;
#pragma unroll
  for (int w = 0; w < kSimpleWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.0f, scale[kSimpleWarps];
#pragma unroll
  for (int w = 0; w < kSimpleWarps; ++w) {
    scale[w] = exp2f(s_m[w] - m_all);
    l_all += s_l[w] * scale[w];
  }
  for (int d = threadIdx.x; d < kHeadDim; d += kSimpleThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kSimpleWarps; ++w) o += s_acc[w][d] * scale[w];
    reinterpret_cast<__half*>(p.out)[q_row + d] = __float2half_rn(o / l_all);
  }
  if (p.lse != nullptr && threadIdx.x == 0) {
    p.lse[static_cast<std::int64_t>(slot) * p.num_q_heads + h] = (m_all + log2f(l_all)) * kLn2;
  }
}

}  // namespace

Status SimpleSupports(const ModelShape& shape) { return CheckKernelShape(shape, "simple"); }

std::size_t SimpleWorkspaceBytes(const ModelShape&, int) { return 0; }

Status SimpleLaunch(const ModelShape& shape, const DecodeBatchView& batch, const KvPoolView& pools,
                    DecodeWorkspace, cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(SimpleSupports(shape));
  ATTNRT_RETURN_IF_ERROR(CheckLaunchViews(shape, batch, pools));
  if (batch.capacity == 0) return Status::Ok();
  const PagedDecodeParams p = MakePagedDecodeParams(shape, batch, pools);
  const dim3 grid(batch.num_q_heads, batch.capacity);
  switch (shape.head_dim) {
    case 64: SimpleDecodeKernel<64><<<grid, kSimpleThreads, 0, stream>>>(p); break;
    case 128: SimpleDecodeKernel<128><<<grid, kSimpleThreads, 0, stream>>>(p); break;
    default: SimpleDecodeKernel<256><<<grid, kSimpleThreads, 0, stream>>>(p); break;
  }
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

}  // namespace attnrt::kernels
