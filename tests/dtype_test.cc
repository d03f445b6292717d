// fp16/bf16 conversions against the compiler's own _Float16 (an independent route) and
// hand-checked bit patterns.
#include "server/tensor/dtype.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "server/tensor/tensor_view.h"

namespace posenc {
namespace {

TEST(DType, HalfRoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << "bits " << h;
  }
}

TEST(DType, HalfRoundingMatchesCompilerFloat16) {
#ifndef __FLT16_MAX__
  GTEST_SKIP() << "this compiler has no _Float16 on this target (clang 14 on x86)";
#else
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-28, 17);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(mant(rng), exp(rng));
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(FloatToHalf(f), ref_bits) << std::hexfloat << f;
  }
#endif
}

TEST(DType, KnownHalfValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                   // overflows to infinity
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even (1+2^-6).
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) ASSERT_EQ(FloatToBFloat16(f), b);
  }
}

TEST(TensorView, CheckedNumElementsRejectsHugeAndNegative) {
  EXPECT_EQ(*CheckedNumElements({2, 3, 4}, "input"), 24);
  EXPECT_EQ(*CheckedNumElements({}, "input"), 1);
  auto huge = CheckedNumElements({int64_t{1} << 40, int64_t{1} << 40, 16}, "input");
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("input.shape"), std::string::npos);
  auto negative = CheckedNumElements({2, -1}, "key");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("key.shape[1]"), std::string::npos);
}

// Found by fuzzing: an empty tensor carried dimensions whose products overflowed int64 in
// the schemes ([0, 2^62, 2^62] sinusoidal: UB in the row-width check).
TEST(TensorView, CheckedNumElementsBoundsTheDimensionsOfEmptyTensors) {
  EXPECT_EQ(*CheckedNumElements({0, 8, 16}, "input"), 0);
  EXPECT_EQ(*CheckedNumElements({0, int64_t{1} << 40}, "input"), 0);
  for (Shape shape : {Shape{0, int64_t{1} << 62, int64_t{1} << 62}, Shape{4, 0, int64_t{1} << 40},
                      Shape{int64_t{1} << 41, 0}}) {
    auto r = CheckedNumElements(shape, "input");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << ShapeString(shape);
    EXPECT_NE(r.status().message().find("non-zero dimensions"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace posenc
