// server/service/proto_convert: proto3 enums are open, so a client can send any number.
// Each converter refuses one the proto does not name, naming the field; known values map
// as before.
#include "server/service/proto_convert.h"
#include "server/schemes/scheme_proto.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;

void ExpectUnknownEnum(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(std::string(status.message()).find(message), std::string::npos)
      << "got \"" << status.message() << "\", want it to contain \"" << message << "\"";
}

TEST(ProtoConvert, UnknownSinusoidalAndContinuousEnumsNameTheField) {
  v1::Sinusoidal s;
  s.set_layout(static_cast<v1::SinusoidalLayout>(99));
  ExpectUnknownEnum(SinusoidalFromProto(s).status(),
                    "sinusoidal.layout is 99; it must be one of INTERLEAVED, CONCATENATED");
  s.set_layout(v1::CONCATENATED);
  s.set_timescale(static_cast<v1::Timescale>(-1));
  ExpectUnknownEnum(SinusoidalFromProto(s).status(), "sinusoidal.timescale is -1");
  s.set_timescale(v1::HALF_MINUS_ONE);
  s.set_fusion(static_cast<v1::Fusion>(9));
  ExpectUnknownEnum(CombineFromSinusoidal(s).status(), "sinusoidal.fusion is 9");

  v1::Continuous c;
  c.set_layout(static_cast<v1::SinusoidalLayout>(7));
  ExpectUnknownEnum(ContinuousFromProto(c).status(), "continuous.layout is 7");
  c.set_layout(v1::INTERLEAVED);
  c.set_timescale(static_cast<v1::Timescale>(8));
  ExpectUnknownEnum(ContinuousFromProto(c).status(), "continuous.timescale is 8");
}

TEST(ProtoConvert, UnknownLearnedRopeAndAlibiEnumsNameTheField) {
  ExpectUnknownEnum(OverflowFromProto(static_cast<v1::Overflow>(77)).status(),
                    "learned.overflow is 77; it must be one of ERROR, CLAMP, INTERPOLATE");
  v1::Learned l;
  l.set_fusion(static_cast<v1::Fusion>(5));
  ExpectUnknownEnum(CombineFromLearned(l).status(), "learned.fusion is 5");

  v1::Rope r;
  r.set_style(static_cast<v1::RopeStyle>(99));
  ExpectUnknownEnum(RopeFromProto(r).status(), "rope.style is 99; it must be one of NEOX, GPTJ");
  r.set_style(v1::GPTJ);
  r.set_layout(static_cast<v1::RopeLayout>(99));
  ExpectUnknownEnum(RopeFromProto(r).status(), "rope.layout is 99");
  r.set_layout(v1::THD);
  r.mutable_scaling()->set_type(static_cast<v1::RopeScalingType>(99));
  ExpectUnknownEnum(RopeFromProto(r).status(), "rope.scaling.type is 99");

  v1::Alibi a;
  a.set_num_heads(8);
  a.set_mode(static_cast<v1::AlibiMode>(3));
  ExpectUnknownEnum(AlibiFromProto(a).status(), "alibi.mode is 3");
}

TEST(ProtoConvert, UnknownDTypeNamesTheField) {
  ExpectUnknownEnum(DTypeFromProto(static_cast<v1::DType>(99), "input.dtype").status(),
                    "input.dtype is 99");
  v1::Tensor t;
  t.add_shape(1);
  t.set_dtype(static_cast<v1::DType>(42));
  t.set_data(std::string(4, '\0'));
  ExpectUnknownEnum(ViewOfTensor(&t, "key").status(), "key.dtype is 42");
}

TEST(ProtoConvert, KnownValuesStillMap) {
  v1::Rope r;
  r.set_style(v1::GPTJ);
  r.set_layout(v1::BHSD);
  r.mutable_scaling()->set_type(v1::YARN);
  r.mutable_scaling()->set_factor(4);
  auto rope = RopeFromProto(r);
  ASSERT_THAT(rope, IsOk());
  EXPECT_EQ(rope->style, RopeSpec::Style::kGptj);
  EXPECT_EQ(rope->layout, RopeSpec::Layout::kBhsd);
  EXPECT_EQ(rope->scaling.type, RopeScalingSpec::Type::kYarn);
  EXPECT_EQ(rope->scaling.factor, 4.0);

  v1::Sinusoidal s;
  s.set_layout(v1::CONCATENATED);
  s.set_timescale(v1::HALF_MINUS_ONE);
  s.set_fusion(v1::CONCAT);
  s.set_pe_dim(6);
  auto spec = SinusoidalFromProto(s);
  auto combine = CombineFromSinusoidal(s);
  ASSERT_THAT(spec, IsOk());
  ASSERT_THAT(combine, IsOk());
  EXPECT_EQ(spec->layout, SinusoidalLayout::kConcatenated);
  EXPECT_EQ(spec->timescale, Timescale::kHalfMinusOne);
  EXPECT_EQ(combine->fusion, Fusion::kConcat);
  EXPECT_EQ(combine->pe_dim, 6);

  auto overflow = OverflowFromProto(v1::INTERPOLATE);
  ASSERT_THAT(overflow, IsOk());
  EXPECT_EQ(*overflow, Overflow::kInterpolate);
  v1::Alibi a;
  a.set_mode(v1::CAUSAL);
  a.set_max_bias(4);
  auto alibi = AlibiFromProto(a);
  ASSERT_THAT(alibi, IsOk());
  EXPECT_TRUE(alibi->causal);
  EXPECT_EQ(alibi->max_bias, 4.0);
}

}  // namespace
}  // namespace posenc
