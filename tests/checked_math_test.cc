// server/common/checked_math.h: overflow is reported, never wrapped; size limits are
// RESOURCE_EXHAUSTED; ranges and finite checks name the field.
#include "server/common/checked_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::testing::HasSubstr;

using ::posenc::testing::StatusIs;

using ::posenc::testing::IsOk;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedMath, MulAndAddReportOverflow) {
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMul(int64_t{1} << 32, int64_t{1} << 32), std::nullopt);  // wraps to 0
  EXPECT_EQ(CheckedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(CheckedMul(kMin, -1), std::nullopt);
  EXPECT_EQ(CheckedMul(-3, 4), -12);
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMin, -1), std::nullopt);
}

TEST(CheckedMath, ProductOverflowsAtAnyStep) {
  EXPECT_EQ(CheckedProduct({}), 1);
  EXPECT_EQ(CheckedProduct({2, 3, 7}), 42);
  EXPECT_EQ(CheckedProduct({2, kMax, 1}), std::nullopt);
  EXPECT_EQ(CheckedProduct({2, kMax, 0}), 0);  // an empty tensor is empty in any order
  // 2^61 * 4 * 8 * 4 = 2^68: a plain int64 product wraps to exactly 0.
  EXPECT_EQ(CheckedProduct({int64_t{1} << 61, 4, 8, 4}), std::nullopt);
  EXPECT_EQ(CheckedProduct({int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 20}),
            int64_t{1} << 60);
}

TEST(CheckedMath, SizeWithinIsResourceExhaustedOverTheLimitOrOnOverflow) {
  auto fits = SizeWithin({4, 8, 16}, 512, "the bias [8,16]", "--max_message_bytes");
  ASSERT_THAT(fits, IsOk());
  EXPECT_EQ(*fits, 512);

  auto over = SizeWithin({4, 8, 17}, 512, "the bias [8,17]", "--max_message_bytes");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.status().message(),
            "the bias [8,17] would be 544 bytes; --max_message_bytes allows 512");

  auto wraps = SizeWithin({4, int64_t{1} << 40, int64_t{1} << 40, 16}, 512, "the bias",
                          "--max_message_bytes");
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(wraps.status().message().find("more than 2^63 bytes"), std::string::npos);

  EXPECT_THAT(SizeWithin({4, -1}, 512, "x", "limit"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("a size factor is negative (-1)")));
}

TEST(CheckedMath, CheckInRangeNamesTheFieldAndRefusesNaN) {
  EXPECT_THAT(CheckInRange("rope.scaling.factor", 1e6, 1e-6, 1e6), IsOk());
  const absl::Status s = CheckInRange("rope.scaling.factor", 1e-300, 1e-6, 1e6);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rope.scaling.factor is 1e-300; it must be in [1e-06, 1e+06]");
  EXPECT_THAT(CheckInRange("x", std::nan(""), -1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "x is nan; it must be in [-1, 1]"));
  EXPECT_THAT(CheckInRange("x", INFINITY, -1, INFINITY), IsOk());
}

TEST(CheckedMath, CheckRowsFiniteFindsNaNAndInf) {
  std::vector<float> rows(64, 0.5f);
  EXPECT_THAT(CheckRowsFinite(rows, "sinusoidal"), IsOk());
  rows[63] = std::numeric_limits<float>::infinity();
  absl::Status s = CheckRowsFinite(rows, "sinusoidal");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sinusoidal: these parameters give a non-finite"), std::string::npos)
      << s;
  rows[63] = 0;
  rows[5] = std::nanf("");
  EXPECT_THAT(CheckRowsFinite(rows, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("non-finite encoding value (element 5)")));
}

}  // namespace
}  // namespace posenc
