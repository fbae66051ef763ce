// Device helpers shared by the decode variants: 16-byte async copies, FP16x8 <-> FP32
// conversion, and the scaled-score constants. Internal to kernels/ (CUDA translation units only).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace attnrt::kernels {

// Scores are kept in log2 units (q pre-multiplied by scale * log2(e)) so the softmax uses exp2,
// one MUFU instruction; the natural-log LSE is lse2 * ln(2).
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Running-max start: finite, so exp2(kNoScore - m) is 0 and exp2(kNoScore - kNoScore) is 1
// (with -inf the first rescale would be exp2(-inf + inf) = NaN).
constexpr float kNoScore = -1.0e30f;

// 16 bytes global -> shared, bypassing L1 (each K/V byte is read once); zero-fills when !valid
// (src must still be a mapped address; it is not read).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
// 8 bytes global -> shared (cp.async.cg moves 16 only; .ca also allocates in L1), zero-filling
// when !valid like CpAsync16.
__device__ __forceinline__ void CpAsync8(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 8 FP16 values (one 16-byte vector) to FP32.
__device__ __forceinline__ void Half8ToFloat(const uint4& v, float (&out)[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ int Log2Pow2(int x) { return __ffs(x) - 1; }

// Where batch row `batch_row`'s new K (or V) of `kv_head` lies: at the request's own address
// (`rows`: DecodeBatchView::k_rows / v_rows, requests in place) or at the row of the batch's
// tensor (`tensor`: k_new / v_new, [capacity][Hkv][D] FP16).
__device__ __forceinline__ const void* NewKvOfRow(const std::uint64_t* rows, const void* tensor,
                                                  int batch_row, int num_kv_heads, int kv_head,
                                                  int head_dim) {
  const std::int64_t in_row = static_cast<std::int64_t>(kv_head) * head_dim * 2;
  if (rows != nullptr) return reinterpret_cast<const char*>(rows[batch_row]) + in_row;
  return static_cast<const char*>(tensor) +
         static_cast<std::int64_t>(batch_row) * num_kv_heads * head_dim * 2 + in_row;
}

}  // namespace attnrt::kernels

namespace attnrt::kernels {

// Programmatic dependent launch (sm_90): a kernel launched with the PDL attribute may start
// while its predecessor finishes. It must wait before reading anything the predecessor wrote;
// it lets its own dependents launch early once all its CTAs are resident. Both are no-ops for a
// kernel launched without the attribute.
__device__ __forceinline__ void WaitForPrerequisiteGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace attnrt::kernels
