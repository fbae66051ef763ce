// Internal pieces of the GEMM path shared by its run (gemm_path.cu) and the benchmark baselines
// (gemm_baselines.cu): the workspace's typed pointers, the run's validation, and the three
// non-GEMM kernels' launchers. Not for use outside kernels/gemm_*.
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
  float* row_max = nullptr;
  float* row_sum = nullptr;
  float* acc = nullptr;
  int* overflow = nullptr;
  void* cublas = nullptr;
};

GemmPathBuffers Buffers(const GemmPathPlan& plan, DecodeWorkspace workspace);

// Host checks shared by every run (shape/batch/pools/workspace/handle against the plan).
Status ValidateRun(const GemmPathPlan& plan, const ModelShape& shape, const DecodeBatchView& batch,
                   const KvPoolView& pools, DecodeWorkspace workspace, cublasHandle_t cublas);

// Points `cublas` at `stream`, the plan's workspace slice and host scalars.
Status BindCublas(const GemmPathBuffers& buffers, cublasHandle_t cublas, cudaStream_t stream);

// Stage 1 for every slot.
Status LaunchGather(const GemmPathPlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                    const GemmPathBuffers& buffers, cudaStream_t stream);
// Stage 3 for rows [row_begin, row_begin + num_rows) of the [capacity][H] rows.
Status LaunchSoftmax(const GemmPathPlan& plan, const DecodeBatchView& batch, const KvPoolView& pools,
                     const GemmPathBuffers& buffers, int row_begin, int num_rows,
                     cudaStream_t stream);
// Stage 5 for every slot (counts invalid slots into buffers.overflow).
Status LaunchFinalize(const GemmPathPlan& plan, const DecodeBatchView& batch,
                      const KvPoolView& pools, const GemmPathBuffers& buffers, cudaStream_t stream);

}  // namespace attnrt::kernels::gemm_detail
