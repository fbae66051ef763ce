// Variant "simple": one CTA per (batch row, q head); each warp walks every 4th token with an online
// softmax, the four warps merge at the end. No split, no workspace, scalar page-table lookups:
// the correctness baseline the tuned variant is measured against (it re-reads each K/V byte
// once per q head of a GQA group).
// Issue 17: the four warps' merge and the output store are attention_merge.cuh's (same arithmetic
// in the same order, same registers on sm_90); PlanSimple fixes kernel and grid once, RunSimple
// launches them.
// Issue 13: reads an FP8 E4M3 cache (kFp8): a lane's 2, 4 or 8 codes of a row in one load,
// converted to FP16 by the hardware converter; K's scale is folded into q, V's into acc.
#include <cstdint>

#include "kernels/attention_merge.cuh"
#include "api/internal/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"
#include "kernels/fp8_device.cuh"

namespace attnrt::kernels {
namespace {

constexpr int kSimpleThreads = 128;
constexpr int kSimpleWarps = kSimpleThreads / 32;

// kN (2, 4 or 8) consecutive E4M3 codes at `codes`, which is kN-byte aligned (a lane's share of a
// row), as FP32 through FP16 (exact).
template <int kN>
__device__ __forceinline__ void LoadE4M3AsFloat(const std::uint8_t* codes, float (&out)[kN]) {
  static_assert(kN == 2 || kN == 4 || kN == 8, "a lane reads 2, 4 or 8 codes of a row");
  std::uint32_t words[(kN + 3) / 4];
  if constexpr (kN == 2) {
    words[0] = *reinterpret_cast<const std::uint16_t*>(codes);
  } else if constexpr (kN == 4) {
    words[0] = *reinterpret_cast<const std::uint32_t*>(codes);
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(codes);
    words[0] = w.x;
    words[1] = w.y;
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const std::uint32_t h2 = E4M3x2ToHalf2(words[i / 2] >> (16 * (i % 2)));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// kFp8: the pools hold E4M3 codes under per-(layer, kv head) scales (PagedDecodeParams::kv_scales).
template <int kHeadDim, bool kFp8>
__global__ void __launch_bounds__(kSimpleThreads) SimpleDecodeKernel(const PagedDecodeParams p) {
  constexpr int kPerLane = kHeadDim / 32;  // 2, 4 or 8 consecutive elements per lane
  const int h = blockIdx.x;
  const int batch_row = blockIdx.y;
  const int len = p.kv_lengths[batch_row];
  if (len <= 0) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_head = h / p.group;
  const int block_size = 1 << p.log2_block_size;
  // FP8: scores over K's codes times K's scale are the scores over the dequantised K, so K's
  // scale joins q's; V's multiplies acc after the loop.
  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kFp8) {
    const int layer = p.layers[batch_row];
    const int num_kv_heads = p.num_q_heads / p.group;
    k_scale = p.kv_scales[layer * num_kv_heads + kv_head];
    v_scale = p.kv_scales[(p.num_layers + layer) * num_kv_heads + kv_head];
  }
  const float q_scale = kFp8 ? p.scale_log2 * k_scale : p.scale_log2;

  const std::int64_t q_row = (static_cast<std::int64_t>(batch_row) * p.num_q_heads + h) * kHeadDim;
  float q[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    q[e] = __half2float(reinterpret_cast<const __half*>(p.q)[q_row + lane * kPerLane + e]) *
           q_scale;
  }
  const std::int64_t head_base = p.layers[batch_row] * p.layer_stride +
                                 static_cast<std::int64_t>(kv_head) * block_size * kHeadDim;
  const std::int32_t* table =
      p.block_tables + static_cast<std::int64_t>(batch_row) * p.max_blocks_per_seq;

  float m = kNoScore, l = 0.0f, acc[kPerLane] = {};
  for (int t = warp; t < len; t += kSimpleWarps) {
    const std::int64_t off = head_base + table[t >> p.log2_block_size] * p.block_stride +
                             static_cast<std::int64_t>(t & (block_size - 1)) * kHeadDim +
                             lane * kPerLane;
    const __half* k = reinterpret_cast<const __half*>(p.k) + off;
    const __half* v = reinterpret_cast<const __half*>(p.v) + off;
    float s = 0.0f;
    if constexpr (kFp8) {  // one byte a code: element offsets are byte offsets
      float kf[kPerLane];
      LoadE4M3AsFloat(reinterpret_cast<const std::uint8_t*>(p.k) + off, kf);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) s += q[e] * kf[e];
    } else {
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) s += q[e] * __half2float(k[e]);
    }
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new);
    const float w = exp2f(s - m_new);
    l = l * corr + w;
    if constexpr (kFp8) {
      float vf[kPerLane];
      LoadE4M3AsFloat(reinterpret_cast<const std::uint8_t*>(p.v) + off, vf);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * corr + w * vf[e];
    } else {
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * corr + w * __half2float(v[e]);
    }
    m = m_new;
  }
  if constexpr (kFp8) {
    // acc summed w times V's codes: times V's scale, w times the dequantised V.
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] *= v_scale;
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
  auto m_of = [&](int w) { return s_m[w]; };
  auto l_of = [&](int w) { return s_l[w]; };
  for (int d = threadIdx.x; d < kHeadDim; d += kSimpleThreads) {
    const AttentionState<float> s = MergeAttentionStates<float>(
        kSimpleWarps, m_of, l_of, [&](int w) { return s_acc[w][d]; });
    StoreHalves(reinterpret_cast<__half*>(p.out) + q_row + d, s.acc,
                Normalizer<Normalize::kDivide>(s.l));
  }
  if (p.lse != nullptr && threadIdx.x == 0) {  // the row's (m, l), merged the same way once more
    const AttentionState<float> s =
        MergeAttentionStates<float>(kSimpleWarps, m_of, l_of, [](int) { return 0.0f; });
    p.lse[static_cast<std::int64_t>(batch_row) * p.num_q_heads + h] =
        NaturalLse<ScoreUnits::kLog2>(s.m, s.l);
  }
}

}  // namespace

Status SimpleSupports(const ModelShape& shape) {
  return CheckKernelShape(shape, kSimpleVariantName, /*reads_fp8=*/true);
}

StatusOr<DecodePlan> PlanSimple(const DecodePlanRequest& request) {
  ATTNRT_ASSIGN_OR_RETURN(DecodePlan plan, StartPlan(request, kSimpleVariantName, SimpleSupports));
  const bool fp8 = plan.shape.kv_cache_type == KvCacheType::kFp8E4M3;
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(plan.shape.head_dim, [&](auto head_dim) {
    constexpr int kHeadDim = decltype(head_dim)::value;
    plan.decode.fn = fp8 ? reinterpret_cast<const void*>(SimpleDecodeKernel<kHeadDim, true>)
                         : reinterpret_cast<const void*>(SimpleDecodeKernel<kHeadDim, false>);
  }));
  plan.decode.grid = dim3(plan.shape.num_q_heads, plan.capacity);
  plan.decode.threads = kSimpleThreads;
  return plan;
}

Status RunSimple(const DecodePlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                 DecodeWorkspace workspace, const DecodeRunContext& context) {
  ATTNRT_RETURN_IF_ERROR(StartRun(plan, kSimpleVariantName, batch, pools, workspace, context));
  PagedDecodeParams p = MakePagedDecodeParams(plan.shape, batch, pools);
  void* args[] = {&p};
  ATTNRT_CUDA_RETURN(cudaLaunchKernel(plan.decode.fn, plan.decode.grid, dim3(plan.decode.threads),
                                      args, plan.decode.smem_bytes, context.stream));
  return Status::Ok();
}

}  // namespace attnrt::kernels
