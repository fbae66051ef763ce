// Batch I/O kernels for device-memory requests of the CUDA executor: a gather kernel copies each
// such batch row's q/k/v from the caller's device pointers into the executor's fixed input
// buffers, and a scatter kernel copies out/lse back to the caller's pointers. One CTA per row;
// rows with kv_length 0 (padding) or a null pointer (host-memory requests) exit at once. The
// same launch configuration serves eager launches and graph kernel nodes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <attnrt/half.h>
#include <attnrt/status.h>

namespace attnrt::kernels {

struct BatchIoArgs {
  int capacity = 0;                   // batch rows (grid size)
  int q_elems = 0;                    // H * D
  int kv_elems = 0;                   // Hkv * D
  int num_q_heads = 0;                // H (LSE elements per batch row)
  const std::int32_t* kv_lengths = nullptr;  // [capacity], device
  // [capacity] caller device pointers (0 for host-memory requests), device copies.
  const std::uint64_t* q_ptrs = nullptr;
  const std::uint64_t* k_ptrs = nullptr;
  const std::uint64_t* v_ptrs = nullptr;
  const std::uint64_t* out_ptrs = nullptr;
  const std::uint64_t* lse_ptrs = nullptr;
  // The executor's fixed buffers.
  Half* q = nullptr;            // [capacity][H][D]
  Half* k = nullptr;            // [capacity][Hkv][D]
  Half* v = nullptr;            // [capacity][Hkv][D]
  const Half* out = nullptr;    // [capacity][H][D]
  const float* lse = nullptr;   // [capacity][H]
};

// The same kernels as graph kernel nodes (the node keeps its own copy of `args`).
Status AddGatherNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                     const BatchIoArgs& args, cudaGraphNode_t* node);
Status AddScatterNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                      const BatchIoArgs& args, cudaGraphNode_t* node);

// A kernel node that copies `bytes` from `from` to `to` (both 16-byte aligned; either may be
// pinned host memory, which the SMs then read or write over PCIe). For transfers of tens of
// kilobytes it completes several microseconds sooner than a memcpy node (H100, PCIe:
// bench/NOTES.md, "zero-copy"); InvalidArgument for unaligned pointers.
Status AddCopyNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                   const void* from, void* to, std::size_t bytes, cudaGraphNode_t* node);

// A step's metadata from the executor's pinned staging (device-addressable) to its device
// mirror, copying of each block-table row only the blocks its kv_length needs: the rest of a
// row is never read (kernels stop at kv_length), and a row holds max_context's blocks, so a
// whole-region copy moved up to max_blocks / needed times the bytes (a bucket of 128 at
// max_context 32768: 1 MB a step). Layout: [0, head_bytes) and [tail, end) copied whole
// (lengths, layers; the pointer arrays), the int32 table of `capacity` rows of `max_blocks` at
// `tables`; every offset 16-byte aligned.
struct MetadataCopyArgs {
  const unsigned char* from = nullptr;  // pinned host staging (device-addressable)
  unsigned char* to = nullptr;          // its device mirror
  std::size_t head_bytes = 0;
  std::size_t kv_lengths = 0;  // offset of the int32 kv_lengths[capacity], inside the head
  std::size_t tables = 0;
  std::size_t tail = 0, end = 0;
  int capacity = 0, max_blocks = 0, block_size = 0;
};
// As a graph kernel node: one CTA per row plus one for the whole regions.
Status AddMetadataCopyNode(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                           const MetadataCopyArgs& args, cudaGraphNode_t* node);

Status LaunchGather(const BatchIoArgs& args, cudaStream_t stream);
Status LaunchScatter(const BatchIoArgs& args, cudaStream_t stream);

// Issues a launch with an invalid configuration on `stream`: a real, non-sticky CUDA error for
// failure-injection tests. Always returns the error Status.
Status LaunchInvalidForTesting(cudaStream_t stream);

}  // namespace attnrt::kernels
