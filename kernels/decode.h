// Decode attention over the paged KV cache: the CPU reference, the append-KV step and the CUDA
// kernel variants, all behind one launcher signature (a variant table; tests and benchmarks loop
// over it, production picks by name). Internal header of kernels/ (may include CUDA headers;
// never included from api/).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string_view>

#include "api/config.h"
#include "api/status.h"
#include "kernels/views.h"

namespace attnrt::kernels {

// ---- CPU reference ------------------------------------------------------------------------
enum class ReferencePrecision { kFloat32, kFloat64 };

// Writes each live slot's k_new/v_new into its page (position kv_lengths[i] - 1). Host memory.
void ReferenceAppendKv(const DecodeBatchView& batch, const KvPoolView& pools);
// Decode attention for every live slot over host pools (after the append): GQA, any head dim,
// variable lengths. Writes out (FP16) and lse (if non-null). `out_f32`, if non-null, receives the
// unrounded output [capacity][H][D] for tighter checks.
void ReferenceDecode(const DecodeBatchView& batch, const KvPoolView& pools,
                     ReferencePrecision precision, float* out_f32 = nullptr);

// ---- CUDA launchers -----------------------------------------------------------------------
// Split-KV scratch: partial outputs and LSEs. Sized by DecodeWorkspaceBytes for a bucket and
// allocated once (never in the run step).
struct DecodeWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// Append-KV kernel: writes each live slot's new K/V into the device pools.
Status LaunchAppendKv(const DecodeBatchView& batch, const KvPoolView& pools, cudaStream_t stream);

// One paged-decode variant. `launch` is capture-safe: no allocation, no host sync, fixed grid for
// a given (shape, capacity); works for any kv_lengths up to shape.max_context.
struct DecodeVariant {
  std::string_view name;
  // OK if the variant runs this shape; Unimplemented naming the combination otherwise.
  Status (*supports)(const ModelShape& shape);
  // Workspace bytes for `capacity` slots (0 if none needed).
  std::size_t (*workspace_bytes)(const ModelShape& shape, int capacity);
  Status (*launch)(const ModelShape& shape, const DecodeBatchView& batch, const KvPoolView& pools,
                   DecodeWorkspace workspace, cudaStream_t stream);
};

// Every variant, simplest first. The last is the production default.
std::span<const DecodeVariant> DecodeVariants();
// The variant called `name`; NotFound lists the names.
StatusOr<const DecodeVariant*> FindDecodeVariant(std::string_view name);
// The production choice.
const DecodeVariant& DefaultDecodeVariant();

// Append-KV then decode with `variant`, as one capture-safe call (what an executor's graph
// runs): the same result as LaunchAppendKv followed by variant.launch. "split_kv" fuses the two
// (the CTA that owns a slot's last token stores k_new/v_new into the page and takes that token
// from k_new/v_new), saving a kernel launch; other variants launch both kernels.
Status LaunchAppendAndDecode(const DecodeVariant& variant, const ModelShape& shape,
                             const DecodeBatchView& batch, const KvPoolView& pools,
                             DecodeWorkspace workspace, cudaStream_t stream);

}  // namespace attnrt::kernels
