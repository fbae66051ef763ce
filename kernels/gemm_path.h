// The cuBLAS GEMM path for paged decode attention: gather the batch's pages into a padded
// contiguous K/V workspace, QK^T and PV as strided-batched GEMMs, a masked softmax between them.
// Same inputs and outputs as every decode path (views.h); plan on the host, capture-safe run. The
// decode-variant table's "gemm" entry (decode.h) plans one Tpad bucket per graph and appends first.
// Internal header of kernels/ (includes CUDA headers; never included from api/).
//
// Pieces. The workspace holds one piece: S batch rows (a slice) x C tokens (a context chunk).
// The plan picks S and C from (shape, capacity, Tpad) and a workspace budget: the whole batch and
// the whole Tpad when that fits; else the whole batch in the fewest chunks of equal length; only
// when even one Tpad quantum of the whole batch is over budget, the fewest equal slices of the
// batch, each in chunks. A run walks a fixed sequence, slice by slice, chunk by chunk, whatever
// the lengths (capture-safe: the same launches for any kv_lengths up to Tpad).
//
// Stages of one piece (all on `stream`):
//   1. gather   the chunk's pages -> K,V workspace [S][Hkv][C][D] FP16; rows >= length of V are
//               zeroed (P is 0 there, but 0 * Inf = NaN), K's pad rows are left alone (masked).
//               A row whose length ends before the chunk writes nothing.
//   2. QK^T     cublasGemmStridedBatchedEx, batch count S*Hkv. GQA without copying K/V: the G
//               query heads of one kv head are the GEMM's N dimension, so one K tile serves all
//               G heads: S[b][g][t] = scale * q[b][g] . K[b][t]   (FP16 in, FP32 compute, FP32
//               scores [S][H][C]).
//   3. softmax  per (batch row, q head) row, masked at t >= kv_length: p[t] = fp16(e^(s[t] - max)),
//               unnormalised (max weight exactly 1), zero past the length; the chunk's max (in
//               log2 units) and the sum of the *rounded* weights kept in FP32 -- chunk 0's as
//               the running state, later chunks' beside it. A chunk past the length: no state.
//   4. PV       cublasGemmStridedBatchedEx: O[b][g][:] = sum_t p[b][g][t] V[b][t][:] (FP16 in,
//               FP32 compute, FP32 O; chunk 0 into the running state's acc).
//   5. merge    chunks 1 .. n-2: the chunk's (max, sum, O) merged into the running state with the
//               one attention merge of every decode path (kernels/attention_merge.cuh).
//   6. finalize the last chunk merged the same way, then out = fp16(acc / sum), lse, live rows.
// With one chunk there is nothing to merge: finalize stores the running state, as before chunks.
// Numerics: P in FP16 because the tensor-core GEMM wants both operands in one type and V is FP16;
// keeping P unnormalised (in (0, 1], the largest exactly 1) and dividing by the sum of the
// rounded weights makes each chunk's output an exact convex combination of V rows with weights
// off by <= 2^-11 relative; the merge rescales whole chunk states in FP32 (as split-KV merges its
// splits), well inside the FP16 tolerance (max abs 2e-3) of the fused kernel.
//
// Lengths past Tpad. The run cannot see device-side lengths, so the host picks Tpad:
// ChooseGemmPathTpad(shape, longest length) before the run, and a caller that has the lengths on
// the host (the executor packs them) checks them with CheckGemmPathLengths (InvalidArgument
// naming the row). If a live row's length still exceeds Tpad (or its block-table row), the run
// never reads past Tpad: that row's out and lse are written as NaN and counted in the
// workspace's overflow counter (ReadGemmPathOverflowCount); every other row is unaffected.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
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
// The workspace budget a plan keeps to when its caller names none: the CUDA executor's default
// gemm_max_workspace_bytes.
inline constexpr std::size_t kGemmPathDefaultMaxWorkspaceBytes = std::size_t{1} << 30;

// Tpad buckets of a shape, ascending: 64, 128, 256, ... (powers of two) and finally max_context
// rounded up to 64. One captured graph per (batch bucket, Tpad bucket).
std::vector<int> GemmPathTpadBuckets(const ModelShape& shape);
// Smallest bucket >= max_kv_length (>= 1). InvalidArgument if it exceeds shape.max_context.
StatusOr<int> ChooseGemmPathTpad(const ModelShape& shape, int max_kv_length);

// How a run is cut into pieces and where each buffer of one piece lives in the one workspace
// (byte offsets, each 256-aligned). Buffers are sized for one piece: S = slice_rows batch rows by
// C = chunk_tokens tokens; every piece reuses them.
struct GemmPathPlan {
  ModelShape shape;
  int capacity = 0;      // batch rows (the batch bucket)
  int t_pad = 0;         // padded context, a multiple of kGemmPathTpadQuantum
  int chunk_tokens = 0;  // C: tokens per chunk, a multiple of kGemmPathTpadQuantum, <= t_pad
  int num_chunks = 0;    // ceil(t_pad / C); chunk c covers tokens [c*C, (c+1)*C)
  int slice_rows = 0;    // S: batch rows per slice (the last slice may have fewer)
  int num_slices = 0;    // ceil(capacity / S)
  std::size_t k_offset = 0;          // FP16 [S][Hkv][C][D]
  std::size_t v_offset = 0;          // FP16 [S][Hkv][C][D]
  std::size_t scores_offset = 0;     // FP32 [S][H][C]
  std::size_t probs_offset = 0;      // FP16 [S][H][C]
  std::size_t row_max_offset = 0;    // FP32 [S][H]     running state: max (log2 units),
  std::size_t row_sum_offset = 0;    // FP32 [S][H]       sum of weights,
  std::size_t acc_offset = 0;        // FP32 [S][H][D]    unnormalised output (chunk 0's PV)
  std::size_t chunk_max_offset = 0;  // FP32 [S][H]     the state of chunk c >= 1 before its
  std::size_t chunk_sum_offset = 0;  // FP32 [S][H]       merge (0 bytes when num_chunks == 1)
  std::size_t chunk_acc_offset = 0;  // FP32 [S][H][D]
  std::size_t overflow_offset = 0;   // int32: rows whose length exceeded Tpad in the last run
  std::size_t cublas_offset = 0;     // kGemmPathCublasWorkspaceBytes for cuBLAS
  std::size_t workspace_bytes = 0;   // total; allocate once per plan (or the largest of several)

  int batch_count() const { return slice_rows * shape.num_kv_heads; }  // GEMMs of a full slice
  // Batch rows of slice i (the last one holds what is left).
  int rows_in_slice(int i) const { return std::min(slice_rows, capacity - i * slice_rows); }
  int pieces() const { return num_slices * num_chunks; }
  // Bytes of K+V the gather writes over a run with every row at Tpad (and the GEMMs read back):
  // the KV's second and third trips.
  std::size_t kv_workspace_bytes() const {
    return std::size_t{2} * capacity * shape.num_kv_heads * num_chunks * chunk_tokens *
           shape.head_dim * 2;
  }
};

// Plans a run for (shape, capacity, Tpad) whose workspace is at most max_workspace_bytes, cut
// into pieces as the header comment says. Host only; allocates nothing on the device.
// InvalidArgument for a bad shape, capacity < 1, or a Tpad that is not a positive multiple of
// kGemmPathTpadQuantum or exceeds shape.max_context rounded up to it; ResourceExhausted naming
// both sizes when even one batch row by one Tpad quantum exceeds the budget.
StatusOr<GemmPathPlan> PlanGemmPath(const ModelShape& shape, int capacity, int t_pad,
                                    std::size_t max_workspace_bytes =
                                        kGemmPathDefaultMaxWorkspaceBytes);

// Host check of lengths the caller knows: InvalidArgument naming the first row whose length is
// negative or exceeds plan.t_pad; size must equal plan.capacity.
Status CheckGemmPathLengths(const GemmPathPlan& plan, std::span<const std::int32_t> kv_lengths);

// Optional, once after allocating a workspace: zeroes it so that no kernel ever reads memory
// nothing wrote (padded rows' GEMM tiles; compute-sanitizer initcheck). Results never depend on it.
Status PrepareGemmPathWorkspace(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                cudaStream_t stream);

// Runs every piece's stages for every live row of `batch` (after the append: the new token is
// already in the pools, LaunchAppendKv). Capture-safe: no allocation, no host sync, fixed grids
// and fixed cuBLAS calls for a given plan (every piece, whatever the lengths); any kv_lengths up
// to plan.t_pad. `shape`, the batch and the pools must match the plan (InvalidArgument naming the
// field otherwise). Sets `cublas`'s stream and workspace (to the plan's slice of `workspace`) on
// every call; the handle must not be used concurrently from another thread. Padded rows
// (kv_length 0): out and lse untouched.
Status RunGemmPath(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas,
                   cudaStream_t stream);

// Diagnostics (not capture-safe: synchronises `stream`): rows of the last run whose length
// exceeded Tpad or their block-table row.
StatusOr<int> ReadGemmPathOverflowCount(const GemmPathPlan& plan, DecodeWorkspace workspace,
                                        cudaStream_t stream);

// The stages one by one, for the stage-breakdown benchmark: each over every piece the run has
// it for (kMerge: chunks 1 .. n-2 of each slice; kFinalize: once per slice). RunGemmPath runs
// them interleaved, piece by piece, after the overflow counter's memset; run one at a time over
// a plan of several pieces they compute no attention (each piece overwrites the last one's
// buffers): only their times mean anything then. Same preconditions as RunGemmPath.
enum class GemmPathStage { kGather, kScores, kSoftmax, kPv, kMerge, kFinalize };
inline constexpr GemmPathStage kGemmPathStages[] = {
    GemmPathStage::kGather, GemmPathStage::kScores, GemmPathStage::kSoftmax,
    GemmPathStage::kPv,     GemmPathStage::kMerge,  GemmPathStage::kFinalize};
const char* GemmPathStageName(GemmPathStage stage);
Status RunGemmPathStage(GemmPathStage stage, const GemmPathPlan& plan, const ModelShape& shape,
                        const DecodeBatchView& batch, const KvPoolView& pools,
                        DecodeWorkspace workspace, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace attnrt::kernels
