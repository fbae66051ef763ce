// Baselines of the GEMM path, for benchmarks and the studies only (never production): the same
// plan, workspace, gather, softmax and finalize kernels and the same numerics (FP16 operands,
// FP32 compute, FP16 weights), with the two GEMMs issued differently. Each runs a plan of one
// piece (one slice, one chunk: a max_workspace_bytes that holds the whole batch at Tpad), and
// answers FailedPrecondition for any other:
//   iterative      a host loop over (batch row, head): cublasGemmEx QK^T over the row's exact
//                  length, one softmax launch over the head's rows, cublasGemmEx PV. 3 launches
//                  per (batch row, head) plus gather and finalize; needs the lengths on the host.
//                  "head" is a query head (the literal per-head loop: a GEMV each, K re-read by
//                  the G heads of a group) or a kv head (G query heads per GEMM, as the path).
//   pointer-array  cublasGemmBatchedEx over the same [capacity*Hkv] problems as the strided path,
//                  addressed through device arrays of pointers built once (PrepareGemmPointerArrays).
//   big GEMM       an upper bound, not attention: each GEMM issued as ONE cublasGemmEx over the
//                  whole workspace with the same FLOPs and bytes (K_all[capacity*Hkv*Tpad x D]
//                  times row 0's q group; V_all^T times the weights viewed as one matrix). Its
//                  output is meaningless; only its time is.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kernels/decode.h"
#include "kernels/gemm_path.h"
#include "kernels/views.h"

namespace attnrt::kernels {

enum class GemmIterationGrain { kQueryHead, kKvHead };

// `host_kv_lengths` must equal the device batch.kv_lengths (size plan.capacity, each <= Tpad).
Status RunGemmIterative(const GemmPathPlan& plan, const ModelShape& shape,
                        const DecodeBatchView& batch, const KvPoolView& pools,
                        std::span<const std::int32_t> host_kv_lengths, DecodeWorkspace workspace,
                        cublasHandle_t cublas, cudaStream_t stream,
                        GemmIterationGrain grain = GemmIterationGrain::kQueryHead);

// Device bytes for the six pointer arrays of the pointer-array baseline.
std::size_t GemmPointerArrayBytes(const GemmPathPlan& plan);
// Builds the arrays for this batch's q/out-independent operands (q and the workspace) into
// `arrays` (synchronous copy; not capture-safe). Valid while batch.q and workspace stay put.
Status PrepareGemmPointerArrays(const GemmPathPlan& plan, const DecodeBatchView& batch,
                                DecodeWorkspace workspace, DecodeWorkspace arrays);
Status RunGemmPointerBatched(const GemmPathPlan& plan, const ModelShape& shape,
                             const DecodeBatchView& batch, const KvPoolView& pools,
                             DecodeWorkspace workspace, DecodeWorkspace arrays,
                             cublasHandle_t cublas, cudaStream_t stream);

// Upper bound (output not attention; see above). Capture-safe like RunGemmPath.
Status RunGemmBigGemm(const GemmPathPlan& plan, const ModelShape& shape,
                      const DecodeBatchView& batch, const KvPoolView& pools,
                      DecodeWorkspace workspace, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace attnrt::kernels
