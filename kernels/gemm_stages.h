// Internal parts of the GEMM path shared by its run (gemm_path.cu) and the benchmark baselines
// (gemm_baselines.cu): the workspace's typed pointers, the run's validation, the pieces a plan
// cuts a run into, and the non-GEMM kernels' launchers. Not for use outside kernels/gemm_*.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kernels/decode.h"
#include "kernels/gemm_path.h"
#include "kernels/views.h"

namespace attnrt::kernels::gemm_detail {

struct GemmPathBuffers {
  __half* k = nullptr;
  __half* v = nullptr;
  float* scores = nullptr;
  __half* probs = nullptr;
  float* row_max = nullptr;  // running state
  float* row_sum = nullptr;
  float* acc = nullptr;
  float* chunk_max = nullptr;  // state of chunk c >= 1 (null when the plan has one chunk)
  float* chunk_sum = nullptr;
  float* chunk_acc = nullptr;
  int* overflow = nullptr;
  void* cublas = nullptr;
};

GemmPathBuffers Buffers(const GemmPathPlan& plan, DecodeWorkspace workspace);

// One piece of a run: batch rows [first_batch_row, first_batch_row + num_batch_rows) (slice
// `slice`) over the tokens of chunk `chunk`, [chunk * plan.chunk_tokens, (chunk + 1) *
// plan.chunk_tokens).
struct GemmPathPiece {
  int slice = 0;
  int first_batch_row = 0;
  int num_batch_rows = 0;
  int chunk = 0;
};
GemmPathPiece Piece(const GemmPathPlan& plan, int slice, int chunk);

// Host checks shared by every run (shape/batch/pools/workspace/handle against the plan).
Status ValidateRun(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas);
// The baselines run a plan as one piece: FailedPrecondition naming the pieces otherwise.
Status CheckOnePiece(const GemmPathPlan& plan);

// Points `cublas` at `stream`, the plan's workspace slice and host scalars.
Status BindCublas(const GemmPathBuffers& buffers, cublasHandle_t cublas, cudaStream_t stream);

// Stage 1 for the piece's batch rows and chunk.
Status LaunchGather(const GemmPathPlan& plan, const GemmPathPiece& piece,
                    const DecodeBatchView& batch, const KvPoolView& pools,
                    const GemmPathBuffers& buffers, cudaStream_t stream);
// Stage 3 for the piece's rows [row_begin, row_begin + num_rows) (the slice's (batch row, q
// head) rows: batch row in the slice * H + q head). Chunk 0 writes the running state, later
// chunks the chunk state.
Status LaunchSoftmax(const GemmPathPlan& plan, const GemmPathPiece& piece,
                     const DecodeBatchView& batch, const KvPoolView& pools,
                     const GemmPathBuffers& buffers, int row_begin, int num_rows,
                     cudaStream_t stream);
// Stage 5 (chunks 1 .. n-2) or 6 (`final`: the slice's last chunk, then the output; counts
// invalid batch rows into buffers.overflow) for the piece's rows.
Status LaunchMerge(const GemmPathPlan& plan, const GemmPathPiece& piece,
                   const DecodeBatchView& batch, const KvPoolView& pools,
                   const GemmPathBuffers& buffers, bool final, cudaStream_t stream);

}  // namespace attnrt::kernels::gemm_detail
