// Absolute schemes (sinusoidal, learned, hierarchical, continuous) against independent
// references: float64 numpy fixtures written the way each source project writes its
// formula (tests/fixtures/gen_sinusoidal_reference.py), and float64 formulas inline.
#include "server/schemes/absolute_scheme.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/kernels/add_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/tables/sinusoidal_table.h"
#include "tests/support/fixtures.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::testing::HasSubstr;

using ::posenc::testing::StatusIs;

using ::posenc::testing::IsOk;

// A float32 rounded once from float64 is within half an ulp: 2^-24 relative, and values
// here are at most 1 in magnitude. Allow a little more for the oneDNN add of 0.
constexpr double kRoundedOnce = 1.2e-7;

using ::posenc::testing::FixturePath;

std::vector<float> Zeros(size_t n) { return std::vector<float>(n, 0.0f); }

TensorView View(std::vector<float>& v, Shape shape) {
  return TensorView{DType::kFloat32, std::move(shape), v.data()};
}

TEST(Sinusoidal, MatchesEveryVariantOfTheFixtures) {
  std::ifstream in(FixturePath("sinusoidal_reference.json"));
  ASSERT_TRUE(in) << "missing fixture; run tests/fixtures/gen_sinusoidal_reference.py";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  TableCache cache(256 << 20);
  int checked = 0;
  for (const auto& c : fixture["cases"]) {
    SinusoidalSpec spec;
    spec.base = c["base"];
    spec.layout = c["layout"] == "INTERLEAVED" ? SinusoidalLayout::kInterleaved
                                               : SinusoidalLayout::kConcatenated;
    spec.timescale = c["timescale"] == "PER_DIM" ? Timescale::kPerDim : Timescale::kHalfMinusOne;
    const int64_t d = c["dim"];
    const std::vector<int64_t> positions = c["positions"];
    const std::vector<double> ref = c["pe"];
    const int64_t n = positions.size();
    auto x = Zeros(n * d);
    PositionsSpec p;
    p.ids = positions;
    auto result = ApplySinusoidal(spec, CombineSpec{}, View(x, {n, d}), p, cache, {});
    ASSERT_THAT(result, IsOk());
    EXPECT_EQ(result->shape, (Shape{n, d}));
    for (int64_t i = 0; i < n * d; ++i) {
      ASSERT_NEAR(x[i], ref[i], kRoundedOnce)
          << c["layout"] << " " << c["timescale"] << " d=" << d << " base=" << spec.base
          << " position " << positions[i / d] << " column " << i % d;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 64);
}

// The paper's formula, float64, written directly.
double PaperPe(int64_t pos, int64_t col, int64_t d, double base) {
  const int64_t i = col / 2;
  const double angle = static_cast<double>(pos) / std::pow(base, 2.0 * i / d);
  return col % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// Two tables share a cache entry only when every field that defines them is equal: the base
// to the last bit, the layout, the timescale, the width and the row count.
TEST(Sinusoidal, TableKeyTellsEveryFieldApart) {
  const SinusoidalSpec plain{10000.0, SinusoidalLayout::kInterleaved, Timescale::kPerDim, 64};
  std::vector<std::string> keys = {SinusoidalTableKey(plain, 128)};
  SinusoidalSpec s = plain;
  s.base = std::nextafter(10000.0, 20000.0);
  keys.push_back(SinusoidalTableKey(s, 128));
  s = plain;
  s.layout = SinusoidalLayout::kConcatenated;
  keys.push_back(SinusoidalTableKey(s, 128));
  s = plain;
  s.timescale = Timescale::kHalfMinusOne;
  keys.push_back(SinusoidalTableKey(s, 128));
  s = plain;
  s.dim = 65;
  keys.push_back(SinusoidalTableKey(s, 128));
  keys.push_back(SinusoidalTableKey(plain, 129));
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) EXPECT_NE(keys[i], keys[j]) << i << " " << j;
  }
  EXPECT_EQ(SinusoidalTableKey(plain, 128), keys[0]);
}

TEST(Sinusoidal, ScalesOffsetsPerRowAndDenseTable) {
  const int64_t b = 3, s = 5, d = 8;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(b * s * d), original;
  for (auto& v : x) v = normal(rng);
  original = x;
  const std::vector<int64_t> offsets = {0, 10, 4000};
  PositionsSpec p;
  p.offsets = offsets;
  CombineSpec combine;
  combine.input_scale = std::sqrt(8.0f);
  combine.pe_scale = 0.5f;
  TableCache cache(256 << 20);
  auto result = ApplySinusoidal({}, combine, View(x, {b, s, d}), p, cache, {});
  ASSERT_THAT(result, IsOk());
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t t = 0; t < s; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = (r * s + t) * d + c;
        const double want = original[i] * static_cast<double>(combine.input_scale) +
                            0.5 * PaperPe(offsets[r] + t, c, d, 10000.0);
        ASSERT_NEAR(x[i], want, 1e-6 * (1 + std::abs(want))) << r << " " << t << " " << c;
      }
    }
  }
  EXPECT_GT(cache.entries(), 0u) << "positions < 4096 should come from a cached table";
}

TEST(Sinusoidal, FarPositionsDoNotBuildAHugeTable) {
  const int64_t d = 64;
  auto x = Zeros(3 * d);
  const std::vector<int64_t> ids = {1000000, 1000001, 5};
  PositionsSpec p;
  p.ids = ids;
  TableCache cache(256 << 20);
  ASSERT_THAT(ApplySinusoidal({}, {}, View(x, {3, d}), p, cache, {}), IsOk());
  EXPECT_EQ(cache.bytes(), 0u);
  for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(x[c], PaperPe(1000000, c, d, 1e4), kRoundedOnce);
}

TEST(Sinusoidal, RotationIdentityBetweenPositions) {
  // PE(pos+k) = R(k) PE(pos) for each (sin, cos) pair with frequency w:
  // sin((p+k)w) = sin(pw)cos(kw) + cos(pw)sin(kw); cos((p+k)w) = cos(pw)cos(kw) - sin(pw)sin(kw)
  const int64_t d = 32;
  SinusoidalSpec spec;
  spec.dim = d;
  SinusoidalEncoder enc(spec);
  std::vector<double> a(d), b(d);
  for (int64_t pos : {0, 3, 1000, 123456}) {
    for (int64_t k : {1, 7, 250}) {
      enc.RowF64(pos, a.data());
      enc.RowF64(pos + k, b.data());
      for (int64_t i = 0; i < d / 2; ++i) {
        const double w = std::pow(10000.0, -2.0 * i / d);
        const double ck = std::cos(k * w), sk = std::sin(k * w);
        EXPECT_NEAR(b[2 * i], a[2 * i] * ck + a[2 * i + 1] * sk, 1e-9);
        EXPECT_NEAR(b[2 * i + 1], a[2 * i + 1] * ck - a[2 * i] * sk, 1e-9);
      }
    }
  }
}

TEST(Sinusoidal, ConcatFusionWithPeDim) {
  const int64_t s = 4, d = 3, pe_dim = 6;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CombineSpec combine;
  combine.fusion = Fusion::kConcat;
  combine.pe_dim = pe_dim;
  combine.input_scale = 2.0f;
  TableCache cache(1 << 20);
  auto result = ApplySinusoidal({}, combine, View(x, {1, s, d}), {}, cache, {});
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->shape, (Shape{1, s, d + pe_dim}));
  ASSERT_TRUE(result->concat.has_value());
  const float* out = reinterpret_cast<const float*>(result->concat->data());
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(out[t * 9 + c], 2.0f * x[t * d + c]);
    for (int64_t c = 0; c < pe_dim; ++c) {
      EXPECT_NEAR(out[t * 9 + d + c], PaperPe(t, c, pe_dim, 1e4), kRoundedOnce);
    }
  }
  EXPECT_EQ(x[0], 1.0f) << "CONCAT leaves the input alone";
}

TEST(Sinusoidal, HalfAndBFloat16RoundOnceFromFloat32Arithmetic) {
  const int64_t s = 16, d = 8;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint16_t> x(s * d);
    std::vector<float> in(s * d);
    for (int64_t i = 0; i < s * d; ++i) {
      in[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
      x[i] = dtype == DType::kFloat16 ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
      in[i] = dtype == DType::kFloat16 ? HalfToFloat(x[i]) : BFloat16ToFloat(x[i]);
    }
    TableCache cache(1 << 20);
    TensorView view{dtype, {s, d}, x.data()};
    ASSERT_THAT(ApplySinusoidal({}, {}, view, {}, cache, {}), IsOk());
    for (int64_t i = 0; i < s * d; ++i) {
      const float want = in[i] + static_cast<float>(PaperPe(i / d, i % d, d, 1e4));
      const uint16_t want_bits =
          dtype == DType::kFloat16 ? FloatToHalf(want) : FloatToBFloat16(want);
      const float got = dtype == DType::kFloat16 ? HalfToFloat(x[i]) : BFloat16ToFloat(x[i]);
      const float want_rounded =
          dtype == DType::kFloat16 ? HalfToFloat(want_bits) : BFloat16ToFloat(want_bits);
      // One rounding of the float32 result; allow one ulp of the 16-bit format for the
      // float32 rounding of pe before the add.
      const float ulp = dtype == DType::kFloat16 ? std::ldexp(1.0f, -10) : std::ldexp(1.0f, -7);
      EXPECT_NEAR(got, want_rounded, ulp * std::max(1.0f, std::abs(want))) << i;
    }
  }
}

// The bfloat16 add through the scheme on every ISA (AVX2: the cached rows in the add's own
// layout) is bit-identical to the scalar loop's, and the laid-out copy is cached beside the
// table and read.
TEST(Sinusoidal, BFloat16AddIsTheSameOnEveryIsa) {
  const int64_t b = 2, s = 40, d = 200;  // 12 groups of 16 and a tail of 8
  std::vector<uint16_t> input(b * s * d);
  for (size_t i = 0; i < input.size(); ++i) input[i] = FloatToBFloat16(0.001f * (i % 977) - 0.4f);
  std::vector<uint16_t> want = input;
  {
    const ScopedKernelOverride scalar(KernelImpl::kScalar);
    TableCache cache(8 << 20);
    ASSERT_THAT(ApplySinusoidal({}, {}, TensorView{DType::kBFloat16, {b, s, d}, want.data()}, {},
                                cache, {}),
                IsOk());
  }
  for (KernelImpl isa : CpuVectorIsas()) {
    const ScopedKernelOverride forced(isa);
    TableCache cache(8 << 20);
    for (int call = 0; call < 2; ++call) {  // a miss, then the cached tables
      std::vector<uint16_t> got = input;
      ASSERT_THAT(ApplySinusoidal({}, {}, TensorView{DType::kBFloat16, {b, s, d}, got.data()}, {},
                                  cache, {}),
                  IsOk());
      EXPECT_EQ(got, want) << KernelImplName(isa) << " call " << call;
      const AddRowLayout* layout = AddRowLayoutFor(DType::kBFloat16);
      EXPECT_EQ(cache.entries(), layout != nullptr ? 2u : 1u) << KernelImplName(isa);
      EXPECT_EQ(LastAddRowLayout(), layout) << KernelImplName(isa);
    }
  }
}

TEST(Sinusoidal, RejectsBadInput) {
  TableCache cache(1 << 20);
  std::vector<float> x(8);
  auto bad_rank = ApplySinusoidal({}, {}, View(x, {8}), {}, cache, {});
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_rank.status().message().find("input.shape"), std::string::npos);
  SinusoidalSpec bad_base;
  bad_base.base = -1;
  auto base = ApplySinusoidal(bad_base, {}, View(x, {2, 4}), {}, cache, {});
  EXPECT_NE(base.status().message().find("sinusoidal.base"), std::string::npos);
  const std::vector<int64_t> negative = {0, -3};
  PositionsSpec p;
  p.ids = negative;
  auto neg = ApplySinusoidal({}, {}, View(x, {2, 4}), p, cache, {});
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("positions.ids[1]"), std::string::npos);
  const std::vector<int64_t> offsets = {1, 2, 3};
  PositionsSpec q;
  q.offsets = offsets;
  auto wrong = ApplySinusoidal({}, {}, View(x, {1, 2, 4}), q, cache, {});
  EXPECT_NE(wrong.status().message().find("positions.offsets has 3"), std::string::npos);
  std::vector<int32_t> ints(8);
  TensorView int_view{DType::kInt32, {2, 4}, ints.data()};
  auto dtype = ApplySinusoidal({}, {}, int_view, {}, cache, {});
  EXPECT_NE(dtype.status().message().find("input.dtype"), std::string::npos);
}

std::shared_ptr<const Table> LearnedTable(int64_t rows, int64_t cols) {
  auto t = std::make_shared<Table>();
  t->rows = rows;
  t->cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) t->data.push_back(0.25f * i - 1.0f);
  return t;
}

TEST(Learned, AddsRowsAndHandlesOverflowModes) {
  const auto table = LearnedTable(4, 2);  // rows: [-1,-.75], [-.5,-.25], [0,.25], [.5,.75]
  const std::vector<int64_t> ids = {0, 3, 6};
  PositionsSpec p;
  p.ids = ids;
  {
    auto x = Zeros(6);
    auto r = ApplyLearned({"t", table, Overflow::kError}, {}, View(x, {3, 2}), p, {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(r.status().message().find("learned.table 't'"), std::string::npos);
  }
  {
    auto x = Zeros(6);
    ASSERT_THAT(ApplyLearned({"t", table, Overflow::kClamp}, {}, View(x, {3, 2}), p, {}), IsOk());
    EXPECT_EQ(x, (std::vector<float>{-1, -0.75f, 0.5f, 0.75f, 0.5f, 0.75f}));
  }
  {
    // L = 7, M = 4: position p reads point p*3/6; position 3 -> 1.5 (between rows 1 and 2).
    auto x = Zeros(6);
    ASSERT_THAT(ApplyLearned({"t", table, Overflow::kInterpolate}, {}, View(x, {3, 2}), p, {}),
                IsOk());
    EXPECT_EQ(x, (std::vector<float>{-1, -0.75f, -0.25f, 0.0f, 0.5f, 0.75f}));
  }
  {
    const std::vector<int64_t> inside = {2, 1};
    PositionsSpec q;
    q.ids = inside;
    auto x = Zeros(4);
    ASSERT_THAT(ApplyLearned({"t", table, Overflow::kInterpolate}, {}, View(x, {2, 2}), q, {}),
                IsOk());
    EXPECT_EQ(x, (std::vector<float>{0, 0.25f, -0.5f, -0.25f}));
  }
  {
    auto x = Zeros(6);
    auto r = ApplyLearned({"t", table, Overflow::kClamp}, {}, View(x, {2, 3}), {}, {});
    EXPECT_THAT(
        r, StatusIs(absl::StatusCode::kInvalidArgument,
                    HasSubstr("learned.table 't' has width 2 but input.shape[-1] (d_model) is 3")));
  }
}

TEST(Hierarchical, SumsScaledLevels) {
  const int64_t s = 4, d = 6;
  auto x = Zeros(s * d);
  const std::vector<int64_t> word = {0, 1, 0, 1}, sentence = {0, 0, 1, 1};
  std::vector<HierarchicalLevel> levels = {{word, 10000.0, 1.0f}, {sentence, 100.0, 0.5f}};
  ASSERT_THAT(ApplyHierarchical(levels, View(x, {s, d}), {}), IsOk());
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      const double want = PaperPe(word[t], c, d, 10000.0) + 0.5 * PaperPe(sentence[t], c, d, 100.0);
      EXPECT_NEAR(x[t * d + c], want, kRoundedOnce * 2);
    }
  }
}

TEST(Continuous, EncodesRealValuedPositions) {
  const int64_t s = 3, d = 4;
  auto x = Zeros(s * d);
  const std::vector<double> values = {0.0, 0.25, 12.5};
  PositionsSpec p;
  p.values = values;
  ContinuousSpec spec;
  spec.value_scale = 100.0;
  ASSERT_THAT(ApplyContinuous(spec, View(x, {s, d}), p, {}), IsOk());
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      const double pos = values[t] * 100.0;
      const double angle = pos / std::pow(10000.0, 2.0 * (c / 2) / d);
      EXPECT_NEAR(x[t * d + c], c % 2 ? std::cos(angle) : std::sin(angle), kRoundedOnce);
    }
  }
  const std::vector<double> negative = {0.0, -1.0, 2.0};
  p.values = negative;
  auto r = ApplyContinuous(spec, View(x, {s, d}), p, {});
  EXPECT_NE(r.status().message().find("positions.values[1]"), std::string::npos);
}

// --- Results are finite or refused; sizes are checked. -----------------------------------

void ExpectStatus(const absl::Status& status, absl::StatusCode code, const std::string& message) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(std::string(status.message()).find(message), std::string::npos)
      << "got \"" << status.message() << "\", want it to contain \"" << message << "\"";
}

bool AllFinite(const std::vector<float>& v) {
  for (float f : v) {
    if (!std::isfinite(f)) return false;
  }
  return true;
}

TEST(FiniteOrRefused, SinusoidalBaseThatOverflowsTheFrequencies) {
  TableCache cache(1 << 20);
  std::vector<float> x = Zeros(4 * 8);
  SinusoidalSpec spec;
  spec.base = 5e-324;  // inv_freq = base^(-2i/d) is inf from i = 1: NaN rows
  auto r = ApplySinusoidal(spec, {}, View(x, {4, 8}), {}, cache, {});
  ExpectStatus(r.status(), absl::StatusCode::kInvalidArgument, "sinusoidal.base is 4.94066e-324");
  EXPECT_TRUE(AllFinite(x));
  spec.base = 1e-6;  // the smallest accepted: finite up to position 2^40, odd width included
  const std::vector<int64_t> far = {kMaxPosition - 1};  // the last two positions
  PositionsSpec p;
  p.offsets = far;
  for (Timescale t : {Timescale::kPerDim, Timescale::kHalfMinusOne}) {
    spec.timescale = t;
    x = Zeros(2 * 5);
    ASSERT_THAT(ApplySinusoidal(spec, {}, View(x, {2, 5}), p, cache, {}), IsOk());
    EXPECT_TRUE(AllFinite(x));
  }
}

TEST(FiniteOrRefused, ScalesAreBounded) {
  TableCache cache(1 << 20);
  std::vector<float> x = Zeros(2 * 4);
  CombineSpec huge;
  huge.pe_scale = 1e30f;  // pe * 1e30 * ... stays finite here, but 3e38 would not
  ExpectStatus(ApplySinusoidal({}, huge, View(x, {2, 4}), {}, cache, {}).status(),
               absl::StatusCode::kInvalidArgument, "sinusoidal.pe_scale is 1e+30");
  CombineSpec input;
  input.input_scale = -3e38f;
  ExpectStatus(ApplyLearned({"t", LearnedTable(4, 4), Overflow::kError}, input, View(x, {2, 4}), {},
                            {})
                   .status(),
               absl::StatusCode::kInvalidArgument, "learned.input_scale is -3e+38");
  CombineSpec edge;
  edge.input_scale = static_cast<float>(kMaxScale);
  edge.pe_scale = -static_cast<float>(kMaxScale);
  EXPECT_THAT(ApplySinusoidal({}, edge, View(x, {2, 4}), {}, cache, {}), IsOk());
}

TEST(FiniteOrRefused, HierarchicalScaleAndLevelCount) {
  const int64_t s = 2, d = 4;
  auto x = Zeros(s * d);
  const std::vector<int64_t> ids = {1, 0};
  // Two levels of 3e38: the float64 sum is 6e38, inf as float32.
  std::vector<HierarchicalLevel> levels = {{ids, 10000.0, 3e38f}, {ids, 10000.0, 3e38f}};
  ExpectStatus(ApplyHierarchical(levels, View(x, {s, d}), {}).status(),
               absl::StatusCode::kInvalidArgument, "hierarchical.levels[0].scale is 3e+38");
  EXPECT_TRUE(AllFinite(x));
  levels = {{ids, 10000.0, 1.0f}, {ids, 5e-324, 1.0f}};
  ExpectStatus(ApplyHierarchical(levels, View(x, {s, d}), {}).status(),
               absl::StatusCode::kInvalidArgument, "hierarchical.levels[1].base");
  levels.assign(kMaxHierarchicalLevels + 1, {ids, 10000.0, 1.0f});
  ExpectStatus(ApplyHierarchical(levels, View(x, {s, d}), {}).status(),
               absl::StatusCode::kResourceExhausted, "hierarchical.levels has 65 levels");
  levels.resize(kMaxHierarchicalLevels);
  EXPECT_THAT(ApplyHierarchical(levels, View(x, {s, d}), {}), IsOk());
}

TEST(FiniteOrRefused, ContinuousPositionsBounded) {
  const int64_t s = 2, d = 4;
  auto x = Zeros(s * d);
  const std::vector<double> near_max = {0.0, 1e308};
  PositionsSpec p;
  p.values = near_max;
  ContinuousSpec spec;
  spec.base = 0.5;  // inv_freq up to 2: 1e308 * 2 = inf, sin(inf) = NaN
  ExpectStatus(ApplyContinuous(spec, View(x, {s, d}), p, {}).status(),
               absl::StatusCode::kInvalidArgument,
               "positions.values[1] * continuous.value_scale is 1e+308 * 1");
  const std::vector<double> scaled = {0.0, 1e300};
  p.values = scaled;
  spec.base = 10000;
  spec.value_scale = 1e10;  // 1e310: inf
  ExpectStatus(ApplyContinuous(spec, View(x, {s, d}), p, {}).status(),
               absl::StatusCode::kInvalidArgument, "positions.values[1] * continuous.value_scale");
  EXPECT_TRUE(AllFinite(x));
  const std::vector<double> edge = {0.0, static_cast<double>(kMaxPosition)};
  p.values = edge;
  spec.value_scale = 1.0;
  ASSERT_THAT(ApplyContinuous(spec, View(x, {s, d}), p, {}), IsOk());
  EXPECT_TRUE(AllFinite(x));
}

TEST(FiniteOrRefused, NonFiniteInputIsTheClientsDataAndPropagates) {
  TableCache cache(1 << 20);
  std::vector<float> x = Zeros(2 * 4);
  x[5] = std::nanf("");
  x[6] = -std::numeric_limits<float>::infinity();
  ASSERT_THAT(ApplySinusoidal({}, {}, View(x, {2, 4}), {}, cache, {}), IsOk());
  EXPECT_TRUE(std::isnan(x[5]));
  EXPECT_EQ(x[6], -std::numeric_limits<float>::infinity());
  EXPECT_NEAR(x[4], std::sin(1.0), kRoundedOnce);  // its neighbours are encoded as usual
  EXPECT_NEAR(x[7], std::cos(1.0 / 100.0), kRoundedOnce);
}

TEST(SizeLimits, PeDimBoundAndOneRowOverTheLimitAreResourceExhausted) {
  TableCache cache(1 << 20);
  std::vector<float> x = Zeros(2 * 4);
  CombineSpec concat;
  concat.fusion = Fusion::kConcat;
  concat.pe_dim = kMaxPeDim + 1;
  ExpectStatus(ApplySinusoidal({}, concat, View(x, {2, 4}), {}, cache, {}).status(),
               absl::StatusCode::kResourceExhausted, "sinusoidal.pe_dim is 65537");
  concat.pe_dim = 512;  // one row is 2048 bytes, over a 1 KiB limit
  SchemeLimits small;
  small.max_output_bytes = 1024;
  ExpectStatus(ApplySinusoidal({}, concat, View(x, {2, 4}), {}, cache, small).status(),
               absl::StatusCode::kResourceExhausted, "one sinusoidal row of width 512");
}

TEST(SizeLimits, ConcatOutputSizeIsCheckedNotWrapped) {
  // [2^61, 4, 4] float32 CONCAT a width-4 table: 2^61 * 4 * 8 * 4 bytes = 2^68, which int64
  // arithmetic wraps to 0. The rows are table slices, so no other size is computed first.
  // The view's data is never read: the size check comes before any access.
  std::vector<float> x = Zeros(16);
  const TensorView huge{DType::kFloat32, {int64_t{1} << 61, 4, 4}, x.data()};
  CombineSpec concat;
  concat.fusion = Fusion::kConcat;
  auto r = ApplyLearned({"t", LearnedTable(8, 4), Overflow::kError}, concat, huge, {}, {});
  ExpectStatus(r.status(), absl::StatusCode::kResourceExhausted,
               "the CONCAT output would be more than 2^63 bytes");
}

// Found by fuzzing: an empty input has no bytes to bound d_model, and the hierarchical and
// continuous encoders allocated d_model-wide rows (2^40 here) before noticing nothing was
// to be done.
TEST(AbsoluteSchemes, EmptyInputWithAHugeDModelIsRefusedBeforeAllocating) {
  TableCache cache(1 << 20);
  float dummy = 0;
  const TensorView empty{DType::kFloat32, {0, 1, int64_t{1} << 40}, &dummy};
  const std::vector<int64_t> no_ids;
  const std::vector<HierarchicalLevel> levels = {{no_ids, 10000.0, 1.0f}};
  const PositionsSpec none;
  const LearnedSpec learned{"t", LearnedTable(4, 8), Overflow::kError};
  const CombineSpec concat{1.0f, 1.0f, Fusion::kConcat, 8};
  const absl::Status statuses[] = {ApplySinusoidal({}, concat, empty, none, cache, {}).status(),
                                   ApplyLearned(learned, concat, empty, none, {}).status(),
                                   ApplyHierarchical(levels, empty, {}).status(),
                                   ApplyContinuous({}, empty, none, {}).status()};
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_NE(status.message().find("d_model 1099511627776"), std::string::npos) << status;
  }
  // An empty input of an ordinary width is fine, and stays empty.
  auto ok = ApplyHierarchical(levels, TensorView{DType::kFloat32, {0, 1, 16}, &dummy}, {});
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->shape, (Shape{0, 1, 16}));
}

// oneDNN's binary_add, forced, on every CPU that has its float32 JIT kernel (AVX2 and up):
// it must run (not fall back) and agree with the loop. Two scale pairs on the same shape:
// the primitive is keyed by shape and takes the scales at execution, so the second call
// must apply its own scales, not the first call's.
TEST(AddKernel, OneDnnAndLoopAgree) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "oneDNN has no float32 JIT add here";
  const int64_t b = 2, s = 7, d = 33;
  std::vector<float> pe(s * d), x0(b * s * d);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : pe) v = u(rng);
  for (auto& v : x0) v = u(rng);
  for (auto [in_scale, pe_scale] :
       {std::pair{1.5f, 0.25f}, std::pair{-0.5f, 2.0f}, std::pair{1.0f, 1.0f}}) {
    std::vector<float> x1 = x0, x2 = x0;
    ASSERT_THAT(AddEncodingInPlace(View(x1, {b, s, d}), pe.data(), in_scale, pe_scale,
                                   KernelImpl::kOneDnn),
                IsOk());
    ASSERT_EQ(LastAddImplementation(), KernelImpl::kOneDnn);
    AddEncodingLoop(View(x2, {b, s, d}), pe.data(), in_scale, pe_scale);
    for (size_t i = 0; i < x1.size(); ++i) {
      ASSERT_NEAR(x1[i], x2[i], 1e-6) << i << " scales " << in_scale << ", " << pe_scale;
    }
  }
}

}  // namespace
}  // namespace posenc
