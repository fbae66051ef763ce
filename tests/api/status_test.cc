#include <attnrt/status.h>

#include <gtest/gtest.h>

#include <attnrt/config.h>
#include <attnrt/half.h>

#include <cmath>

namespace attnrt {
namespace {

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = InvalidArgumentError("q has 4096 elements, expected H*D = 8192");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: q has 4096 elements, expected H*D = 8192");
}

StatusOr<int> HalveEven(int x) {
  if (x % 2) return InvalidArgumentError("x = " + std::to_string(x) + " is odd");
  return x / 2;
}

Status UseMacros(int x, int* out) {
  ATTNRT_ASSIGN_OR_RETURN(int h, HalveEven(x));
  ATTNRT_RETURN_IF_ERROR(h > 100 ? InvalidArgumentError("h too large") : Status::Ok());
  *out = h;
  return Status::Ok();
}

TEST(StatusTest, MacrosPropagateErrors) {
  int out = -1;
  EXPECT_TRUE(UseMacros(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseMacros(7, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x = 7 is odd");
  EXPECT_EQ(out, 4);
}

TEST(ModelShapeTest, ValidatesEveryField) {
  ModelShape ok;
  EXPECT_TRUE(ok.Validate().ok());
  EXPECT_FLOAT_EQ(ok.scale(), 1.0f / std::sqrt(128.0f));

  ModelShape s = ok;
  s.head_dim = 96;
  EXPECT_EQ(s.Validate().message(), "ModelShape.head_dim = 96, expected 64, 128 or 256");
  s = ok;
  s.num_kv_heads = 5;
  EXPECT_EQ(s.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.Validate().message().find("num_kv_heads = 5"), std::string::npos);
  s = ok;
  s.block_size = 12;
  EXPECT_NE(s.Validate().message().find("block_size = 12"), std::string::npos);
  s = ok;
  s.num_layers = 0;
  EXPECT_NE(s.Validate().message().find("num_layers = 0"), std::string::npos);
  s = ok;
  s.softmax_scale = -1.0f;
  EXPECT_NE(s.Validate().message().find("softmax_scale"), std::string::npos);
  s = ok;
  s.softmax_scale = 0.5f;
  EXPECT_FLOAT_EQ(s.scale(), 0.5f);
}

TEST(HalfTest, RoundTripsEveryFiniteHalf) {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    attnrt::Half h{static_cast<std::uint16_t>(bits)};
    const bool is_nan = ((bits >> 10) & 0x1f) == 0x1f && (bits & 0x3ff);
    if (is_nan) continue;
    EXPECT_EQ(FloatToHalf(HalfToFloat(h)).bits, h.bits) << "bits " << bits;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f).bits, 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f).bits, 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f).bits, 0x7c00);  // overflow to inf
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + 0.00048828125f).bits, 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: ties to even (1 + 2^-9).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0.00048828125f).bits, 0x3c02);
  EXPECT_EQ(FloatToHalf(5.9604645e-8f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.0e-8f).bits, 0x0000);
}

}  // namespace
}  // namespace attnrt
