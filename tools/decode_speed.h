// attnrt-check's speed column: the time of one bandwidth-bound decode step of a decode path on
// the current GPU, the bytes that step must move and the bandwidth that makes. Plain C++ header
// (no CUDA header); the definition (tools/decode_speed.cu, target attnrt_decode_speed) exists in
// a CUDA build only, so a caller that also builds without CUDA tests ATTNRT_WITH_CUDA.
#pragma once

#include <cstddef>
#include <string>

#include <attnrt/config.h>
#include <attnrt/status.h>

namespace attnrt::tools {

struct DecodeSpeedRequest {
  std::string path;  // a decode variant by name (kernels::DecodeVariants()): "split_kv", ...
  // Heads, head dim, block size and cache type (FP8: every scale 1.0). One layer; max_context
  // is taken as `context`.
  ModelShape shape;
  int batch = 32;      // rows, each attending `context` tokens
  int context = 4096;
  // The input sets (distinct pools, q and outputs) cycled through: at least 2, and together at
  // least this many bytes of K/V (up to 64 sets), so no step reads what the previous one left in
  // L2 (> 5x the H100's 50 MB).
  std::size_t rotation_bytes = std::size_t{256} << 20;
  int replays = 7;     // timed CUDA-graph replays (2 untimed first); the median is reported
};

struct DecodeSpeed {
  double us_per_step = 0;     // median over the replays of (replay time / steps in it)
  // K and V of every row once per KV head, q read and out written (FP16): what any path must
  // move at least (the GEMM path also writes and reads its workspace; that is not counted).
  double bytes_per_step = 0;
  double tbps = 0;            // bytes_per_step / us_per_step, in 10^12 bytes/s
  int rotation_sets = 0;
  int steps_per_replay = 0;
  std::size_t workspace_bytes = 0;  // what the plan asked for (allocated for the run)
};

// Plans `path` (DecodeStep::kDecode, max_kv_length = context) for `batch` rows on the current
// device, runs it once eagerly over outputs poisoned with NaN and checks that every output of
// the first set came back finite, then times it (tools::MedianRunUs in tools/device_decode.cuh)
// on a stream of its own, with a cuBLAS handle where the plan runs cuBLAS. The path's own
// refusal comes back unchanged (its `supports` or `plan`: Unimplemented or InvalidArgument
// naming the field or the cache type); NotFound for an unknown path; InvalidArgument for a
// batch or context < 1; Internal naming the CUDA or cuBLAS call that failed (out of memory
// included) or the first non-finite output.
StatusOr<DecodeSpeed> MeasureDecodeSpeed(const DecodeSpeedRequest& request);

}  // namespace attnrt::tools
