// Tests of server/kernels/bias_kernel: ALiBi slopes against the paper's own get_slopes,
// T5 buckets against a numpy float32 transcription of HF's formula (tests/fixtures/
// gen_bias_reference.py), and the fast kernels against per-element formulas.
#include "server/kernels/bias_kernel.h"
#include "server/kernels/kernel_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;

using ::posenc::testing::FixturePath;
using ::posenc::testing::ReadFixtureLines;

// --- ALiBi slopes. -----------------------------------------------------------------------

TEST(AlibiSlopes, MatchPaperGetSlopesForOneTo64Heads) {
  int rows = 0;
  for (const std::vector<std::string>& words : ReadFixtureLines("alibi_slopes.txt")) {
    const int n = std::stoi(words[0]);
    std::vector<double> want;
    for (size_t i = 1; i < words.size(); ++i) want.push_back(std::stod(words[i]));
    ASSERT_EQ(static_cast<int>(want.size()), n);
    const std::vector<double> got = AlibiSlopes(n);
    ASSERT_EQ(got.size(), want.size());
    // The paper multiplies start*ratio^i in float64, we take exp2 once: a few ulps apart.
    for (int h = 0; h < n; ++h) {
      EXPECT_NEAR(got[h], want[h], 1e-14 * want[h]) << "num_heads " << n << " head " << h;
    }
    ++rows;
  }
  EXPECT_EQ(rows, 64);
}

TEST(AlibiSlopes, KnownValues) {
  // Eight heads: 1/2, 1/4, ..., 1/256 (the paper's example).
  const std::vector<double> eight = AlibiSlopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(eight[h], std::ldexp(1.0, -(h + 1)));
  // Twelve heads (BLOOM-560m style): 8 from n=8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const std::vector<double> twelve = AlibiSlopes(12);
  for (int h = 0; h < 4; ++h) {
    EXPECT_NEAR(twelve[8 + h], std::pow(2.0, -0.5 - h), 1e-15);
  }
}

TEST(AlibiSlopes, MaxBiasGeneralisesLikeLlamaCpp) {
  // llama.cpp: m0 = 2^(-max_bias/n), m1 = 2^(-max_bias/2/n); head h < n: m0^(h+1), else
  // m1^(2(h-n)+1). Written here with pow on the bases, independently of exp2 in the kernel.
  for (double max_bias : {8.0, 4.0, 16.0, 0.5}) {
    for (int heads : {1, 5, 12, 32, 40, 64, 100}) {
      const int n = 1 << static_cast<int>(std::floor(std::log2(heads)));
      const double m0 = std::pow(2.0, -max_bias / n);
      const double m1 = std::pow(2.0, -(max_bias / 2.0) / n);
      const std::vector<double> got = AlibiSlopes(heads, max_bias);
      for (int h = 0; h < heads; ++h) {
        const double want = h < n ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n) + 1);
        EXPECT_NEAR(got[h], want, 1e-13 * want) << max_bias << " " << heads << " " << h;
      }
    }
  }
}

// --- ALiBi bias. -------------------------------------------------------------------------

struct GeomCase {
  int64_t q, k, offset;
};
const GeomCase kGeoms[] = {
    {1, 1, 0},  {1, 7, 6},  {5, 5, 0},    {3, 9, 6},   {7, 3, 0},
    {4, 6, 10}, {2, 17, 0}, {16, 33, 17}, {3, 77, 80},  // 32-lane steps and a 13-lane tail
};

// The scalar rows and every vector ISA this CPU has, each forced in turn.
std::vector<KernelImpl> IsasToTest() {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  return isas;
}

TEST(AlibiBias, BuildMatchesPerElementFormula) {
  for (bool causal : {false, true}) {
    for (int heads : {1, 3, 8, 12}) {
      for (const GeomCase& c : kGeoms) {
        const AlibiSpec spec{heads, causal, 8.0};
        const BiasGeometry g{c.q, c.k, c.offset};
        std::vector<float> out(static_cast<size_t>(heads * c.q * c.k), 123.f);
        ASSERT_THAT(BuildAlibiBias(spec, g, out.data()), IsOk());
        for (int h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < c.q; ++i) {
            for (int64_t j = 0; j < c.k; ++j) {
              // Exact: both are one float64 product rounded once to float32.
              const float want = static_cast<float>(AlibiBiasReference(spec, g, h, i, j));
              ASSERT_EQ(out[(h * c.q + i) * c.k + j], want)
                  << "causal " << causal << " h " << h << " i " << i << " j " << j;
            }
          }
        }
      }
    }
  }
}

TEST(AlibiBias, IndependentValuesAndDefaultOffset) {
  // 4 heads: slopes 1/4, 1/16, 1/64, 1/256. q=2, k=4, default offset 2: query positions 2, 3.
  const AlibiSpec sym{4, false, 8.0};
  const BiasGeometry g = MakeBiasGeometry(2, 4);
  EXPECT_EQ(g.query_offset, 2);
  std::vector<float> out(4 * 2 * 4);
  ASSERT_THAT(BuildAlibiBias(sym, g, out.data()), IsOk());
  const float row0_h0[] = {-0.5f, -0.25f, 0.f, -0.25f};
  const float row1_h1[] = {-3.f / 16, -2.f / 16, -1.f / 16, 0.f};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(out[j], row0_h0[j]);
    EXPECT_EQ(out[(1 * 2 + 1) * 4 + j], row1_h1[j]);
  }
  EXPECT_FALSE(std::signbit(out[2])) << "the diagonal is +0, not -0";

  const AlibiSpec causal{4, true, 8.0};
  ASSERT_THAT(BuildAlibiBias(causal, g, out.data()), IsOk());
  EXPECT_EQ(out[0], -0.5f);
  EXPECT_EQ(out[2], 0.f);
  EXPECT_EQ(out[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[4 + 3], 0.f);  // query 1 (position 3) sees every key
}

uint16_t RoundTo(DType t, float f) {
  return t == DType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
}
float FromBits(DType t, uint16_t b) {
  return t == DType::kFloat16 ? HalfToFloat(b) : BFloat16ToFloat(b);
}

// Scores filled with random values; AddX must give round(score + float(bias)) per element.
template <typename AddFn, typename BiasFn>
void CheckAddInPlace(DType dtype, int64_t batch, int64_t heads, const BiasGeometry& g, AddFn add,
                     BiasFn bias_of) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  const int64_t n = batch * heads * g.query_length * g.key_length;
  std::vector<float> f32(static_cast<size_t>(n));
  std::vector<uint16_t> f16(static_cast<size_t>(n));
  // Special scores too: NaN, infinities (+inf + -inf bias is NaN), subnormals, -0, and the
  // largest half (which a bias pushes past 65504).
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            1.0e-39f,
                            6.0e-8f,
                            -0.0f,
                            65504.0f};
  for (int64_t e = 0; e < n; ++e) {
    f32[e] = e % 13 == 4 ? specials[(e / 13) % 7] : dist(rng);
    f16[e] = dtype == DType::kFloat32 ? 0 : RoundTo(dtype, f32[e]);
  }
  TensorView view;
  view.dtype = dtype;
  view.shape = {batch, heads, g.query_length, g.key_length};
  const std::vector<float> f32_before = f32;
  const std::vector<uint16_t> f16_before = f16;
  view.data = dtype == DType::kFloat32 ? static_cast<void*>(f32.data()) : f16.data();
  ASSERT_THAT(add(view), IsOk());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < g.query_length; ++i) {
        for (int64_t j = 0; j < g.key_length; ++j) {
          const int64_t e = ((b * heads + h) * g.query_length + i) * g.key_length + j;
          const float bias = bias_of(h, i, j);
          if (dtype == DType::kFloat32) {
            const float want = f32_before[e] + bias;
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(f32[e])) << b << " " << h << " " << i << " " << j;
              continue;
            }
            ASSERT_EQ(f32[e], want) << b << " " << h << " " << i << " " << j;
          } else {
            const uint16_t want = RoundTo(dtype, FromBits(dtype, f16_before[e]) + bias);
            ASSERT_EQ(f16[e], want) << KernelOverride() << " " << DTypeName(dtype) << " " << b
                                    << " " << h << " " << i << " " << j;
          }
        }
      }
    }
  }
}

// Each ISA forced by the override, then named as the implementation.
TEST(AlibiBias, AddInPlaceAllFloatDtypesEveryIsa) {
  for (KernelImpl isa : IsasToTest()) {
    for (bool named : {false, true}) {
      const ScopedKernelOverride forced(named ? KernelImpl::kAuto : isa);
      const KernelImpl implementation = named ? isa : KernelImpl::kAuto;
      for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        for (bool causal : {false, true}) {
          for (const GeomCase& c : kGeoms) {
            const AlibiSpec spec{6, causal, 8.0};
            const BiasGeometry g{c.q, c.k, c.offset};
            CheckAddInPlace(
                dtype, 2, 6, g,
                [&](const TensorView& v) { return AddAlibiBias(spec, g, v, implementation); },
                [&](int64_t h, int64_t i, int64_t j) {
                  // + 0.0f: the kernel's biases have no negative zeros (a -0 score shows it).
                  return static_cast<float>(AlibiBiasReference(spec, g, h, i, j)) + 0.0f;
                });
          }
        }
      }
    }
  }
}

// --- T5 buckets against the HF-formula fixture. -------------------------------------------

// HF transformers' T5Attention._relative_position_bucket, written here from its source
// (not the kernel's T5RelativeBucket), in its float32 arithmetic: the position / max_exact,
// the log, the divide by log(max_distance / max_exact) and the multiply are float32, then
// .to(long) truncates. The float32 log is taken as the double log rounded once.
int32_t HfRelativePositionBucket(int64_t relative_position, bool bidirectional, int32_t num_buckets,
                                 int32_t max_distance) {
  int64_t buckets = 0;
  int64_t n = num_buckets;
  if (bidirectional) {
    n /= 2;
    if (relative_position > 0) buckets += n;
    relative_position = relative_position < 0 ? -relative_position : relative_position;
  } else {
    relative_position = -std::min<int64_t>(relative_position, 0);
  }
  const int64_t max_exact = n / 2;
  if (relative_position < max_exact) return static_cast<int32_t>(buckets + relative_position);
  const float ratio = static_cast<float>(relative_position) / static_cast<float>(max_exact);
  const float log_ratio = static_cast<float>(std::log(static_cast<double>(ratio)));
  const float scale = static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
  const float large = log_ratio / scale * static_cast<float>(n - max_exact);
  const int64_t if_large = std::min<int64_t>(max_exact + static_cast<int64_t>(large), n - 1);
  return static_cast<int32_t>(buckets + if_large);
}

// The bucket of (query i, key j): relative position key - query, query at offset + i.
int32_t HfBucket(const T5Spec& spec, const BiasGeometry& g, int64_t i, int64_t j) {
  return HfRelativePositionBucket(j - (g.query_offset + i), spec.bidirectional, spec.num_buckets,
                                  spec.max_distance);
}

TEST(T5Buckets, MatchHfFormulaFixture) {
  const auto lines = ReadFixtureLines("t5_buckets.txt");
  ASSERT_FALSE(lines.empty()) << "missing fixture " << FixturePath("t5_buckets.txt");
  struct Run {
    int64_t start;
    int32_t bucket;
  };
  int configs = 0;
  int64_t checked = 0;
  T5Spec spec;
  int64_t lo = 0, hi = -1;
  std::vector<Run> runs;
  auto check_runs = [&]() {
    if (runs.empty()) return;
    ASSERT_EQ(runs.front().start, lo);
    for (size_t r = 0; r < runs.size(); ++r) {
      const int64_t end = r + 1 < runs.size() ? runs[r + 1].start : hi + 1;
      for (int64_t rel = runs[r].start; rel < end; ++rel) {
        ASSERT_EQ(HfRelativePositionBucket(rel, spec.bidirectional, spec.num_buckets,
                                           spec.max_distance),
                  runs[r].bucket)
            << "the test's own formula disagrees with HF's fixture at " << rel;
        ASSERT_EQ(T5RelativeBucket(rel, spec.bidirectional, spec.num_buckets, spec.max_distance),
                  runs[r].bucket)
            << "relative_position " << rel << " bidirectional " << spec.bidirectional
            << " num_buckets " << spec.num_buckets << " max_distance " << spec.max_distance;
        ++checked;
      }
    }
    runs.clear();
  };
  for (const std::vector<std::string>& w : lines) {
    const std::string& kind = w[0];
    const std::string line = absl::StrJoin(w, " ");
    if (kind == "config") {
      ASSERT_EQ(w.size(), 6u) << line;
      check_runs();
      spec.bidirectional = std::stoi(w[1]) != 0;
      spec.num_buckets = std::stoi(w[2]);
      spec.max_distance = std::stoi(w[3]);
      lo = std::stoll(w[4]);
      hi = std::stoll(w[5]);
      ASSERT_THAT(ValidateT5Spec(spec), IsOk()) << line;
      ++configs;
    } else if (kind == "run" || kind == "point") {
      ASSERT_EQ(w.size(), 3u) << line;
      const int64_t rel = std::stoll(w[1]);
      const int32_t bucket = std::stoi(w[2]);
      if (kind == "run") {
        runs.push_back({rel, bucket});
        continue;
      }
      EXPECT_EQ(T5RelativeBucket(rel, spec.bidirectional, spec.num_buckets, spec.max_distance),
                bucket)
          << line << " in config " << spec.num_buckets << "/" << spec.max_distance;
    }
  }
  check_runs();
  EXPECT_GE(configs, 15);
  EXPECT_GT(checked, 15 * 400000);
}

TEST(T5Buckets, HfDefaultsSpotValues) {
  // Bidirectional 32/128: max_exact 8; keys ahead get +16; distance 128 and up saturate.
  EXPECT_EQ(T5RelativeBucket(0, true, 32, 128), 0);
  EXPECT_EQ(T5RelativeBucket(-7, true, 32, 128), 7);
  EXPECT_EQ(T5RelativeBucket(7, true, 32, 128), 23);
  EXPECT_EQ(T5RelativeBucket(-16, true, 32, 128), 10);  // log(2)/log(16)*8 = 2 exactly
  EXPECT_EQ(T5RelativeBucket(-1000, true, 32, 128), 15);
  EXPECT_EQ(T5RelativeBucket(1000, true, 32, 128), 31);
  // Causal: keys ahead of the query share bucket 0.
  EXPECT_EQ(T5RelativeBucket(5, false, 32, 128), 0);
  EXPECT_EQ(T5RelativeBucket(-15, false, 32, 128), 15);
  EXPECT_EQ(T5RelativeBucket(-1000, false, 32, 128), 31);
  EXPECT_EQ(T5RelativeBucket(std::numeric_limits<int64_t>::min() + 1, false, 32, 128), 31);
}

TEST(T5Buckets, BuildMatchesPerElement) {
  for (bool bidir : {true, false}) {
    const T5Spec spec{32, 128, bidir};
    for (const GeomCase& c : kGeoms) {
      const BiasGeometry g{c.q, c.k, c.offset};
      std::vector<int32_t> out(static_cast<size_t>(c.q * c.k), -1);
      ASSERT_THAT(BuildT5Buckets(spec, g, out.data()), IsOk());
      for (int64_t i = 0; i < c.q; ++i) {
        for (int64_t j = 0; j < c.k; ++j) {
          ASSERT_EQ(out[i * c.k + j], HfBucket(spec, g, i, j));
        }
      }
    }
  }
  // Long rows spanning the log-bucket region, with a cache offset.
  const T5Spec spec{32, 128, true};
  const BiasGeometry g{3, 700, 650};
  std::vector<int32_t> out(3 * 700);
  ASSERT_THAT(BuildT5Buckets(spec, g, out.data()), IsOk());
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 700; ++j) {
      ASSERT_EQ(out[i * 700 + j], T5RelativeBucket(j - (650 + i), true, 32, 128));
    }
  }
}

std::vector<float> RandomTable(int buckets, int heads) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> t(static_cast<size_t>(buckets * heads));
  for (float& v : t) v = dist(rng);
  return t;
}

TEST(T5Bias, BuildIsTableLookup) {
  for (bool bidir : {true, false}) {
    const T5Spec spec{16, 40, bidir};
    const int heads = 5;
    const std::vector<float> table = RandomTable(16, heads);
    for (const GeomCase& c : kGeoms) {
      const BiasGeometry g{c.q, c.k, c.offset};
      std::vector<float> out(static_cast<size_t>(heads * c.q * c.k));
      ASSERT_THAT(BuildT5Bias(spec, g, table.data(), heads, out.data()), IsOk());
      for (int h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < c.q; ++i) {
          for (int64_t j = 0; j < c.k; ++j) {
            const int32_t bucket = HfBucket(spec, g, i, j);
            ASSERT_EQ(out[(h * c.q + i) * c.k + j], table[bucket * heads + h]);
          }
        }
      }
    }
  }
}

// Outputs of 8 MiB and more are written with streaming stores: odd key lengths put every
// row at a different alignment, and the buffers start one float past an aligned address.
TEST(BiasBuild, LargeOutputsMatchPerElement) {
  const BiasGeometry g{1031, 1021, 5};
  const size_t head = static_cast<size_t>(g.query_length * g.key_length);
  {
    const AlibiSpec spec{3, true, 8.0};
    std::vector<float> buffer(3 * head + 1, 123.f);
    ASSERT_THAT(BuildAlibiBias(spec, g, buffer.data() + 1), IsOk());
    ASSERT_EQ(buffer[0], 123.f);
    for (int h = 0; h < 3; ++h) {
      for (int64_t i = 0; i < g.query_length; ++i) {
        for (int64_t j = 0; j < g.key_length; ++j) {
          ASSERT_EQ(buffer[1 + h * head + i * g.key_length + j],
                    static_cast<float>(AlibiBiasReference(spec, g, h, i, j)))
              << "h " << h << " i " << i << " j " << j;
        }
      }
    }
  }
  const T5Spec spec{32, 128, true};
  {
    const int heads = 3;
    const std::vector<float> table = RandomTable(32, heads);
    std::vector<float> buffer(heads * head + 1, 123.f);
    ASSERT_THAT(BuildT5Bias(spec, g, table.data(), heads, buffer.data() + 1), IsOk());
    ASSERT_EQ(buffer[0], 123.f);
    for (int h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < g.query_length; ++i) {
        for (int64_t j = 0; j < g.key_length; ++j) {
          ASSERT_EQ(buffer[1 + h * head + i * g.key_length + j],
                    table[HfBucket(spec, g, i, j) * heads + h])
              << "h " << h << " i " << i << " j " << j;
        }
      }
    }
  }
  {
    const BiasGeometry big{1500, 1501, 0};
    std::vector<int32_t> buffer(static_cast<size_t>(big.query_length * big.key_length) + 1, -7);
    ASSERT_THAT(BuildT5Buckets(spec, big, buffer.data() + 1), IsOk());
    ASSERT_EQ(buffer[0], -7);
    for (int64_t i = 0; i < big.query_length; ++i) {
      for (int64_t j = 0; j < big.key_length; ++j) {
        ASSERT_EQ(buffer[1 + i * big.key_length + j], HfBucket(spec, big, i, j))
            << "i " << i << " j " << j;
      }
    }
  }
}

// Each ISA forced by the override, then named as the implementation.
TEST(T5Bias, AddInPlaceAllFloatDtypesEveryIsa) {
  const T5Spec spec{32, 128, true};
  const int heads = 3;
  const std::vector<float> table = RandomTable(32, heads);
  for (KernelImpl isa : IsasToTest()) {
    for (bool named : {false, true}) {
      const ScopedKernelOverride forced(named ? KernelImpl::kAuto : isa);
      const KernelImpl implementation = named ? isa : KernelImpl::kAuto;
      for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        for (const GeomCase& c : kGeoms) {
          const BiasGeometry g{c.q, c.k, c.offset};
          CheckAddInPlace(
              dtype, 3, heads, g,
              [&](const TensorView& v) {
                return AddT5Bias(spec, g, table.data(), heads, v, implementation);
              },
              [&](int64_t h, int64_t i, int64_t j) {
                return table[HfBucket(spec, g, i, j) * heads + h];
              });
        }
      }
    }
  }
}

// --- Limits. ------------------------------------------------------------------------------

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
}

TEST(BiasLimits, InvalidSpecsNameTheField) {
  ExpectInvalid(ValidateAlibiSpec({0, false, 8}), "alibi.num_heads is 0");
  ExpectInvalid(ValidateAlibiSpec({-3, true, 8}), "alibi.num_heads is -3");
  ExpectInvalid(ValidateAlibiSpec({8, false, 0}), "alibi.max_bias");
  ExpectInvalid(ValidateAlibiSpec({8, false, std::nan("")}), "alibi.max_bias");
  EXPECT_THAT(ValidateAlibiSpec({1, false, 8}), IsOk());

  ExpectInvalid(ValidateT5Spec({3, 128, true}), "t5.num_buckets is 3");
  ExpectInvalid(ValidateT5Spec({1, 128, false}), "t5.num_buckets is 1");
  ExpectInvalid(ValidateT5Spec({0, 128, false}), "t5.num_buckets");
  ExpectInvalid(ValidateT5Spec({32, 8, true}), "t5.max_distance is 8");     // max_exact 8
  ExpectInvalid(ValidateT5Spec({32, 16, false}), "t5.max_distance is 16");  // max_exact 16
  ExpectInvalid(ValidateT5Spec({32, -1, false}), "t5.max_distance");
  EXPECT_THAT(ValidateT5Spec({4, 2, true}), IsOk());
  EXPECT_THAT(ValidateT5Spec({2, 2, false}), IsOk());
  EXPECT_THAT(ValidateT5Spec({32, 9, true}), IsOk());

  ExpectInvalid(ValidateBiasGeometry({0, 4, 0}), "query_length is 0");
  ExpectInvalid(ValidateBiasGeometry({2, -1, 0}), "key_length is -1");
  ExpectInvalid(ValidateBiasGeometry(MakeBiasGeometry(5, 3)), "query_offset is -2");
  ExpectInvalid(ValidateBiasGeometry({2, 4, kMaxBiasPosition}), "query_offset");
  ExpectInvalid(ValidateBiasGeometry({2, std::numeric_limits<int64_t>::max(), 0}), "key_length");
  EXPECT_THAT(ValidateBiasGeometry({5, 3, 0}), IsOk());
  // Found by fuzzing (UBSan in scripts/sanitize.sh): the default offset 32 - (-2^63) overflowed.
  const BiasGeometry most_negative = MakeBiasGeometry(std::numeric_limits<int64_t>::min(), 32);
  EXPECT_EQ(most_negative.query_offset, 0);
  ExpectInvalid(ValidateBiasGeometry(most_negative), "query_length is -9223372036854775808");
  ExpectInvalid(ValidateBiasGeometry(MakeBiasGeometry(4, std::numeric_limits<int64_t>::min())),
                "key_length");

  ExpectInvalid(ValidateT5TableShape({32, 128, true}, {16, 4}), "t5.table.shape[0] is 16");
  ExpectInvalid(ValidateT5TableShape({32, 128, true}, {32}), "t5.table");
  ExpectInvalid(ValidateT5TableShape({32, 128, true}, {32, 0}), "t5.table.shape[1]");
  EXPECT_THAT(ValidateT5TableShape({32, 128, true}, {32, 12}), IsOk());
}

// max_bias finite and > 0 is the whole range check ALiBi needs: every slope is then in
// [0, 1] and every bias within 2^41 (or -inf above the diagonal for CAUSAL, by definition).
TEST(BiasLimits, ExtremeMaxBiasStaysFinite) {
  const BiasGeometry g{3, 5, 2};
  for (double max_bias : {5e-324, 1e-300, 1e300, std::numeric_limits<double>::max()}) {
    for (bool causal : {false, true}) {
      const AlibiSpec spec{12, causal, max_bias};  // 12 heads: the extra-heads slopes too
      ASSERT_THAT(ValidateAlibiSpec(spec), IsOk()) << max_bias;
      std::vector<float> out(12 * 3 * 5);
      ASSERT_THAT(BuildAlibiBias(spec, g, out.data()), IsOk());
      for (int32_t h = 0; h < 12; ++h) {
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t j = 0; j < 5; ++j) {
            const float v = out[(h * 3 + i) * 5 + j];
            const bool masked = causal && j > g.query_offset + i;
            EXPECT_TRUE(masked ? v == -std::numeric_limits<float>::infinity() : std::isfinite(v))
                << "max_bias " << max_bias << " h " << h << " i " << i << " j " << j << ": " << v;
          }
        }
      }
    }
  }
}

TEST(BiasLimits, ScoresMustFit) {
  const BiasGeometry g{2, 3, 1};
  std::vector<float> data(2 * 4 * 2 * 3);
  TensorView v{DType::kFloat32, {2, 4, 2, 3}, data.data()};
  EXPECT_THAT(ValidateScores(g, 4, "alibi.num_heads", v), IsOk());
  ExpectInvalid(ValidateScores(g, 5, "alibi.num_heads", v),
                "scores.shape[1] (heads) is 4; it must equal alibi.num_heads (5)");
  ExpectInvalid(ValidateScores(g, 4, "alibi.num_heads",
                               {DType::kFloat32, {2, 4, 3, 3}, data.data()}),
                "scores.shape[2]");
  ExpectInvalid(ValidateScores(g, 4, "alibi.num_heads",
                               {DType::kFloat32, {2, 4, 2, 2}, data.data()}),
                "scores.shape[3]");
  ExpectInvalid(ValidateScores(g, 4, "alibi.num_heads",
                               {DType::kFloat32, {0, 4, 2, 3}, data.data()}),
                "scores.shape[0]");
  ExpectInvalid(ValidateScores(g, 4, "alibi.num_heads", {DType::kFloat32, {4, 2, 3}, data.data()}),
                "scores has shape");
  ExpectInvalid(ValidateScores(g, 4, "alibi.num_heads", {DType::kInt32, {2, 4, 2, 3}, data.data()}),
                "scores.dtype");
  // The kernels refuse bad arguments too instead of writing out of bounds.
  ExpectInvalid(AddAlibiBias({5, false, 8}, g, v), "scores.shape[1]");
  ExpectInvalid(BuildAlibiBias({0, false, 8}, g, data.data()), "alibi.num_heads");
  ExpectInvalid(BuildT5Buckets({32, 128, true}, {0, 1, 0}, nullptr), "query_length");
}

}  // namespace
}  // namespace posenc
