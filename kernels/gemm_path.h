// The cuBLAS GEMM path for paged decode attention: gather the batch's pages into a padded
// contiguous K/V workspace, QK^T and PV as strided-batched GEMMs, a masked softmax between them.
// Same inputs and outputs as every decode path (views.h); plan on the host, capture-safe run. The
// decode-variant table's "gemm" entry (decode.h) plans one Tpad bucket per graph and appends first.
// Internal header of kernels/ (includes CUDA headers; never included from api/).
//
// Stages of one run (5 kernels, 1 memset; all on `stream`):
//   1. gather   pages -> K,V workspace [capacity][Hkv][Tpad][D] FP16; rows >= length of V are
//               zeroed (P is 0 there, but 0 * Inf = NaN), K's pad rows are left alone (masked).
//   2. QK^T     cublasGemmStridedBatchedEx, batch count capacity*Hkv. GQA without copying K/V:
//               the G query heads of one kv head are the GEMM's N dimension, so one K tile
//               serves all G heads: S[b][g][t] = scale * q[b][g] . K[b][t]   (FP16 in, FP32
//               compute, FP32 scores [capacity][H][Tpad]).
//   3. softmax  per (slot, q head) row, masked at t >= kv_length: p[t] = fp16(exp(s[t] - max)),
//               unnormalised (max weight exactly 1), zero past the length; row max and the sum
//               of the *rounded* weights kept in FP32.
//   4. PV       cublasGemmStridedBatchedEx: O[b][g][:] = sum_t p[b][g][t] V[b][t][:] (FP16 in,
//               FP32 compute, FP32 O).
//   5. finalize out = fp16(O / sum), lse = max + log(sum), live slots only.
// Numerics: P in FP16 because the tensor-core GEMM wants both operands in one type and V is FP16;
// keeping P unnormalised (in (0, 1], the largest exactly 1) and dividing by the sum of the
// rounded weights makes the output an exact convex combination of V rows with weights off by
// <= 2^-11 relative, well inside the FP16 tolerance (max abs 2e-3) of the fused kernel.
//
// Lengths past Tpad. The run cannot see device-side lengths, so the host picks Tpad:
// ChooseGemmPathTpad(shape, longest length) before the run, and a caller that has the lengths on
// the host (the executor packs them) checks them with CheckGemmPathLengths (InvalidArgument
// naming the slot). If a live slot's length still exceeds Tpad (or its block-table row), the
// run never reads past Tpad: that slot's out and lse are written as NaN and counted in the
// workspace's overflow counter (ReadGemmPathOverflowCount); every other slot is unaffected.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kernels/views.h"

namespace attnrt::kernels {

// The path's name in the decode-variant table (kernels/decode.h), where it plans one Tpad bucket
// per graph and appends with the append kernel.
inline constexpr std::string_view kGemmVariantName = "gemm";
// Tpad is a multiple of this (16-byte aligned GEMM leading dimensions, whole gather tiles).
inline constexpr int kGemmPathTpadQuantum = 64;
// cuBLAS workspace per run (NVIDIA's recommendation for Hopper); cuBLAS must not allocate during
// capture, so the run hands it this slice with cublasSetWorkspace.
inline constexpr std::size_t kGemmPathCublasWorkspaceBytes = std::size_t{32} << 20;

// Tpad buckets of a shape, ascending: 64, 128, 256, ... (powers of two) and finally max_context
// rounded up to 64. One captured graph per (batch bucket, Tpad bucket).
std::vector<int> GemmPathTpadBuckets(const ModelShape& shape);
// Smallest bucket >= max_kv_length (>= 1). InvalidArgument if it exceeds shape.max_context.
StatusOr<int> ChooseGemmPathTpad(const ModelShape& shape, int max_kv_length);

// Where each piece lives in the one workspace (byte offsets, each 256-aligned).
struct GemmPathPlan {
  ModelShape shape;
  int capacity = 0;  // slots (the batch bucket)
  int t_pad = 0;     // padded context of the workspace, a multiple of kGemmPathTpadQuantum
  std::size_t k_offset = 0;        // FP16 [capacity][Hkv][Tpad][D]
  std::size_t v_offset = 0;        // FP16 [capacity][Hkv][Tpad][D]
  std::size_t scores_offset = 0;   // FP32 [capacity][H][Tpad]
  std::size_t probs_offset = 0;    // FP16 [capacity][H][Tpad]
  std::size_t row_max_offset = 0;  // FP32 [capacity][H]
  std::size_t row_sum_offset = 0;  // FP32 [capacity][H]
  std::size_t acc_offset = 0;      // FP32 [capacity][H][D]  (PV result before normalisation)
  std::size_t overflow_offset = 0; // int32: slots whose length exceeded Tpad in the last run
  std::size_t cublas_offset = 0;   // kGemmPathCublasWorkspaceBytes for cuBLAS
  std::size_t workspace_bytes = 0; // total; allocate once per plan (or the largest of several)

  int batch_count() const { return capacity * shape.num_kv_heads; }  // GEMMs per batched call
  // Bytes of K+V the gather writes (and the GEMMs read back): the KV's second and third trips.
  std::size_t kv_workspace_bytes() const {
    return std::size_t{2} * batch_count() * t_pad * shape.head_dim * 2;
  }
};

// Plans a run for (shape, capacity, Tpad). Host only; allocates nothing on the device.
// InvalidArgument for a bad shape, capacity < 1, or a Tpad that is not a positive multiple of
// kGemmPathTpadQuantum or exceeds shape.max_context rounded up to it.
StatusOr<GemmPathPlan> PlanGemmPath(const ModelShape& shape, int capacity, int t_pad);

// Host check of lengths the caller knows: InvalidArgument naming the first slot whose length is
// negative or exceeds plan.t_pad; size must equal plan.capacity.
Status CheckGemmPathLengths(const GemmPathPlan& plan, std::span<const std::int32_t> kv_lengths);

// Optional, once after allocating a workspace: zeroes it so that no kernel ever reads memory
// nothing wrote (padded slots' GEMM tiles; compute-sanitizer initcheck). Results never depend on it.
Status PrepareGemmPathWorkspace(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                cudaStream_t stream);

// Runs the five stages for every live slot of `batch` (after the append: the new token is already
// in the pools, LaunchAppendKv). Capture-safe: no allocation, no host sync, a fixed grid and
// fixed cuBLAS calls for a given plan; any kv_lengths up to plan.t_pad. `shape`, the batch and the
// pools must match the plan (InvalidArgument naming the field otherwise). Sets `cublas`'s stream
// and workspace (to the plan's slice of `workspace`) on every call; the handle must not be used
// concurrently from another thread. Padded slots (kv_length 0): out and lse untouched.
Status RunGemmPath(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas,
                   cudaStream_t stream);

// Diagnostics (not capture-safe: synchronises `stream`): slots of the last run whose length
// exceeded Tpad or their block-table row.
StatusOr<int> ReadGemmPathOverflowCount(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                        cudaStream_t stream);

// The stages one by one, for the stage-breakdown benchmark (RunGemmPath = all five in order,
// after the overflow counter's memset). Same preconditions as RunGemmPath.
enum class GemmPathStage { kGather, kScores, kSoftmax, kPv, kFinalize };
inline constexpr GemmPathStage kGemmPathStages[] = {GemmPathStage::kGather, GemmPathStage::kScores,
                                                    GemmPathStage::kSoftmax, GemmPathStage::kPv,
                                                    GemmPathStage::kFinalize};
const char* GemmPathStageName(GemmPathStage stage);
Status RunGemmPathStage(GemmPathStage stage, const GemmPathPlan& plan, const ModelShape& shape,
                        const DecodeBatchView& batch, const KvPoolView& pools,
                        DecodeWorkspace workspace, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace attnrt::kernels
