// What the decode kernel tests check with: ASSERT_OK on a Status, the skip of a GPU case on a
// machine without one, and the tolerance of an FP16 decode output against the FP64 reference.
// Header-only; no CUDA header (GoogleTest).
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>
#include "api/internal/cuda_device.h"
#include "tests/support/paged_batch.h"

// Fails the test (fatally) with the expression and its Status unless the Status is OK.
#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::attnrt::Status s_ = (expr);                       \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString();   \
  } while (0)

#define SKIP_WITHOUT_GPU() \
  if (!::attnrt::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: GPU kernel test not run"

namespace attnrt::testing {

// The tolerance of an FP16 decode output against the FP64 reference: max |out - ref|, relative
// L2 of out - ref, |lse - ref lse|.
inline constexpr double kMaxAbs = 2e-3;
inline constexpr double kRelL2 = 1e-3;
inline constexpr double kLseTol = 1e-3;

// Expects a run's `out` and `lse` on `host` to match the reference (`ref_out`, `ref_lse`) over
// the live rows within the tolerance, every output finite, and the padded rows still poisoned.
// `what` names the case in each failure.
inline void ExpectOutputMatchesReference(const PagedBatch& host, std::span<const Half> out,
                                         std::span<const float> lse,
                                         std::span<const float> ref_out,
                                         std::span<const float> ref_lse,
                                         const std::string& what = "") {
  const OutputError e = CompareOutput(host, out, ref_out);
  EXPECT_EQ(e.non_finite, 0) << "outputs not written or NaN read " << what;
  EXPECT_LE(e.max_abs, kMaxAbs) << what;
  EXPECT_LE(e.rel_l2, kRelL2) << what;
  EXPECT_LE(MaxLseError(host, lse, ref_lse), kLseTol) << what;
  EXPECT_TRUE(PaddedRowsUntouched(host, out, lse)) << "a padded row was written " << what;
}

}  // namespace attnrt::testing
