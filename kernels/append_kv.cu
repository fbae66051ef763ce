// Append-KV: copies the new K and V ([Hkv][D] each, from the batch's k_new/v_new or in place at
// k_rows/v_rows) of each live batch row into the page that holds position kv_length - 1 of its
// layer. One CTA per row, 16-byte copies; padded rows exit.
// An FP8 E4M3 cache stores each element quantized under its (layer, kv head) scale
// (api/internal/fp8_e4m3.h, the host's codec): 8 codes per 16-byte read.
#include <cstdint>
#include <string>

#include "api/internal/cuda_check.h"
#include "api/internal/fp8_e4m3.h"
#include "kernels/decode.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"
#include "kernels/fp8_device.cuh"

namespace attnrt::kernels {
namespace {

constexpr int kAppendThreads = 128;

template <bool kFp8>
__global__ void __launch_bounds__(kAppendThreads)
    AppendKvKernel(const std::int32_t* __restrict__ kv_lengths,
                   const std::int32_t* __restrict__ layers,
                   const std::int32_t* __restrict__ block_tables, int max_blocks_per_seq,
                   const Half* __restrict__ k_new, const Half* __restrict__ v_new,
                   const std::uint64_t* __restrict__ k_rows,
                   const std::uint64_t* __restrict__ v_rows, Half* k_pool,
                   Half* v_pool, std::int64_t layer_stride, std::int64_t block_stride,
                   int block_size, int head_dim, int num_kv_heads, const float* kv_scales,
                   int num_layers) {
  WaitForPrerequisiteGrids();  // lengths, tables and k/v_new may come from a kernel just before
  AllowDependentLaunch();      // the decode kernel may launch and wait for this one to finish
  const int batch_row = blockIdx.x;
  const int len = kv_lengths[batch_row];
  if (len <= 0) return;
  const int pos = len - 1;
  const std::int64_t block =
      block_tables[static_cast<std::int64_t>(batch_row) * max_blocks_per_seq + pos / block_size];
  const int layer = layers[batch_row];
  const std::int64_t page = layer * layer_stride + block * block_stride +
                            static_cast<std::int64_t>(pos % block_size) * head_dim;
  const int vecs_per_row = head_dim / 8;  // 8 halves = 16 bytes
  const int vecs = num_kv_heads * vecs_per_row;
  // The row's [Hkv][D] of new K and V: in place or in the batch's tensors.
  const uint4* k_src =
      static_cast<const uint4*>(NewKvOfRow(k_rows, k_new, batch_row, num_kv_heads, 0, head_dim));
  const uint4* v_src =
      static_cast<const uint4*>(NewKvOfRow(v_rows, v_new, batch_row, num_kv_heads, 0, head_dim));
  for (int i = threadIdx.x; i < vecs; i += kAppendThreads) {
    const int h = i / vecs_per_row;
    const int j = i % vecs_per_row;
    const std::int64_t dst = page + static_cast<std::int64_t>(h) * block_size * head_dim + j * 8;
    if constexpr (kFp8) {
      // Element offsets are byte offsets in a pool of codes.
      const float k_scale = kv_scales[layer * num_kv_heads + h];
      const float v_scale = kv_scales[(num_layers + layer) * num_kv_heads + h];
      const uint2 kc = QuantizeHalf8(k_src[i], k_scale);
      const uint2 vc = QuantizeHalf8(v_src[i], v_scale);
      *reinterpret_cast<uint2*>(reinterpret_cast<std::uint8_t*>(k_pool) + dst) = kc;
      *reinterpret_cast<uint2*>(reinterpret_cast<std::uint8_t*>(v_pool) + dst) = vc;
    } else {
      *reinterpret_cast<uint4*>(k_pool + dst) = k_src[i];
      *reinterpret_cast<uint4*>(v_pool + dst) = v_src[i];
    }
  }
}

}  // namespace

Status LaunchAppendKv(const DecodeBatchView& batch, const KvPoolView& pools, cudaStream_t stream) {
  if (batch.capacity < 0 || batch.capacity > kMaxDecodeCapacity) {
    return InvalidArgumentError("batch.capacity = " + std::to_string(batch.capacity) +
                                ", expected 0.." + std::to_string(kMaxDecodeCapacity));
  }
  if (pools.head_dim <= 0 || pools.head_dim % 8 != 0) {
    return InvalidArgumentError("pools.head_dim = " + std::to_string(pools.head_dim) +
                                ", expected a positive multiple of 8");
  }
  if (pools.block_size <= 0 || pools.num_kv_heads <= 0) {
    return InvalidArgumentError("pools.block_size = " + std::to_string(pools.block_size) +
                                ", pools.num_kv_heads = " + std::to_string(pools.num_kv_heads) +
                                ", expected both > 0");
  }
  if (batch.capacity == 0) return Status::Ok();
  struct Pointer {
    const char* name;
    const void* p;
    std::size_t alignment;
  };
  for (const Pointer& ptr : {Pointer{"batch.kv_lengths", batch.kv_lengths, 4},
                             Pointer{"batch.layers", batch.layers, 4},
                             Pointer{"batch.block_tables", batch.block_tables, 4},
                             Pointer{"pools.k", pools.k, 16}, Pointer{"pools.v", pools.v, 16}}) {
    ATTNRT_RETURN_IF_ERROR(CheckDevicePointer(ptr.name, ptr.p, ptr.alignment));
  }
  ATTNRT_RETURN_IF_ERROR(CheckNewKvSources(batch));
  return EnqueueAppendKv(batch, pools, stream);
}

Status EnqueueAppendKv(const DecodeBatchView& batch, const KvPoolView& pools, cudaStream_t stream) {
  if (batch.capacity == 0) return Status::Ok();
  // Programmatic dependent launch: overlaps this launch with the tail of a kernel before it.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(batch.capacity);
  cfg.blockDim = dim3(kAppendThreads);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // The pools' scales say which cache it is (KvPoolView: null for FP16).
  const bool fp8 = pools.scales != nullptr;
  ATTNRT_CUDA_RETURN(cudaLaunchKernelEx(
      &cfg, fp8 ? AppendKvKernel<true> : AppendKvKernel<false>, batch.kv_lengths, batch.layers,
      batch.block_tables, batch.max_blocks_per_seq, batch.k_new, batch.v_new, batch.k_rows,
      batch.v_rows, pools.k, pools.v, pools.layer_stride(),
      pools.block_stride(), pools.block_size, pools.head_dim, pools.num_kv_heads, pools.scales,
      pools.num_layers));
  return Status::Ok();
}

}  // namespace attnrt::kernels
