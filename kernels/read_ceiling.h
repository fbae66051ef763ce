// The device's read-bandwidth ceiling, measured in the calling process: what the decode
// benchmarks and attnrt-check divide a decode path's achieved bandwidth by. One definition, so
// every "ratio to the read ceiling" in the tree means the same thing. No CUDA header (a program
// built without CUDA may include it; the definition exists only in a CUDA build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <attnrt/status.h>

namespace attnrt::kernels {

// 0 .. n-1 in a fixed pseudo-random order (an LCG-driven Fisher-Yates shuffle from `seed`):
// how the paged read probe orders its chunks and the benchmarks' decode batches scatter a
// sequence's blocks over the pool.
inline std::vector<std::int32_t> ShuffledIds(std::int32_t n, std::uint64_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n > 0 ? n : 0));
  std::iota(ids.begin(), ids.end(), 0);
  std::uint64_t x = seed * 6364136223846793005ull + 1;
  for (std::int32_t i = n - 1; i > 0; --i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(ids[i], ids[static_cast<std::size_t>((x >> 33) % static_cast<std::uint64_t>(i + 1))]);
  }
  return ids;
}

// 4 GiB: far past any L2 (the H100's is 50 MB), so the figure is DRAM (HBM) bandwidth.
inline constexpr std::size_t kReadCeilingBytes = std::size_t{4} << 30;

// Read bandwidth of the current CUDA device, bytes/s: a reduction that reads every byte of a
// `bytes`-byte buffer once with 16-byte loads (4 in flight per thread, 8 CTAs of 512 threads per
// SM), timed with CUDA events on the default stream; the best of 10 runs after one warm-up.
// Allocates `bytes` (rounded down to 16) plus 4 bytes of device memory while it runs and frees
// them on every path. InvalidArgument when bytes < 16; Internal naming the CUDA call that failed
// (out of memory included).
StatusOr<double> MeasureReadBandwidth(std::size_t bytes = kReadCeilingBytes);

// The same read of a paged pool: `bytes` cut into chunks of `chunk_bytes` (a KV block's slice of
// one head: block_size * head_dim * element bytes), each chunk read once by one warp, the chunks
// in a shuffled order (as a paged cache scatters a sequence's blocks). What paging costs the
// read, measured beside MeasureReadBandwidth. InvalidArgument when chunk_bytes is not a multiple
// of 16 in [16, 16 MiB] or bytes holds no chunk (or 2^31 or more); otherwise as above.
StatusOr<double> MeasurePagedReadBandwidth(std::size_t chunk_bytes,
                                           std::size_t bytes = kReadCeilingBytes);

}  // namespace attnrt::kernels
