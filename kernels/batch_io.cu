// Gather/scatter kernels for device-memory requests (batch_io.h).
#include "kernels/batch_io.h"

#include "api/internal/cuda_check.h"

namespace attnrt::kernels {
namespace {

constexpr int kIoThreads = 128;

// Copies `elems` 2-byte elements; 16-byte vectors when both ends are 16-byte aligned (every
// row of H*D or Hkv*D halves is a multiple of 16 bytes for the supported head dims).
__device__ void CopyHalves(Half* dst, const Half* src, int elems) {
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (((d | s) & 15u) == 0 && (elems & 7) == 0) {
    uint4* dv = reinterpret_cast<uint4*>(dst);
    const uint4* sv = reinterpret_cast<const uint4*>(src);
    for (int i = threadIdx.x; i < elems / 8; i += blockDim.x) dv[i] = sv[i];
  } else {
    for (int i = threadIdx.x; i < elems; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void GatherInputsKernel(BatchIoArgs a) {
  const int batch_row = blockIdx.x;
  if (a.kv_lengths[batch_row] <= 0) return;  // padding
  const std::uint64_t q = a.q_ptrs[batch_row];
  if (q == 0) return;  // host-memory request: the memcpy node filled the buffers
  CopyHalves(a.q + static_cast<std::int64_t>(batch_row) * a.q_elems,
             reinterpret_cast<const Half*>(q), a.q_elems);
  CopyHalves(a.k + static_cast<std::int64_t>(batch_row) * a.kv_elems,
             reinterpret_cast<const Half*>(a.k_ptrs[batch_row]), a.kv_elems);
  CopyHalves(a.v + static_cast<std::int64_t>(batch_row) * a.kv_elems,
             reinterpret_cast<const Half*>(a.v_ptrs[batch_row]), a.kv_elems);
}

__global__ void ScatterOutputsKernel(BatchIoArgs a) {
  const int batch_row = blockIdx.x;
  if (a.kv_lengths[batch_row] <= 0) return;
  const std::uint64_t out = a.out_ptrs[batch_row];
  if (out == 0) return;  // host-memory request: the D2H node returns it
  CopyHalves(reinterpret_cast<Half*>(out), a.out + static_cast<std::int64_t>(batch_row) * a.q_elems,
             a.q_elems);
  const std::uint64_t lse = a.lse_ptrs[batch_row];
  if (lse != 0) {
    float* dst = reinterpret_cast<float*>(lse);
    const float* src = a.lse + static_cast<std::int64_t>(batch_row) * a.num_q_heads;
    for (int i = threadIdx.x; i < a.num_q_heads; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void NeverRunsKernel() {}

Status AddNode(void* func, cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
               const BatchIoArgs& args, cudaGraphNode_t* node) {
  BatchIoArgs copy = args;
  void* params[1] = {&copy};  // the node copies the argument at creation
  cudaKernelNodeParams p{};
  p.func = func;
  p.gridDim = dim3(static_cast<unsigned>(args.capacity));
  p.blockDim = dim3(kIoThreads);
  p.sharedMemBytes = 0;
  p.kernelParams = params;
  p.extra = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphAddKernelNode(node, graph, deps, num_deps, &p));
  return Status::Ok();
}

}  // namespace

Status AddGatherNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                     const BatchIoArgs& args, cudaGraphNode_t* node) {
  return AddNode(reinterpret_cast<void*>(GatherInputsKernel), graph, deps, num_deps, args, node);
}

Status AddScatterNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                      const BatchIoArgs& args, cudaGraphNode_t* node) {
  return AddNode(reinterpret_cast<void*>(ScatterOutputsKernel), graph, deps, num_deps, args,
                 node);
}

Status LaunchGather(const BatchIoArgs& args, cudaStream_t stream) {
  GatherInputsKernel<<<args.capacity, kIoThreads, 0, stream>>>(args);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchScatter(const BatchIoArgs& args, cudaStream_t stream) {
  ScatterOutputsKernel<<<args.capacity, kIoThreads, 0, stream>>>(args);
  ATTNRT_CUDA_RETURN_LAUNCH();
  return Status::Ok();
}

Status LaunchInvalidForTesting(cudaStream_t stream) {
  NeverRunsKernel<<<0, 1, 0, stream>>>();  // a zero-sized grid: rejected at launch
  ATTNRT_CUDA_RETURN_LAUNCH();
  return InternalError("LaunchInvalidForTesting: the invalid launch was not rejected");
}

}  // namespace attnrt::kernels
