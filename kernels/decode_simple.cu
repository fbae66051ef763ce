// Variant "simple": one CTA per (batch row, q head); each warp walks every 4th token with an online
// softmax, the four warps merge at the end. No split, no workspace, scalar page-table lookups:
// the correctness baseline the tuned variant is measured against (it re-reads each K/V byte
// once per q head of a GQA group).
// Issue 17: the four warps' merge and the output store are attention_merge.cuh's (same arithmetic
// in the same order, same registers on sm_90); PlanSimple fixes kernel and grid once, RunSimple
// launches them.
#include <cstdint>

#include "kernels/attention_merge.cuh"
#include "api/internal/cuda_check.h"
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
  const int batch_row = blockIdx.y;
  const int len = p.kv_lengths[batch_row];
  if (len <= 0) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_head = h / p.group;
  const int block_size = 1 << p.log2_block_size;

  const std::int64_t q_row = (static_cast<std::int64_t>(batch_row) * p.num_q_heads + h) * kHeadDim;
  float q[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    q[e] = __half2float(reinterpret_cast<const __half*>(p.q)[q_row + lane * kPerLane + e]) *
           p.scale_log2;
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
  return CheckKernelShape(shape, kSimpleVariantName);
}

StatusOr<DecodePlan> PlanSimple(const DecodePlanRequest& request) {
  ATTNRT_ASSIGN_OR_RETURN(DecodePlan plan, StartPlan(request, kSimpleVariantName, SimpleSupports));
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(plan.shape.head_dim, [&](auto head_dim) {
    plan.decode.fn = reinterpret_cast<const void*>(SimpleDecodeKernel<decltype(head_dim)::value>);
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
