// GEMM-path baselines for the benchmarks (contract in gemm_baselines.h). Each reuses the path's
// gather/softmax/finalize launchers and differs only in how the two GEMMs are issued.
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "api/internal/cuda_check.h"
#include "kernels/gemm_baselines.h"
#include "kernels/gemm_stages.h"

namespace attnrt::kernels {

using gemm_detail::Buffers;
using gemm_detail::GemmPathBuffers;
using gemm_detail::GemmPathPiece;

Status RunGemmIterative(const GemmPathPlan& plan, const ModelShape& shape,
                        const DecodeBatchView& batch, const KvPoolView& pools,
                        std::span<const std::int32_t> host_kv_lengths, DecodeWorkspace workspace,
                        cublasHandle_t cublas, cudaStream_t stream, GemmIterationGrain grain) {
  ATTNRT_RETURN_IF_ERROR(gemm_detail::ValidateRun(plan, shape, batch, pools, workspace, cublas));
  ATTNRT_RETURN_IF_ERROR(gemm_detail::CheckOnePiece(plan));
  ATTNRT_RETURN_IF_ERROR(CheckGemmPathLengths(plan, host_kv_lengths));
  const GemmPathBuffers buf = Buffers(plan, workspace);
  const GemmPathPiece all = gemm_detail::Piece(plan, 0, 0);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(buf.overflow, 0, sizeof(int), stream));
  ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchGather(plan, all, batch, pools, buf, stream));
  const int h = shape.num_q_heads;
  const int g = shape.group_size();
  const int d = shape.head_dim;
  // One GEMM pair covers `rows` query heads sharing one kv head.
  const int rows = grain == GemmIterationGrain::kKvHead ? g : 1;
  const std::int64_t t_pad = plan.t_pad;
  const float alpha = batch.scale;
  const float zero = 0.0f;
  const float one = 1.0f;
  const __half* q = reinterpret_cast<const __half*>(batch.q);
  for (int batch_row = 0; batch_row < plan.capacity; ++batch_row) {
    const int len = host_kv_lengths[batch_row];
    if (len == 0) continue;
    for (int head = 0; head < h; head += rows) {
      const std::int64_t bh = static_cast<std::int64_t>(batch_row) * shape.num_kv_heads + head / g;
      const std::int64_t row = static_cast<std::int64_t>(batch_row) * h + head;
      ATTNRT_CUBLAS_RETURN(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, len, rows, d, &alpha,
                                        buf.k + bh * t_pad * d, CUDA_R_16F, d, q + row * d,
                                        CUDA_R_16F, d, &zero, buf.scores + row * t_pad,
                                        CUDA_R_32F, plan.t_pad, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
      ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchSoftmax(plan, all, batch, pools, buf,
                                                        static_cast<int>(row), rows, stream));
      ATTNRT_CUBLAS_RETURN(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, rows, len, &one,
                                        buf.v + bh * t_pad * d, CUDA_R_16F, d,
                                        buf.probs + row * t_pad, CUDA_R_16F, plan.t_pad, &zero,
                                        buf.acc + row * d, CUDA_R_32F, d, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
    }
  }
  return gemm_detail::LaunchMerge(plan, all, batch, pools, buf, /*final=*/true, stream);
}

namespace {
enum PointerArray { kQkA, kQkB, kQkC, kPvA, kPvB, kPvC, kNumPointerArrays };
}  // namespace

std::size_t GemmPointerArrayBytes(const GemmPathPlan& plan) {
  return sizeof(void*) * kNumPointerArrays * static_cast<std::size_t>(plan.batch_count());
}

Status PrepareGemmPointerArrays(const GemmPathPlan& plan, const DecodeBatchView& batch,
                                DecodeWorkspace workspace, DecodeWorkspace arrays) {
  if (arrays.data == nullptr || arrays.bytes < GemmPointerArrayBytes(plan)) {
    return InvalidArgumentError("arrays.bytes = " + std::to_string(arrays.bytes) +
                                ", expected >= " + std::to_string(GemmPointerArrayBytes(plan)));
  }
  if (workspace.data == nullptr || batch.q == nullptr) {
    return InvalidArgumentError("workspace.data and batch.q must be set");
  }
  ATTNRT_RETURN_IF_ERROR(gemm_detail::CheckOnePiece(plan));
  const GemmPathBuffers buf = Buffers(plan, workspace);
  const int n = plan.batch_count();
  const int g = plan.shape.group_size();
  const int d = plan.shape.head_dim;
  const std::int64_t t_pad = plan.t_pad;
  const __half* q = reinterpret_cast<const __half*>(batch.q);
  std::vector<const void*> host(static_cast<std::size_t>(kNumPointerArrays) * n);
  for (int b = 0; b < n; ++b) {
    host[kQkA * n + b] = buf.k + b * t_pad * d;
    host[kQkB * n + b] = q + static_cast<std::int64_t>(b) * g * d;
    host[kQkC * n + b] = buf.scores + b * g * t_pad;
    host[kPvA * n + b] = buf.v + b * t_pad * d;
    host[kPvB * n + b] = buf.probs + b * g * t_pad;
    host[kPvC * n + b] = buf.acc + static_cast<std::int64_t>(b) * g * d;
  }
  ATTNRT_CUDA_RETURN(cudaMemcpy(arrays.data, host.data(), host.size() * sizeof(void*),
                                cudaMemcpyHostToDevice));
  return Status::Ok();
}

Status RunGemmPointerBatched(const GemmPathPlan& plan, const ModelShape& shape,
                             const DecodeBatchView& batch, const KvPoolView& pools,
                             DecodeWorkspace workspace, DecodeWorkspace arrays,
                             cublasHandle_t cublas, cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(gemm_detail::ValidateRun(plan, shape, batch, pools, workspace, cublas));
  if (arrays.data == nullptr || arrays.bytes < GemmPointerArrayBytes(plan)) {
    return InvalidArgumentError("arrays.bytes = " + std::to_string(arrays.bytes) +
                                ", expected >= " + std::to_string(GemmPointerArrayBytes(plan)));
  }
  ATTNRT_RETURN_IF_ERROR(gemm_detail::CheckOnePiece(plan));
  const GemmPathBuffers buf = Buffers(plan, workspace);
  const GemmPathPiece all = gemm_detail::Piece(plan, 0, 0);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(buf.overflow, 0, sizeof(int), stream));
  const int n = plan.batch_count();
  const int g = shape.group_size();
  const int d = shape.head_dim;
  void** ptr = static_cast<void**>(arrays.data);
  auto in = [&](int which) { return const_cast<const void* const*>(ptr + which * n); };
  const float alpha = batch.scale;
  const float zero = 0.0f;
  const float one = 1.0f;
  ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchGather(plan, all, batch, pools, buf, stream));
  ATTNRT_CUBLAS_RETURN(cublasGemmBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, plan.t_pad, g, d,
                                           &alpha, in(kQkA), CUDA_R_16F, d, in(kQkB), CUDA_R_16F,
                                           d, &zero, ptr + kQkC * n, CUDA_R_32F, plan.t_pad, n,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchSoftmax(plan, all, batch, pools, buf, 0,
                                                    plan.capacity * shape.num_q_heads, stream));
  ATTNRT_CUBLAS_RETURN(cublasGemmBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, g, plan.t_pad,
                                           &one, in(kPvA), CUDA_R_16F, d, in(kPvB), CUDA_R_16F,
                                           plan.t_pad, &zero, ptr + kPvC * n, CUDA_R_32F, d, n,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return gemm_detail::LaunchMerge(plan, all, batch, pools, buf, /*final=*/true, stream);
}

Status RunGemmBigGemm(const GemmPathPlan& plan, const ModelShape& shape,
                      const DecodeBatchView& batch, const KvPoolView& pools,
                      DecodeWorkspace workspace, cublasHandle_t cublas, cudaStream_t stream) {
  ATTNRT_RETURN_IF_ERROR(gemm_detail::ValidateRun(plan, shape, batch, pools, workspace, cublas));
  ATTNRT_RETURN_IF_ERROR(gemm_detail::CheckOnePiece(plan));
  const GemmPathBuffers buf = Buffers(plan, workspace);
  const GemmPathPiece all = gemm_detail::Piece(plan, 0, 0);
  ATTNRT_RETURN_IF_ERROR(gemm_detail::BindCublas(buf, cublas, stream));
  ATTNRT_CUDA_RETURN(cudaMemsetAsync(buf.overflow, 0, sizeof(int), stream));
  const int g = shape.group_size();
  const int d = shape.head_dim;
  // Every (batch row, kv head) tile stacked into one matrix: same FLOPs and bytes, one launch each.
  const int m_all = plan.batch_count() * plan.t_pad;
  const float alpha = batch.scale;
  const float zero = 0.0f;
  const float one = 1.0f;
  ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchGather(plan, all, batch, pools, buf, stream));
  ATTNRT_CUBLAS_RETURN(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, m_all, g, d, &alpha, buf.k,
                                    CUDA_R_16F, d, batch.q, CUDA_R_16F, d, &zero, buf.scores,
                                    CUDA_R_32F, m_all, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  ATTNRT_RETURN_IF_ERROR(gemm_detail::LaunchSoftmax(plan, all, batch, pools, buf, 0,
                                                    plan.capacity * shape.num_q_heads, stream));
  ATTNRT_CUBLAS_RETURN(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, d, g, m_all, &one, buf.v,
                                    CUDA_R_16F, d, buf.probs, CUDA_R_16F, m_all, &zero, buf.acc,
                                    CUDA_R_32F, d, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return gemm_detail::LaunchMerge(plan, all, batch, pools, buf, /*final=*/true, stream);
}

}  // namespace attnrt::kernels
