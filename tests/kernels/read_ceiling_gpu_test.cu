// The read ceilings (kernels/read_ceiling.h): their argument checks, which come before any CUDA
// call and so run without a GPU too, and on a GPU that each measures a positive bandwidth. The
// figures themselves are the benchmarks' (kernels_launch_sweep_bench prints both ceilings).
#include "kernels/read_ceiling.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "api/internal/cuda_check.h"

namespace attnrt::kernels {
namespace {

TEST(ReadCeilingTest, PagedReadRefusesChunksOutsideTheRuleNamingIt) {
  for (const std::size_t chunk : {std::size_t{0}, std::size_t{8}, std::size_t{4100},
                                  (std::size_t{1} << 24) + 16}) {
    const StatusOr<double> bw = MeasurePagedReadBandwidth(chunk, std::size_t{1} << 20);
    ASSERT_FALSE(bw.ok()) << chunk;
    EXPECT_EQ(bw.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bw.status().message().find("chunk_bytes = " + std::to_string(chunk)),
              std::string::npos)
        << bw.status().ToString();
  }
  const StatusOr<double> none = MeasurePagedReadBandwidth(4096, 4095);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("bytes = 4095"), std::string::npos)
      << none.status().ToString();
  const StatusOr<double> empty = MeasureReadBandwidth(15);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

TEST(ReadCeilingTest, BothCeilingsMeasureAPositiveBandwidth) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the ceilings read device memory";
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  const StatusOr<double> flat = MeasureReadBandwidth(kBytes);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_GT(*flat, 0.0);
  for (const std::size_t chunk : {std::size_t{16}, std::size_t{4096}, std::size_t{4112}}) {
    const StatusOr<double> paged = MeasurePagedReadBandwidth(chunk, kBytes);
    ASSERT_TRUE(paged.ok()) << chunk << ": " << paged.status().ToString();
    EXPECT_GT(*paged, 0.0) << chunk;
  }
}

}  // namespace
}  // namespace attnrt::kernels
