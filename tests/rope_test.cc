// RoPE: frequencies and attention factors of every HF scaling type and rotated outputs
// against tests/fixtures/rope_reference.txt (numpy float64, gen_rope_reference.py); the
// vector kernels against the scalar reference; the relative-position property; fp16/bf16
// within one 16-bit ulp; float64 angles at position 10^6 next to an HF-style float32 table;
// the cache staying small for far positions; GetTable rows; and the error cases.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/rope_kernel.h"
#include "server/kernels/threads.h"
#include "server/schemes/rope_scheme.h"
#include "server/tables/rope_frequencies.h"
#include "tests/support/fixtures.h"
#include "tests/support/random_values.h"
#include "tests/support/rope_reference.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::testing::HasSubstr;

using ::posenc::testing::StatusIs;

using ::posenc::testing::IsOk;
using ::posenc::testing::RandomFloats;

using Fields = std::map<std::string, std::vector<double>>;

constexpr char kFixture[] = "rope_reference.txt";

// "case NAME", then "FIELD v1 v2 ..." lines, then "end".
std::map<std::string, Fields> LoadFixture() {
  std::map<std::string, Fields> cases;
  std::string current;
  for (const std::vector<std::string>& words : testing::ReadFixtureLines(kFixture)) {
    if (words[0] == "case") {
      current = words.size() > 1 ? words[1] : "";
    } else if (words[0] != "end") {
      std::vector<double>& v = cases[current][words[0]];
      for (size_t i = 1; i < words.size(); ++i) v.push_back(std::strtod(words[i].c_str(), nullptr));
    }
  }
  return cases;
}

std::vector<int64_t> ToInts(const std::vector<double>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

RopeSpec SpecFromFields(const Fields& f) {
  auto has = [&](const char* k) { return f.count(k) > 0; };
  auto one = [&](const char* k) { return f.at(k)[0]; };
  RopeSpec spec;
  spec.style = static_cast<RopeSpec::Style>(static_cast<int>(one("style")));
  spec.layout = static_cast<RopeSpec::Layout>(static_cast<int>(one("layout")));
  if (has("base")) spec.base = one("base");
  if (has("rotary_dim")) spec.rotary_dim = static_cast<int>(one("rotary_dim"));
  RopeScalingSpec& s = spec.scaling;
  s.type = static_cast<RopeScalingSpec::Type>(static_cast<int>(one("type")));
  if (has("factor")) s.factor = one("factor");
  if (has("beta_fast")) s.beta_fast = one("beta_fast");
  if (has("beta_slow")) s.beta_slow = one("beta_slow");
  if (has("mscale")) s.mscale = one("mscale");
  if (has("mscale_all_dim")) s.mscale_all_dim = one("mscale_all_dim");
  if (has("attention_factor_param")) s.attention_factor = one("attention_factor_param");
  if (has("low_freq_factor")) s.low_freq_factor = one("low_freq_factor");
  if (has("high_freq_factor")) s.high_freq_factor = one("high_freq_factor");
  if (has("original_max_position_embeddings")) {
    s.original_max_position_embeddings =
        static_cast<int64_t>(one("original_max_position_embeddings"));
  }
  if (has("max_position_embeddings")) {
    s.max_position_embeddings = static_cast<int64_t>(one("max_position_embeddings"));
  }
  if (has("short_factor")) s.short_factor = f.at("short_factor");
  if (has("long_factor")) s.long_factor = f.at("long_factor");
  if (has("truncate")) s.truncate = one("truncate") != 0;
  return spec;
}

int64_t HeadDimOf(const Fields& f) { return static_cast<int64_t>(f.at("q_shape").back()); }

// ---------------------------------------------------------------------------------------
// Every scaling type against the numpy float64 reference.

class RopeFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  static const std::map<std::string, Fields>& Cases() {
    static const auto* cases = new std::map<std::string, Fields>(LoadFixture());
    return *cases;
  }
};

TEST_P(RopeFixtureTest, FrequenciesMatchHfFormulas) {
  ASSERT_TRUE(Cases().count(GetParam())) << "missing case in " << testing::FixturePath(kFixture);
  const Fields& f = Cases().at(GetParam());
  const RopeSpec spec = SpecFromFields(f);
  const int rotary_dim = spec.rotary_dim.value_or(static_cast<int>(HeadDimOf(f)));
  auto freqs = ComputeRopeFrequencies(spec, rotary_dim, static_cast<int64_t>(f.at("seq_len")[0]));
  ASSERT_THAT(freqs, IsOk());
  const std::vector<double>& want = f.at("inv_freq");
  ASSERT_EQ(freqs->inv_freq.size(), want.size());
  // Both sides are float64 evaluations of the same formulas; allow a few ulps.
  constexpr double kRelTol = 1e-13;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(freqs->inv_freq[i], want[i], kRelTol * std::abs(want[i])) << "index " << i;
  }
  EXPECT_NEAR(freqs->attention_factor, f.at("attention_factor")[0], 1e-14);
}

TEST_P(RopeFixtureTest, RotatedQueriesAndKeysMatch) {
  ASSERT_TRUE(Cases().count(GetParam())) << "missing case in " << testing::FixturePath(kFixture);
  const Fields& f = Cases().at(GetParam());
  const RopeSpec spec = SpecFromFields(f);
  std::vector<float> q(f.at("q").begin(), f.at("q").end());
  std::vector<float> k(f.at("k").begin(), f.at("k").end());
  const std::vector<int64_t> q_shape = ToInts(f.at("q_shape"));
  const std::vector<int64_t> k_shape = ToInts(f.at("k_shape"));
  TensorView qv{DType::kFloat32, Shape(q_shape.begin(), q_shape.end()), q.data()};
  TensorView kv{DType::kFloat32, Shape(k_shape.begin(), k_shape.end()), k.data()};
  std::vector<int64_t> ids;
  if (f.count("ids")) ids = ToInts(f.at("ids"));
  PositionsSpec positions;
  positions.ids = ids;
  TableCache cache(64 << 20);
  ASSERT_THAT(ApplyRope(spec, qv, &kv, positions, cache), IsOk());
  // Inputs in [-1, 1], attention factor <= 1.25: fp32 rounding of cos/sin and of two
  // products and a sum stays below 1e-6; 2e-6 leaves a margin.
  constexpr double kAbsTol = 2e-6;
  const std::vector<double>& q_out = f.at("q_out");
  const std::vector<double>& k_out = f.at("k_out");
  ASSERT_EQ(q.size(), q_out.size());
  ASSERT_EQ(k.size(), k_out.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], q_out[i], kAbsTol) << "q[" << i << "]";
  for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], k_out[i], kAbsTol) << "k[" << i << "]";
}

INSTANTIATE_TEST_SUITE_P(AllScalings, RopeFixtureTest,
                         ::testing::Values("none_neox_bshd", "linear_gptj_bhsd_partial",
                                           "dynamic_short", "dynamic_long", "yarn_default",
                                           "yarn_deepseek", "yarn_attention_override", "llama3",
                                           "longrope_short", "longrope_long", "longrope_given"));

// ---------------------------------------------------------------------------------------
// The vector kernels against the scalar reference.

// Unit-norm (cos, sin) rows for `tokens` tokens.
std::vector<float> RandomRows(int64_t tokens, int rotary_dim, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(0, 6.283185307179586);
  const int half = rotary_dim / 2;
  std::vector<float> rows(static_cast<size_t>(tokens) * rotary_dim);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = dist(gen);
      rows[t * rotary_dim + i] = static_cast<float>(std::cos(a));
      rows[t * rotary_dim + half + i] = static_cast<float>(std::sin(a));
    }
  }
  return rows;
}

TEST(RopeKernel, EveryIsaMatchesScalarReference) {
  const int64_t batch = 2, seq = 3, heads = 2;
  for (KernelImpl isa : {KernelImpl::kScalar, KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    for (RopePairing pairing : {RopePairing::kRotateHalf, RopePairing::kInterleaved}) {
      // Tails of every length for both vector widths; 2 is the smallest rotary dim.
      for (int rotary_dim : {2, 4, 6, 8, 14, 16, 18, 30, 32, 34, 48, 64, 80, 128}) {
        const int64_t head_dim = rotary_dim + 3;  // odd: pass-through features too
        RopeGeometry g{batch,   seq, heads, head_dim, seq * heads * head_dim, heads * head_dim,
                       head_dim};
        const std::vector<float> rows = RandomRows(batch * seq, rotary_dim, 7);
        std::vector<const float*> token_rows;
        for (int64_t t = 0; t < batch * seq; ++t) token_rows.push_back(&rows[t * rotary_dim]);
        std::vector<float> got = RandomFloats(batch * seq * heads * head_dim, rotary_dim);
        std::vector<float> want = got;
        const std::vector<float> before = got;
        RopeRotateInPlace({DType::kFloat32, {batch, seq, heads, head_dim}, got.data()}, g, pairing,
                          rotary_dim, token_rows, isa);
        testing::RopeRotateReference({DType::kFloat32, {batch, seq, heads, head_dim}, want.data()},
                                     g, pairing, rotary_dim, token_rows);
        for (size_t i = 0; i < got.size(); ++i) {
          // FMA vs separate products: within a couple of float32 ulps of values <= 2.
          ASSERT_NEAR(got[i], want[i], 5e-7)
              << "isa " << isa << " rotary_dim " << rotary_dim << " i " << i;
          if (static_cast<int64_t>(i % head_dim) >= rotary_dim) {
            ASSERT_EQ(got[i], before[i]) << "pass-through feature changed";
          }
        }
      }
    }
  }
}

// SetKernelOverride forces the whole path: kAuto under an override gives exactly what the ISA
// such a CPU defaults to gives when named explicitly, for every dtype and pairing; forced scalar is
// bit-identical to the scalar reference (no FMA, no F16C staging), 16-bit included.
TEST(RopeKernel, KernelOverrideForcesEveryPartOfThePath) {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  const int64_t seq = 9, heads = 3, head_dim = 70;
  for (KernelImpl isa : isas) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      // As on a CPU whose widest ISA is `isa`: AVX-512 runs float32 with AVX2 off Intel.
      const bool amd_f32 = dtype == DType::kFloat32 && !__builtin_cpu_is("intel");
      const KernelImpl explicit_isa = isa == KernelImpl::kScalar            ? KernelImpl::kScalar
                                      : isa == KernelImpl::kAvx2 || amd_f32 ? KernelImpl::kAvx2
                                                                            : KernelImpl::kAvx512;
      for (RopePairing pairing : {RopePairing::kRotateHalf, RopePairing::kInterleaved}) {
        for (int rotary_dim : {64, 46}) {  // parity kernels, and the paired ones with tails
          RopeGeometry g{1, seq, heads, head_dim, 0, heads * head_dim, head_dim};
          const std::vector<float> rows = RandomRows(seq, rotary_dim, 13);
          std::vector<const float*> token_rows;
          for (int64_t t = 0; t < seq; ++t) token_rows.push_back(&rows[t * rotary_dim]);
          const std::vector<float> src = RandomFloats(seq * heads * head_dim, 17);
          const size_t bytes = src.size() * DTypeSize(dtype);
          std::vector<char> forced(bytes), named(bytes);
          FromFloat32(src.data(), dtype, forced.data(), src.size());
          named = forced;
          std::vector<char> reference = forced;
          const Shape shape{seq, heads, head_dim};
          {
            const ScopedKernelOverride scope(isa);
            RopeRotateInPlace({dtype, shape, forced.data()}, g, pairing, rotary_dim, token_rows);
          }
          RopeRotateInPlace({dtype, shape, named.data()}, g, pairing, rotary_dim, token_rows,
                            explicit_isa);
          ASSERT_EQ(forced, named)
              << KernelImplName(isa) << " " << DTypeName(dtype) << " r" << rotary_dim;
          if (isa == KernelImpl::kScalar) {
            testing::RopeRotateReference({dtype, shape, reference.data()}, g, pairing, rotary_dim,
                                         token_rows);
            ASSERT_EQ(forced, reference) << DTypeName(dtype) << " r" << rotary_dim;
          }
        }
      }
    }
  }
}

// RoPE has no oneDNN code: kOneDnn, named or as the override, runs what kAuto runs without
// an override, bit for bit.
TEST(RopeKernel, OneDnnRunsTheDefault) {
  const int64_t seq = 5, heads = 2, head_dim = 64;
  const int rotary_dim = 64;
  RopeGeometry g{1, seq, heads, head_dim, 0, heads * head_dim, head_dim};
  const std::vector<float> rows = RandomRows(seq, rotary_dim, 19);
  std::vector<const float*> token_rows;
  for (int64_t t = 0; t < seq; ++t) token_rows.push_back(&rows[t * rotary_dim]);
  const std::vector<float> src = RandomFloats(seq * heads * head_dim, 23);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    std::vector<char> want(src.size() * DTypeSize(dtype));
    FromFloat32(src.data(), dtype, want.data(), src.size());
    std::vector<char> named = want, forced = want;
    const Shape shape{seq, heads, head_dim};
    for (RopePairing pairing : {RopePairing::kRotateHalf, RopePairing::kInterleaved}) {
      RopeRotateInPlace({dtype, shape, want.data()}, g, pairing, rotary_dim, token_rows);
      RopeRotateInPlace({dtype, shape, named.data()}, g, pairing, rotary_dim, token_rows,
                        KernelImpl::kOneDnn);
      {
        const ScopedKernelOverride onednn(KernelImpl::kOneDnn);
        RopeRotateInPlace({dtype, shape, forced.data()}, g, pairing, rotary_dim, token_rows);
      }
      ASSERT_EQ(named, want) << DTypeName(dtype);
      ASSERT_EQ(forced, want) << DTypeName(dtype);
    }
  }
}

// One 16-bit ulp at the magnitude of v.
double Ulp16(double v, DType t) {
  const int mantissa_bits = t == DType::kFloat16 ? 10 : 7;
  const int min_exp = t == DType::kFloat16 ? -14 : -126;
  const int e =
      v == 0 ? min_exp : std::max(static_cast<int>(std::floor(std::log2(std::abs(v)))), min_exp);
  return std::ldexp(1.0, e - mantissa_bits);
}

TEST(RopeKernel, SixteenBitWithinOneUlpOfFloat64) {
  for (KernelImpl isa : {KernelImpl::kAuto, KernelImpl::kScalar, KernelImpl::kAvx2,
                         KernelImpl::kAvx512, KernelImpl::kOneDnn}) {
    if (!CpuSupports(isa)) continue;
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (RopePairing pairing : {RopePairing::kRotateHalf, RopePairing::kInterleaved}) {
        const int64_t seq = 5, heads = 3, head_dim = 40;
        const int rotary_dim = 36;
        const int half = rotary_dim / 2;
        RopeGeometry g{1, seq, heads, head_dim, 0, heads * head_dim, head_dim};
        const std::vector<float> rows = RandomRows(seq, rotary_dim, 3);
        std::vector<const float*> token_rows;
        for (int64_t t = 0; t < seq; ++t) token_rows.push_back(&rows[t * rotary_dim]);
        const std::vector<float> src = RandomFloats(seq * heads * head_dim, 11);
        std::vector<uint16_t> x(src.size());
        FromFloat32(src.data(), dtype, x.data(), src.size());
        std::vector<float> in(src.size());
        ToFloat32(dtype, x.data(), in.data(), x.size());
        RopeRotateInPlace({dtype, {seq, heads, head_dim}, x.data()}, g, pairing, rotary_dim,
                          token_rows, isa);
        std::vector<float> out(x.size());
        ToFloat32(dtype, x.data(), out.data(), x.size());
        for (int64_t t = 0; t < seq; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t base = t * heads * head_dim + h * head_dim;
            for (int k = 0; k < half; ++k) {
              const int64_t a = base + (pairing == RopePairing::kRotateHalf ? k : 2 * k);
              const int64_t b = base + (pairing == RopePairing::kRotateHalf ? k + half : 2 * k + 1);
              const double c = rows[t * rotary_dim + k], s = rows[t * rotary_dim + half + k];
              const double exact_a = double{in[a]} * c - double{in[b]} * s;
              const double exact_b = double{in[b]} * c + double{in[a]} * s;
              // Correct rounding is within half an ulp; float32 arithmetic adds ~2^-23
              // relative. One ulp of the 16-bit format bounds both.
              ASSERT_LE(std::abs(out[a] - exact_a), Ulp16(exact_a, dtype)) << "a " << a;
              ASSERT_LE(std::abs(out[b] - exact_b), Ulp16(exact_b, dtype)) << "b " << b;
            }
            for (int64_t d = rotary_dim; d < head_dim; ++d) {
              ASSERT_EQ(out[base + d], in[base + d]);
            }
          }
        }
      }
    }
  }
}

// The fused 16-bit vector kernels, each ISA forced, against their formula element by
// element: widen, x_a*c - (x_b*s) and x_b*c + (x_a*s) each as one FMA over a rounded
// product, round once with FloatToHalf / FloatToBFloat16. Bit-identical, except that a NaN
// result need only be a NaN (which operand's payload and sign an FMA propagates is the
// hardware's choice). Inputs cycle through all 65536 16-bit patterns (NaN, infinities,
// subnormals, whose bfloat16 products are float32 subnormals); rotary dims leave tails of
// every length for 8- and 16-lane vectors; some cos/sin are 0 and +-1.
__attribute__((target("fma"))) uint16_t Rotate16Expected(DType dtype, uint16_t xa, uint16_t xb,
                                                         float c, float s, bool first) {
  const float fa = dtype == DType::kFloat16 ? HalfToFloat(xa) : BFloat16ToFloat(xa);
  const float fb = dtype == DType::kFloat16 ? HalfToFloat(xb) : BFloat16ToFloat(xb);
  const float r = first ? __builtin_fmaf(fa, c, -(fb * s)) : __builtin_fmaf(fb, c, fa * s);
  return dtype == DType::kFloat16 ? FloatToHalf(r) : FloatToBFloat16(r);
}

bool IsNan16(DType dtype, uint16_t v) {
  return dtype == DType::kFloat16 ? (v & 0x7fff) > 0x7c00 : (v & 0x7fff) > 0x7f80;
}

TEST(RopeKernel, SixteenBitVectorKernelsBitIdenticalToTheirFormula) {
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "no FMA for the reference";
  for (KernelImpl isa : {KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (RopePairing pairing : {RopePairing::kRotateHalf, RopePairing::kInterleaved}) {
        for (int rotary_dim : {2, 6, 14, 16, 18, 30, 32, 34, 46, 64, 80, 128}) {
          const int64_t head_dim = rotary_dim + 3, heads = 5;
          const int64_t seq = 65536 / (heads * head_dim) + 2;
          const int half = rotary_dim / 2;
          RopeGeometry g{1, seq, heads, head_dim, 0, heads * head_dim, head_dim};
          std::vector<float> rows = RandomRows(seq, rotary_dim, 5);
          rows[0] = 0.0f;
          rows[half] = 1.0f;
          if (half > 1) {
            rows[1] = -1.0f;
            rows[half + 1] = 0.0f;
          }
          std::vector<const float*> token_rows;
          for (int64_t t = 0; t < seq; ++t) token_rows.push_back(&rows[t * rotary_dim]);
          std::vector<uint16_t> x(static_cast<size_t>(seq * heads * head_dim));
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i * 40503u);
          const std::vector<uint16_t> in = x;
          RopeRotateInPlace({dtype, {seq, heads, head_dim}, x.data()}, g, pairing, rotary_dim,
                            token_rows, isa);
          for (int64_t t = 0; t < seq; ++t) {
            const float* row = &rows[t * rotary_dim];
            for (int64_t h = 0; h < heads; ++h) {
              const int64_t base = t * heads * head_dim + h * head_dim;
              for (int k = 0; k < half; ++k) {
                const int64_t a = base + (pairing == RopePairing::kRotateHalf ? k : 2 * k);
                const int64_t b =
                    base + (pairing == RopePairing::kRotateHalf ? k + half : 2 * k + 1);
                for (bool first : {true, false}) {
                  const uint16_t want =
                      Rotate16Expected(dtype, in[a], in[b], row[k], row[half + k], first);
                  const uint16_t got = x[first ? a : b];
                  if (IsNan16(dtype, want)) {
                    ASSERT_TRUE(IsNan16(dtype, got));
                    continue;
                  }
                  ASSERT_EQ(got, want)
                      << "isa " << isa << " " << DTypeName(dtype)
                      << (pairing == RopePairing::kRotateHalf ? " neox" : " gptj") << " rotary_dim "
                      << rotary_dim << " token " << t << " head " << h << " pair " << k
                      << (first ? " a" : " b") << " inputs " << in[a] << ", " << in[b];
                }
              }
              for (int64_t d = rotary_dim; d < head_dim; ++d) {
                ASSERT_EQ(x[base + d], in[base + d]) << "pass-through feature changed";
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// ApplyRope end to end.

// dot(R(m) q, R(n) k) depends only on m - n.
TEST(ApplyRope, DotProductDependsOnlyOnRelativePosition) {
  const int64_t head_dim = 64;
  const std::vector<float> qv = RandomFloats(head_dim, 1);
  const std::vector<float> kv = RandomFloats(head_dim, 2);
  const std::vector<int64_t> shifts = {0, 1, 17, 1000, 50000};
  const int64_t m = 12, n = 5;
  for (auto style : {RopeSpec::Style::kNeox, RopeSpec::Style::kGptj}) {
    RopeSpec spec;
    spec.layout = RopeSpec::Layout::kThd;
    spec.style = style;
    const int64_t tokens = static_cast<int64_t>(shifts.size());
    std::vector<float> q, k;
    std::vector<int64_t> q_ids, k_ids;
    for (int64_t t : shifts) {
      q.insert(q.end(), qv.begin(), qv.end());
      k.insert(k.end(), kv.begin(), kv.end());
      q_ids.push_back(m + t);
      k_ids.push_back(n + t);
    }
    TableCache cache(64 << 20);
    PositionsSpec qp;
    qp.ids = q_ids;
    PositionsSpec kp;
    kp.ids = k_ids;
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {tokens, 1, head_dim}, q.data()}, nullptr, qp,
                          cache),
                IsOk());
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {tokens, 1, head_dim}, k.data()}, nullptr, kp,
                          cache),
                IsOk());
    std::vector<double> dots;
    for (int64_t t = 0; t < tokens; ++t) {
      double d = 0;
      for (int64_t i = 0; i < head_dim; ++i) d += double{q[t * head_dim + i]} * k[t * head_dim + i];
      dots.push_back(d);
    }
    // 64 products of fp32 values <= 1, each rotated with ~1e-7 error: 1e-5 is generous.
    for (size_t t = 1; t < dots.size(); ++t) EXPECT_NEAR(dots[t], dots[0], 1e-5) << t;
    // And it is not trivially constant: a different offset gives a different dot.
    double unrotated = 0;
    for (int64_t i = 0; i < head_dim; ++i) unrotated += double{qv[i]} * kv[i];
    EXPECT_GT(std::abs(dots[0] - unrotated), 1e-3);
  }
}

// At position 10^6 the float64 angles keep the fp32 result within 4e-6 of a float64
// reference; HF's float32 table (fp32 inv_freq, fp32 position * inv_freq) is off by ~1e-2.
TEST(ApplyRope, LargePositionFloat64AnglesVersusHfFloat32Table) {
  const int64_t head_dim = 128;
  const int half = 64;
  const double base = 10000;
  const std::vector<int64_t> ids = {1000000, 1000001, 1000007};
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const std::vector<float> x = RandomFloats(tokens * head_dim, 5);

  RopeSpec spec;
  spec.layout = RopeSpec::Layout::kThd;
  std::vector<float> ours = x;
  TableCache cache(256 << 20);
  PositionsSpec positions;
  positions.ids = ids;
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {tokens, 1, head_dim}, ours.data()}, nullptr,
                        positions, cache),
              IsOk());

  double our_err = 0, hf_err = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const float* xt = &x[t * head_dim];
      // Reference: long double angle and trig.
      const long double inv = std::pow(static_cast<long double>(base), -2.0L * i / head_dim);
      const long double angle = static_cast<long double>(ids[t]) * inv;
      const long double c = std::cos(angle), s = std::sin(angle);
      const double ref_a = static_cast<double>(xt[i] * c - xt[i + half] * s);
      const double ref_b = static_cast<double>(xt[i + half] * c + xt[i] * s);
      our_err = std::max({our_err, std::abs(ours[t * head_dim + i] - ref_a),
                          std::abs(ours[t * head_dim + i + half] - ref_b)});
      // HF: inv_freq = 1 / base^(arange(0, d, 2).float() / d) in fp32, freqs = pos * inv_freq
      // in fp32, then cos/sin of the fp32 angle.
      const float inv32 = 1.0f / std::pow(static_cast<float>(base),
                                          static_cast<float>(2 * i) / static_cast<float>(head_dim));
      const float angle32 = static_cast<float>(ids[t]) * inv32;
      const float c32 = std::cos(angle32), s32 = std::sin(angle32);
      const float hf_a = xt[i] * c32 - xt[i + half] * s32;
      const float hf_b = xt[i + half] * c32 + xt[i] * s32;
      hf_err = std::max({hf_err, std::abs(hf_a - ref_a), std::abs(hf_b - ref_b)});
    }
  }
  std::printf("position ~1e6, max |error| vs float64: float64 angles %.3g, HF fp32 table %.3g\n",
              our_err, hf_err);
  EXPECT_LT(our_err, 4e-6);
  EXPECT_GT(hf_err, 1e-3);
}

TEST(ApplyRope, FarPositionsDoNotBuildALargeTable) {
  const int64_t head_dim = 128;
  TableCache cache(256 << 20);
  RopeSpec spec;
  std::vector<float> q = RandomFloats(3 * 8 * head_dim, 9);
  const std::vector<int64_t> ids = {1000000, 1000001, 1000002};
  PositionsSpec positions;
  positions.ids = ids;
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {1, 3, 8, head_dim}, q.data()}, nullptr, positions,
                        cache),
              IsOk());
  // A dense table up to 10^6 would be 2^20 * 128 * 4 bytes = 512 MiB.
  EXPECT_LT(cache.bytes(), size_t{64} << 10);

  // Modest positions: one dense 256-row table, shared by the next request.
  std::vector<float> q2 = RandomFloats(2 * 100 * 8 * head_dim, 10);
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {2, 100, 8, head_dim}, q2.data()}, nullptr,
                          PositionsSpec{}, cache),
                IsOk());
  }
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.bytes(), size_t{256} * head_dim * sizeof(float));
}

// The dense (cached) and per-position paths give identical rows.
TEST(ApplyRope, DenseAndSparsePathsAgree) {
  const int64_t head_dim = 32;
  RopeSpec spec;
  spec.scaling.type = RopeScalingSpec::Type::kYarn;
  spec.scaling.factor = 4;
  spec.scaling.original_max_position_embeddings = 256;
  const std::vector<float> x = RandomFloats(2 * 4 * 2 * head_dim, 12);
  const std::vector<int64_t> offsets = {3, 1000};
  PositionsSpec positions;
  positions.offsets = offsets;
  std::vector<float> dense = x, sparse = x;
  TableCache big(256 << 20), none(0);
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {2, 4, 2, head_dim}, dense.data()}, nullptr,
                        positions, big),
              IsOk());
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {2, 4, 2, head_dim}, sparse.data()}, nullptr,
                        positions, none),
              IsOk());
  EXPECT_EQ(big.entries(), 1u);
  EXPECT_EQ(none.entries(), 0u);
  EXPECT_EQ(dense, sparse);
}

// BSHD, BHSD and THD hold the same tokens in different orders and give the same result.
TEST(ApplyRope, LayoutsAgree) {
  const int64_t batch = 2, seq = 3, heads = 4, kv_heads = 2, head_dim = 8;
  const std::vector<float> q_bshd = RandomFloats(batch * seq * heads * head_dim, 13);
  const std::vector<float> k_bshd = RandomFloats(batch * seq * kv_heads * head_dim, 14);
  auto to_bhsd = [&](const std::vector<float>& x, int64_t h_count) {
    std::vector<float> y(x.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < h_count; ++h)
          for (int64_t d = 0; d < head_dim; ++d)
            y[((b * h_count + h) * seq + s) * head_dim + d] =
                x[((b * seq + s) * h_count + h) * head_dim + d];
    return y;
  };
  const std::vector<int64_t> ids = {5, 6, 9, 0, 1, 2};  // per row
  for (auto style : {RopeSpec::Style::kNeox, RopeSpec::Style::kGptj}) {
    RopeSpec spec;
    spec.style = style;
    spec.rotary_dim = 6;
    PositionsSpec positions;
    positions.ids = ids;
    TableCache cache(1 << 20);

    std::vector<float> q1 = q_bshd, k1 = k_bshd;
    TensorView k1v{DType::kFloat32, {batch, seq, kv_heads, head_dim}, k1.data()};
    spec.layout = RopeSpec::Layout::kBshd;
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {batch, seq, heads, head_dim}, q1.data()}, &k1v,
                          positions, cache),
                IsOk());

    std::vector<float> q2 = to_bhsd(q_bshd, heads), k2 = to_bhsd(k_bshd, kv_heads);
    TensorView k2v{DType::kFloat32, {batch, kv_heads, seq, head_dim}, k2.data()};
    spec.layout = RopeSpec::Layout::kBhsd;
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {batch, heads, seq, head_dim}, q2.data()}, &k2v,
                          positions, cache),
                IsOk());
    EXPECT_EQ(q2, to_bhsd(q1, heads));
    EXPECT_EQ(k2, to_bhsd(k1, kv_heads));

    // THD: the batch rows packed one after the other.
    std::vector<float> q3 = q_bshd, k3 = k_bshd;
    TensorView k3v{DType::kFloat32, {batch * seq, kv_heads, head_dim}, k3.data()};
    spec.layout = RopeSpec::Layout::kThd;
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {batch * seq, heads, head_dim}, q3.data()}, &k3v,
                          positions, cache),
                IsOk());
    EXPECT_EQ(q3, q1);
    EXPECT_EQ(k3, k1);
  }
}

TEST(ApplyRope, ThdDefaultPositionsAndSingleOffset) {
  const int64_t tokens = 4, head_dim = 4;
  const std::vector<float> x = RandomFloats(tokens * head_dim, 15);
  RopeSpec spec;
  spec.layout = RopeSpec::Layout::kThd;
  TableCache cache(1 << 20);
  std::vector<float> by_default = x, by_ids = x, by_offset = x, by_ids_shifted = x;
  const std::vector<int64_t> ids = {0, 1, 2, 3};
  const std::vector<int64_t> shifted = {7, 8, 9, 10};
  const std::vector<int64_t> offset = {7};
  PositionsSpec p_ids, p_offset, p_shifted;
  p_ids.ids = ids;
  p_offset.offsets = offset;
  p_shifted.ids = shifted;
  const Shape shape = {tokens, 1, head_dim};
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, by_default.data()}, nullptr, {}, cache),
              IsOk());
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, by_ids.data()}, nullptr, p_ids, cache),
              IsOk());
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, by_offset.data()}, nullptr, p_offset, cache),
              IsOk());
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, by_ids_shifted.data()}, nullptr, p_shifted,
                        cache),
              IsOk());
  EXPECT_EQ(by_default, by_ids);
  EXPECT_EQ(by_offset, by_ids_shifted);
  EXPECT_NE(by_offset, by_ids);
}

TEST(ApplyRope, SixteenBitQueriesFollowTheFloat32Path) {
  // The same request in fp16 / bf16 lands within one 16-bit ulp of the fp32 result
  // rounded (the fp32 result is itself within 1e-6 of exact; inputs are exactly
  // representable in both formats).
  const int64_t batch = 1, seq = 7, heads = 2, head_dim = 16;
  std::vector<float> x = RandomFloats(batch * seq * heads * head_dim, 16);
  for (float& v : x) v = BFloat16ToFloat(FloatToBFloat16(v));  // representable in bf16
  for (float& v : x) v = HalfToFloat(FloatToHalf(v));          // and in fp16
  RopeSpec spec;
  spec.scaling.type = RopeScalingSpec::Type::kLinear;
  spec.scaling.factor = 2;
  TableCache cache(1 << 20);
  std::vector<float> f32 = x;
  const Shape shape = {batch, seq, heads, head_dim};
  ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, f32.data()}, nullptr, {}, cache), IsOk());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint16_t> h(x.size());
    FromFloat32(x.data(), dtype, h.data(), x.size());
    ASSERT_THAT(ApplyRope(spec, {dtype, shape, h.data()}, nullptr, {}, cache), IsOk());
    std::vector<float> back(x.size());
    ToFloat32(dtype, h.data(), back.data(), h.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::abs(back[i] - f32[i]), Ulp16(f32[i], dtype)) << DTypeName(dtype) << " " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------
// GetTable rows.

TEST(RopeTableRows, RowsAreCosThenSinOfFloat64Angles) {
  RopeSpec spec;
  spec.base = 500000;
  const int rotary_dim = 16;
  auto table = RopeTableRows(spec, rotary_dim, 0, 40, 40);
  ASSERT_THAT(table, IsOk());
  ASSERT_EQ(table->rows, 40);
  ASSERT_EQ(table->cols, rotary_dim);
  for (int64_t p = 0; p < 40; ++p) {
    for (int i = 0; i < rotary_dim / 2; ++i) {
      const double angle = p * std::exp(-(2.0 * i / rotary_dim) * std::log(500000.0));
      // Rounded once from float64: within half a float32 ulp (plus 1e-15 of formula order).
      EXPECT_NEAR(table->Row(p)[i], std::cos(angle), 6e-8);
      EXPECT_NEAR(table->Row(p)[rotary_dim / 2 + i], std::sin(angle), 6e-8);
    }
  }
  // A chunk equals the same rows of the whole table.
  auto chunk = RopeTableRows(spec, rotary_dim, 30, 10, 40);
  ASSERT_THAT(chunk, IsOk());
  EXPECT_EQ(std::vector<float>(table->data.begin() + 30 * rotary_dim, table->data.end()),
            chunk->data);
}

TEST(RopeTableRows, DynamicUsesTheTableLength) {
  RopeSpec spec;
  spec.scaling.type = RopeScalingSpec::Type::kDynamic;
  spec.scaling.factor = 2;
  spec.scaling.max_position_embeddings = 64;
  auto rows = RopeTableRows(spec, 8, 100, 1, 200);
  ASSERT_THAT(rows, IsOk());
  auto freqs = ComputeRopeFrequencies(spec, 8, 200);
  ASSERT_THAT(freqs, IsOk());
  std::vector<float> want(8);
  FillRopeRowRange(*freqs, 100, 1, want.data());
  EXPECT_EQ(rows->data, want);
  auto plain = ComputeRopeFrequencies(spec, 8, 64);
  EXPECT_NE(plain->inv_freq, freqs->inv_freq);
}

// Every field of the spec takes part in SameRopeSpec, so a memo never answers one spec
// with another's frequencies.
TEST(RopeFrequencyMemo, EveryFieldTellsSpecsApart) {
  using Type = RopeScalingSpec::Type;
  const std::vector<std::function<void(RopeSpec&)>> changes = {
      [](RopeSpec& s) { s.base = 10000.0; },
      [](RopeSpec& s) { s.rotary_dim = 8; },
      [](RopeSpec& s) { s.style = RopeSpec::Style::kGptj; },
      [](RopeSpec& s) { s.layout = RopeSpec::Layout::kThd; },
      [](RopeSpec& s) { s.scaling.type = Type::kLinear; },
      [](RopeSpec& s) { s.scaling.factor = 2; },
      [](RopeSpec& s) { s.scaling.beta_fast = 32; },
      [](RopeSpec& s) { s.scaling.beta_slow = 1; },
      [](RopeSpec& s) { s.scaling.mscale = 0.0; },
      [](RopeSpec& s) { s.scaling.mscale_all_dim = 1; },
      [](RopeSpec& s) { s.scaling.attention_factor = 1; },
      [](RopeSpec& s) { s.scaling.low_freq_factor = 1; },
      [](RopeSpec& s) { s.scaling.high_freq_factor = 4; },
      [](RopeSpec& s) { s.scaling.original_max_position_embeddings = 4096; },
      [](RopeSpec& s) { s.scaling.max_position_embeddings = 4096; },
      [](RopeSpec& s) {
        s.scaling.short_factor = {1, 1};
      },
      [](RopeSpec& s) {
        s.scaling.long_factor = {1, 1};
      },
      [](RopeSpec& s) { s.scaling.truncate = true; },
      [](RopeSpec& s) { s.scaling.rope_proportion = 1; },
      [](RopeSpec& s) {
        s.mrope_section = {2, 1, 1};
      },
      [](RopeSpec& s) { s.mrope_interleaved = true; },
      [](RopeSpec& s) { s.axial_axes = 2; },
      [](RopeSpec& s) { s.xpos_scale_base = 512; },
      [](RopeSpec& s) { s.xpos_center = 0; },
  };
  const RopeSpec plain;
  EXPECT_TRUE(SameRopeSpec(plain, plain));
  for (size_t i = 0; i < changes.size(); ++i) {
    RopeSpec changed;
    changes[i](changed);
    EXPECT_FALSE(SameRopeSpec(plain, changed)) << "change " << i;
    EXPECT_FALSE(SameRopeSpec(changed, plain)) << "change " << i;
    EXPECT_TRUE(SameRopeSpec(changed, changed)) << "change " << i;
  }
  // Doubles compare by their bits: -0.0 is not 0.0 here.
  RopeSpec zero, negative_zero;
  zero.scaling.mscale = 0.0;
  negative_zero.scaling.mscale = -0.0;
  EXPECT_FALSE(SameRopeSpec(zero, negative_zero));
}

// What the memo returns is what ComputeRopeFrequencies returns for the same arguments, bit
// for bit, through a sequence that revisits specs and moves seq_len across the points where
// DYNAMIC, LONGROPE and xPos read it.
TEST(RopeFrequencyMemo, AnswersAsComputeDoes) {
  using Type = RopeScalingSpec::Type;
  RopeSpec plain;
  RopeSpec linear;
  linear.scaling.type = Type::kLinear;
  linear.scaling.factor = 4;
  RopeSpec dynamic;
  dynamic.scaling.type = Type::kDynamic;
  dynamic.scaling.factor = 2;
  dynamic.scaling.max_position_embeddings = 64;
  RopeSpec longrope;
  longrope.scaling.type = Type::kLongRope;
  longrope.scaling.original_max_position_embeddings = 32;
  longrope.scaling.max_position_embeddings = 128;
  longrope.scaling.short_factor = {1, 1, 1, 1};
  longrope.scaling.long_factor = {2, 3, 4, 5};
  RopeSpec xpos;
  xpos.xpos_scale_base = 512;
  RopeSpec xpos_centred = xpos;
  xpos_centred.xpos_center = 7;
  RopeSpec other_base;
  other_base.base = 500000.0;
  struct Ask {
    const RopeSpec* spec;
    int rotary_dim;
    int64_t seq_len;
  };
  const std::vector<Ask> asks = {
      {&plain, 8, 10},        {&plain, 8, 11},        {&plain, 16, 11},  {&other_base, 16, 11},
      {&plain, 16, 11},       {&linear, 8, 5},        {&dynamic, 8, 10}, {&dynamic, 8, 64},
      {&dynamic, 8, 65},      {&dynamic, 8, 200},     {&dynamic, 8, 10}, {&longrope, 8, 32},
      {&longrope, 8, 33},     {&longrope, 8, 31},     {&xpos, 8, 10},    {&xpos, 8, 100},
      {&xpos_centred, 8, 10}, {&xpos_centred, 8, 99}, {&xpos, 8, 100},   {&plain, 8, 1000},
  };
  RopeFrequencyMemo memo;
  for (size_t i = 0; i < asks.size(); ++i) {
    const Ask& a = asks[i];
    absl::StatusOr<RopeFrequencies> want = ComputeRopeFrequencies(*a.spec, a.rotary_dim, a.seq_len);
    absl::StatusOr<const RopeFrequencies*> got = memo.Get(*a.spec, a.rotary_dim, a.seq_len);
    ASSERT_THAT(want, IsOk()) << "ask " << i;
    ASSERT_THAT(got, IsOk()) << "ask " << i;
    EXPECT_EQ((*got)->inv_freq, want->inv_freq) << "ask " << i;
    EXPECT_EQ((*got)->attention_factor, want->attention_factor) << "ask " << i;
    EXPECT_EQ((*got)->slot_axis, want->slot_axis) << "ask " << i;
    ASSERT_EQ((*got)->xpos.has_value(), want->xpos.has_value()) << "ask " << i;
    if (want->xpos) {
      EXPECT_EQ((*got)->xpos->center, want->xpos->center) << "ask " << i;
      EXPECT_EQ((*got)->xpos->scale_base, want->xpos->scale_base) << "ask " << i;
    }
    for (int64_t rows : {16, 32, 16}) {
      EXPECT_EQ(memo.PrefixTableKey(rows), RopeCacheKey(*want, 0, rows)) << "ask " << i;
    }
  }
  // A refused spec is refused every time, and the memo then answers the next spec afresh.
  RopeSpec bad;
  bad.base = -1.0;
  EXPECT_FALSE(memo.Get(bad, 8, 10).ok());
  EXPECT_FALSE(memo.Get(bad, 8, 10).ok());
  absl::StatusOr<const RopeFrequencies*> again = memo.Get(plain, 8, 10);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ((*again)->inv_freq, ComputeRopeFrequencies(plain, 8, 10)->inv_freq);
}

TEST(RopeTableRows, Errors) {
  RopeSpec spec;
  EXPECT_THAT(RopeTableRows(spec, 7, 0, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dim is 7; a rope table needs an even dim > 0"));
  EXPECT_THAT(RopeTableRows(spec, 8, 5, 10, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "rows 5 .. 5 + 10 do not fit in length 10"));
  EXPECT_THAT(RopeTableRows(spec, 8, 0, 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("length is 0")));
}

// ---------------------------------------------------------------------------------------
// Errors: INVALID_ARGUMENT naming the field, and nothing written.

// A valid request (BSHD, query [2, 3, 4, 32], key [2, 3, 2, 32]) that each case breaks.
struct Request {
  RopeSpec spec;
  Shape q = {2, 3, 4, 32};
  Shape k = {2, 3, 2, 32};
  DType qt = DType::kFloat32;
  DType kt = DType::kFloat32;
  std::vector<int64_t> ids;
  std::vector<int64_t> offsets;
  std::vector<double> values;
};

struct ErrorCase {
  const char* name;
  std::function<void(Request&)> mutate;
  const char* message;
};

// Found by fuzzing: an empty query [56, 0, 0, 262144000] has no bytes to bound its
// head_dim, and the frequencies (head_dim / 2 doubles, 1 GB) were allocated before noticing
// there was nothing to rotate.
TEST(ApplyRope, EmptyQueryWithAHugeHeadDimIsRefusedBeforeAllocating) {
  TableCache cache(1 << 20);
  float dummy = 0;
  RopeSpec spec;
  const TensorView empty{DType::kFloat16, {56, 0, 0, 262144000}, &dummy};
  const absl::Status status = ApplyRope(spec, empty, nullptr, {}, cache);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("(head_dim) is 262144000; at most 1048576"), std::string::npos)
      << status;
  spec.rotary_dim = (1 << 20) + 2;
  const absl::Status explicit_dim =
      ApplyRope(spec, {DType::kFloat32, {0, 1, 1, int64_t{1} << 22}, &dummy}, nullptr, {}, cache);
  EXPECT_NE(explicit_dim.message().find("(rope.rotary_dim) is 1048578"), std::string::npos)
      << explicit_dim;
  // The widest served rotary dimension on an empty query is fine (and does nothing).
  spec.rotary_dim = 1 << 20;
  EXPECT_THAT(ApplyRope(spec, {DType::kFloat32, {0, 1, 1, 1 << 20}, &dummy}, nullptr, {}, cache),
              IsOk());
}

TEST(ApplyRope, ErrorsNameTheField) {
  using T = RopeScalingSpec::Type;
  using L = RopeSpec::Layout;
  const std::vector<ErrorCase> cases = {
      {"odd rotary_dim", [](Request& r) { r.spec.rotary_dim = 15; },
       "rope.rotary_dim is 15; it must be even"},
      {"zero rotary_dim", [](Request& r) { r.spec.rotary_dim = 0; },
       "rope.rotary_dim is 0; it must be > 0"},
      {"rotary_dim > head_dim", [](Request& r) { r.spec.rotary_dim = 34; },
       "rope.rotary_dim is 34; it must be <= head_dim"},
      {"odd head_dim", [](Request& r) { r.q[3] = r.k[3] = 15; }, "input.shape[3] (head_dim) is 15"},
      {"base", [](Request& r) { r.spec.base = -1; }, "rope.base is -1; it must be > 0"},
      {"factor zero",
       [](Request& r) {
         r.spec.scaling.type = T::kLinear;
         r.spec.scaling.factor = 0;
       },
       "rope.scaling.factor is 0"},
      {"factor unset",
       [](Request& r) {
         r.spec.scaling.type = T::kLlama3;
         r.spec.scaling.original_max_position_embeddings = 8192;
       },
       "rope.scaling.factor is unset"},
      {"dynamic without max",
       [](Request& r) {
         r.spec.scaling.type = T::kDynamic;
         r.spec.scaling.factor = 2;
       },
       "rope.scaling.max_position_embeddings is unset"},
      {"yarn beta",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.factor = 2;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.beta_fast = -3;
       },
       "rope.scaling.beta_fast is -3"},
      {"llama3 bands",
       [](Request& r) {
         r.spec.scaling.type = T::kLlama3;
         r.spec.scaling.factor = 8;
         r.spec.scaling.original_max_position_embeddings = 8192;
         r.spec.scaling.low_freq_factor = 4;
         r.spec.scaling.high_freq_factor = 2;
       },
       "rope.scaling.high_freq_factor is 2"},
      {"longrope list length",
       [](Request& r) {
         r.spec.scaling.type = T::kLongRope;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.factor = 32;
         r.spec.scaling.short_factor.assign(16, 1.0);
         r.spec.scaling.long_factor.assign(3, 1.0);
       },
       "rope.scaling.long_factor has 3 entries; it needs rotary_dim/2 = 16"},
      // Finite or refused: each of these used to rotate into inf/NaN with status OK.
      {"base that overflows the frequencies", [](Request& r) { r.spec.base = 5e-324; },
       "rope.base is 4.94066e-324; it must be >= 1e-06"},
      {"linear factor 1e-300 at offset 1e9",
       [](Request& r) {
         r.spec.scaling.type = T::kLinear;
         r.spec.scaling.factor = 1e-300;
         r.offsets = {1000000000};
       },
       "rope.scaling.factor is 1e-300; it must be in [1e-06, 1e+06]"},
      {"yarn attention_factor 1e300",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.factor = 4;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.attention_factor = 1e300;
       },
       "rope.scaling.attention_factor is 1e+300"},
      {"yarn mscale 1e300",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.factor = 4;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.mscale = 1e300;
         r.spec.scaling.mscale_all_dim = 1;
       },
       "rope.scaling.mscale is 1e+300"},
      {"yarn computed attention factor over the range",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.factor = 1e6;  // 0.1 * 1e6 * log(1e6) + 1 = 1.38e6
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.mscale = 1e6;
         r.spec.scaling.mscale_all_dim = 1e-9;
       },
       "give an attention factor of 1.38155e+06"},
      {"yarn beta_fast 1e-320",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.factor = 4;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.beta_fast = 1e-320;
       },
       "rope.scaling.beta_fast is 9.99989e-321"},
      {"yarn derived factor 2^62",
       [](Request& r) {
         r.spec.scaling.type = T::kYarn;
         r.spec.scaling.original_max_position_embeddings = 1;
         r.spec.scaling.max_position_embeddings = int64_t{1} << 62;
       },
       "rope.scaling.factor (max_position_embeddings / original_max_position_embeddings) is"},
      {"longrope long_factor entry 1e-300",
       [](Request& r) {
         r.spec.scaling.type = T::kLongRope;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.factor = 32;
         r.spec.scaling.short_factor.assign(16, 1.0);
         r.spec.scaling.long_factor.assign(16, 1.0);
         r.spec.scaling.long_factor[5] = 1e-300;
       },
       "rope.scaling.long_factor[5] is 1e-300"},
      {"longrope attention_factor 1e300",
       [](Request& r) {
         r.spec.scaling.type = T::kLongRope;
         r.spec.scaling.original_max_position_embeddings = 4096;
         r.spec.scaling.factor = 32;
         r.spec.scaling.short_factor.assign(16, 1.0);
         r.spec.scaling.long_factor.assign(16, 1.0);
         r.spec.scaling.attention_factor = 1e300;
       },
       "rope.scaling.attention_factor is 1e+300"},
      {"key head_dim", [](Request& r) { r.k[3] = 16; }, "key.shape[3] (head_dim) is 16"},
      {"key batch", [](Request& r) { r.k[0] = 1; }, "key.shape[0] (batch) is 1"},
      {"key seq", [](Request& r) { r.k[1] = 2; }, "key.shape[1] (seq) is 2"},
      {"key heads", [](Request& r) { r.k[2] = 3; },
       "key.shape[2] (heads) is 3; it must divide input.shape[2] (4)"},
      {"input rank",
       [](Request& r) {
         r.q = {2, 3, 128};
       },
       "input.shape is [2,3,128]"},
      {"input dtype", [](Request& r) { r.qt = DType::kInt32; }, "input.dtype is INT32"},
      {"key dtype", [](Request& r) { r.kt = DType::kInt64; }, "key.dtype is INT64"},
      {"negative position",
       [](Request& r) {
         r.ids = {0, 1, -2};
       },
       "positions.ids[2] is -2"},
      {"values",
       [](Request& r) {
         r.values = {0.5, 1, 2};
       },
       "positions.values"},
      {"thd ids",
       [](Request& r) {
         r.spec.layout = L::kThd;
         r.q = {6, 4, 32};
         r.k = {6, 2, 32};
         r.ids = {1, 2};
       },
       "positions.ids has 2 entries; layout THD needs one per token"},
      {"thd offsets",
       [](Request& r) {
         r.spec.layout = L::kThd;
         r.q = {6, 4, 32};
         r.k = {6, 2, 32};
         r.offsets = {1, 2};
       },
       "positions.offsets has 2 entries"},
      {"bhsd key seq",
       [](Request& r) {
         r.spec.layout = L::kBhsd;
         r.q = {2, 4, 3, 32};
         r.k = {2, 2, 5, 32};
       },
       "key.shape[2] (seq) is 5"},
  };
  for (const ErrorCase& c : cases) {
    Request r;
    c.mutate(r);
    std::vector<float> q(1024, 0.5f), k(1024, 0.25f);
    const std::vector<float> q0 = q, k0 = k;
    TensorView qv{r.qt, r.q, q.data()};
    TensorView kv{r.kt, r.k, k.data()};
    PositionsSpec positions;
    positions.ids = r.ids;
    positions.offsets = r.offsets;
    positions.values = r.values;
    TableCache cache(1 << 20);
    const absl::Status s = ApplyRope(r.spec, qv, &kv, positions, cache);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
    EXPECT_NE(std::string(s.message()).find(c.message), std::string::npos)
        << c.name << ": got \"" << s.message() << "\", want it to contain \"" << c.message << "\"";
    EXPECT_EQ(q, q0) << c.name << ": input written on error";
    EXPECT_EQ(k, k0) << c.name << ": key written on error";
  }
}

TEST(ApplyRope, EdgesOfTheFiniteRangesStayFiniteAtTheLastPosition) {
  using T = RopeScalingSpec::Type;
  RopeSpec spec;
  spec.base = kMinRopeBase;
  for (const double factor : {kMinRopeFactor, kMaxRopeFactor}) {
    spec.scaling.type = T::kLinear;
    spec.scaling.factor = factor;
    // Queries of 1e30 (below the documented 1e32) at positions 2^40 - 1 and 2^40.
    std::vector<float> q(2 * 2 * 8, 1e30f);
    TensorView qv{DType::kFloat32, {1, 2, 2, 8}, q.data()};
    const std::vector<int64_t> offsets = {kMaxPosition - 1};
    PositionsSpec positions;
    positions.offsets = offsets;
    TableCache cache(1 << 20);
    ASSERT_THAT(ApplyRope(spec, qv, nullptr, positions, cache), IsOk()) << factor;
    for (float v : q) ASSERT_TRUE(std::isfinite(v)) << "factor " << factor;
  }
  spec.scaling = {};
  spec.scaling.type = T::kYarn;
  spec.scaling.factor = 4;
  spec.scaling.original_max_position_embeddings = 4096;
  spec.scaling.attention_factor = kMaxAttentionFactor;
  auto rows = RopeTableRows(spec, 8, kMaxPosition - 3, 4, kMaxPosition + 1);
  ASSERT_THAT(rows, IsOk());
  for (float v : rows->data) ASSERT_TRUE(std::isfinite(v));
}

// NEOX rotation of one [head_dim] vector at `position` with base 10000, written from the
// definition (HF's rotate_half: pairs (i, i + d/2), angle position * base^(-2i/d)).
std::vector<float> NeoxRotated(const float* x, int64_t d, int64_t position) {
  std::vector<float> out(static_cast<size_t>(d));
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle = position * std::pow(10000.0, -2.0 * i / d);
    const double a = x[i], b = x[i + d / 2];
    out[i] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
    out[i + d / 2] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
  }
  return out;
}

// GQA/MQA: fewer key heads than query heads. Every key head of every token is rotated by
// its token's position (not skipped, not indexed as if it had the query's head count).
TEST(ApplyRope, GqaAndMqaKeysRotatedByTheirPositions) {
  RopeSpec spec;
  TableCache cache(1 << 20);
  constexpr int64_t kBatch = 2, kSeq = 3, kHeads = 4, kDim = 8;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t kv_heads : {1, 2, 4}) {
    std::vector<float> q(kBatch * kSeq * kHeads * kDim), k(kBatch * kSeq * kv_heads * kDim);
    for (float& v : q) v = uniform(rng);
    for (float& v : k) v = uniform(rng);
    const std::vector<float> q0 = q, k0 = k;
    TensorView kv{DType::kFloat32, {kBatch, kSeq, kv_heads, kDim}, k.data()};
    ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, {kBatch, kSeq, kHeads, kDim}, q.data()}, &kv, {},
                          cache),
                IsOk())
        << kv_heads;
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t s = 0; s < kSeq; ++s) {
        for (int64_t h = 0; h < kv_heads; ++h) {
          const int64_t at = ((b * kSeq + s) * kv_heads + h) * kDim;
          const std::vector<float> want = NeoxRotated(k0.data() + at, kDim, s);
          for (int64_t i = 0; i < kDim; ++i) {
            ASSERT_NEAR(k[at + i], want[i], 1e-5)
                << "kv_heads " << kv_heads << " b " << b << " s " << s << " head " << h;
          }
        }
        for (int64_t h = 0; h < kHeads; ++h) {
          const int64_t at = ((b * kSeq + s) * kHeads + h) * kDim;
          const std::vector<float> want = NeoxRotated(q0.data() + at, kDim, s);
          for (int64_t i = 0; i < kDim; ++i) ASSERT_NEAR(q[at + i], want[i], 1e-5);
        }
      }
    }
    if (kv_heads == 1) {  // position 0 is the identity; later tokens must have moved
      EXPECT_NE(std::vector<float>(k.begin() + kDim, k.begin() + 2 * kDim),
                std::vector<float>(k0.begin() + kDim, k0.begin() + 2 * kDim));
    }
  }
}

}  // namespace
}  // namespace posenc

namespace posenc {
namespace {

// HF get_rope_index's layout, written out by hand: text(2), an image 1x2x3, a video 2x1x2
// with temporal_scale 1.5 (t at 5 + floor(1.5 t)), text(1); every axis shifted by 10.
TEST(AxisPositions, SegmentsLayOutLikeGetRopeIndex) {
  PositionsSpec spec;
  spec.mrope_segments = {
      {2, 0, 0, 0, 1.0}, {0, 1, 2, 3, 1.0}, {0, 2, 1, 2, 1.5}, {1, 0, 0, 0, 1.0}};
  const std::vector<int64_t> offsets = {10};
  spec.offsets = offsets;
  absl::StatusOr<AxisPositionGrid> grid = ResolveAxisPositions(spec, 3, 1, 13);
  ASSERT_THAT(grid, IsOk());
  const std::vector<int64_t> t = {0, 1, 2, 2, 2, 2, 2, 2, 5, 5, 6, 6, 7};
  const std::vector<int64_t> h = {0, 1, 2, 2, 2, 3, 3, 3, 5, 5, 5, 5, 7};
  const std::vector<int64_t> w = {0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 5, 6, 7};
  for (int64_t i = 0; i < 13; ++i) {
    EXPECT_EQ(grid->At(0, 0, i), t[i] + 10) << i;
    EXPECT_EQ(grid->At(1, 0, i), h[i] + 10) << i;
    EXPECT_EQ(grid->At(2, 0, i), w[i] + 10) << i;
  }
  EXPECT_EQ(grid->max_position, 17);

  spec.mrope_segments.push_back({1, 0, 0, 0, 1.0});
  EXPECT_THAT(ResolveAxisPositions(spec, 3, 1, 13).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions.mrope_segments cover more than 13 tokens")));
  EXPECT_THAT(ResolveAxisPositions(spec, 2, 1, 14).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need 3 axes")));

  // A segment with neither text nor grid covers nothing: a mistake, not a no-op.
  spec.mrope_segments.back() = {0, 0, 0, 0, 1.0};
  EXPECT_THAT(ResolveAxisPositions(spec, 3, 1, 13).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions.mrope_segments[4] is empty")));
}

// The rotation of x [batch, seq, heads, head_dim] by ApplyRope with per-axis positions ids
// ([3 axes][batch][seq]) on every ISA equals the one from rows computed directly
// (FillRopeTokenRow) with the scalar kernel.
void ExpectAssembledRowsRotateLikeDirectRows(int64_t batch, int64_t seq, int64_t heads,
                                             int64_t head_dim, const std::vector<int64_t>& ids) {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  const int64_t tokens = batch * seq;
  const int64_t max_id = *std::max_element(ids.begin(), ids.end());
  for (bool interleaved : {false, true}) {
    RopeSpec spec;
    spec.base = 1e6;
    spec.rotary_dim = 32;
    spec.mrope_section = {4, 6, 6};
    spec.mrope_interleaved = interleaved;
    PositionsSpec positions;
    positions.axis_ids = ids;
    absl::StatusOr<RopeFrequencies> freqs = ComputeRopeFrequencies(spec, 32, max_id + 1);
    ASSERT_THAT(freqs, IsOk());
    const std::vector<float> src = RandomFloats(tokens * heads * head_dim, 5);
    std::vector<float> want = src;
    std::vector<float> rows(tokens * 32);
    std::vector<const float*> token_rows;
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t p[3] = {ids[t], ids[tokens + t], ids[2 * tokens + t]};
      FillRopeTokenRow(*freqs, p, &rows[t * 32], nullptr);
      token_rows.push_back(&rows[t * 32]);
    }
    const RopeGeometry g{batch,   seq, heads, head_dim, seq * heads * head_dim, heads * head_dim,
                         head_dim};
    const Shape shape{batch, seq, heads, head_dim};
    RopeRotateInPlace({DType::kFloat32, shape, want.data()}, g, RopePairing::kRotateHalf, 32,
                      token_rows, KernelImpl::kScalar);
    for (KernelImpl isa : isas) {
      const ScopedKernelOverride scope(isa);
      TableCache cache(1 << 20);
      std::vector<float> got = src;
      ASSERT_THAT(ApplyRope(spec, {DType::kFloat32, shape, got.data()}, nullptr, positions, cache),
                  IsOk());
      // Vector kernels use FMA: within a float32 rounding or two of the scalar formula.
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6f) << KernelImplName(isa) << " seq " << seq
                                            << " interleaved " << interleaved << " at " << i;
      }
    }
  }
}

// A token whose axes differ gets a row assembled from its axes' positions.
TEST(AxisPositions, AssembledRowsRotateLikeDirectRowsOnEveryIsa) {
  ExpectAssembledRowsRotateLikeDirectRows(2, 5, 3, 40, {0, 1, 1, 1, 4, 7, 8, 8, 9, 9,   //
                                                        0, 1, 1, 2, 4, 7, 8, 9, 9, 12,  //
                                                        0, 1, 2, 1, 4, 7, 8, 9, 8, 13});
}

// Enough assembled rows (3,000 of 32 floats) for the kernel threads to split the assembly.
TEST(AxisPositions, AssembledRowsOnKernelThreadsRotateLikeDirectRows) {
  const int64_t seq = 3000;
  std::vector<int64_t> ids(3 * seq);
  for (int64_t t = 0; t < seq; ++t) {  // an image grid of 50 x 60 patches after 0..99 text
    const bool text = t < 100;
    ids[t] = text ? t : 100;
    ids[seq + t] = text ? t : 100 + (t - 100) / 60;
    ids[2 * seq + t] = text ? t : 100 + (t - 100) % 60;
  }
  SetKernelThreads(2);
  ExpectAssembledRowsRotateLikeDirectRows(1, seq, 2, 32, ids);
  SetKernelThreads(0);
}

}  // namespace
}  // namespace posenc
