// Sinusoidal2D (ViT/MAE 2D sin-cos), Fourier features, MULTIPLY fusion and tables of
// relative-order positions (Transformer-XL, XLNet) against float64 re-implementations
// written here from the reference code, not from posenc's:
//  - MAE's get_2d_sincos_pos_embed (models_mae.py / util/pos_embed.py): meshgrid(w, h),
//    emb_h from grid[0] (the column index), [emb_h, emb_w], a zero cls row first;
//  - Tancik et al.'s input_mapping with the contract's order: [cos(2 pi v B^T), sin(...)];
//  - Transformer-XL's PositionalEmbedding: inv_freq = 1/(10000^(arange(0, d, 2)/d)),
//    pos_seq = arange(klen-1, -1, -1.0) clamped to clamp_len, [sin, cos].
// Tolerances: tables are float64 rounded once to float32 (|pe| <= 1: within 2^-24 plus the
// float64 error of sin/cos of large angles, 1.2e-7 here); a float32 x*a*pe*b within 3 ulps
// of the float64 product; 16-bit results within one ulp of their dtype.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/add_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/schemes/absolute_scheme.h"
#include "server/tables/sinusoidal_table.h"
#include "server/tables/table_positions.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

constexpr double kRoundedOnce = 1.2e-7;

// ---- references ---------------------------------------------------------------------

// MAE get_1d_sincos_pos_embed_from_grid(embed_dim, pos): omega = arange(D/2) / (D/2),
// omega = 1 / 10000**omega, out = outer(pos, omega), [sin(out), cos(out)].
std::vector<double> MaeOneD(int64_t embed_dim, double pos, double base) {
  const int64_t half = embed_dim / 2;
  std::vector<double> out(embed_dim);
  for (int64_t k = 0; k < half; ++k) {
    const double omega = 1.0 / std::pow(base, static_cast<double>(k) / (embed_dim / 2.0));
    out[k] = std::sin(pos * omega);
    out[half + k] = std::cos(pos * omega);
  }
  return out;
}

// MAE get_2d_sincos_pos_embed with grid_size (H, W): grid = meshgrid(grid_w, grid_h) so
// grid[0][i][j] = j and grid[1][i][j] = i; emb_h = 1d(D/2, grid[0]), emb_w = 1d(D/2, grid[1]);
// emb = concat([emb_h, emb_w], axis=1) over the flattened [H, W] grid; cls: a zero row first.
std::vector<double> Mae2D(int64_t embed_dim, int64_t h, int64_t w, bool cls, double base) {
  std::vector<double> out;
  if (cls) out.assign(embed_dim, 0.0);
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < w; ++j) {
      const double grid0 = static_cast<double>(j), grid1 = static_cast<double>(i);
      const std::vector<double> emb_h = MaeOneD(embed_dim / 2, grid0, base);
      const std::vector<double> emb_w = MaeOneD(embed_dim / 2, grid1, base);
      out.insert(out.end(), emb_h.begin(), emb_h.end());
      out.insert(out.end(), emb_w.begin(), emb_w.end());
    }
  }
  return out;
}

// x [tokens, m] @ B^T [m, F] times 2 pi, then [cos, sin].
std::vector<double> FourierRef(const std::vector<double>& b, int64_t m,
                               const std::vector<double>& v) {
  const int64_t f = static_cast<int64_t>(b.size()) / m, tokens = static_cast<int64_t>(v.size()) / m;
  std::vector<double> out(tokens * 2 * f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < f; ++k) {
      double proj = 0;
      for (int64_t a = 0; a < m; ++a) proj += (2.0 * M_PI * v[t * m + a]) * b[k * m + a];
      out[t * 2 * f + k] = std::cos(proj);
      out[t * 2 * f + f + k] = std::sin(proj);
    }
  }
  return out;
}

// Transformer-XL PositionalEmbedding(demb)(pos_seq) for one position.
std::vector<double> TransformerXlRow(int64_t demb, double pos) {
  std::vector<double> row(demb);
  for (int64_t i = 0; i < demb / 2; ++i) {
    const double inv_freq = 1.0 / std::pow(10000.0, static_cast<double>(2 * i) / demb);
    row[i] = std::sin(pos * inv_freq);
    row[demb / 2 + i] = std::cos(pos * inv_freq);
  }
  return row;
}

// ---- helpers --------------------------------------------------------------------------

PositionsSpec Positions(absl::Span<const int64_t> offsets, absl::Span<const int64_t> ids,
                        absl::Span<const double> values) {
  PositionsSpec p;
  p.offsets = offsets;
  p.ids = ids;
  p.values = values;
  return p;
}

// Values of `dtype` as bytes, and what they hold as doubles.
struct Input {
  DType dtype;
  std::vector<char> bytes;
  std::vector<double> values;
};

Input RandomInput(DType dtype, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2, 2);
  Input in{dtype, std::vector<char>(n * DTypeSize(dtype)), std::vector<double>(n)};
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(in.bytes.data() + 4 * i, &v, 4);
      in.values[i] = v;
    } else {
      const uint16_t h = dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(in.bytes.data() + 2 * i, &h, 2);
      in.values[i] = dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    }
  }
  return in;
}

double ValueAt(DType dtype, const char* bytes, int64_t i) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, bytes + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes + 2 * i, 2);
  return dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
}

// |got - want| within the dtype's tolerance: for float32 3 ulps of |want| plus the table's
// rounding times |x*a*b|; for 16-bit one ulp of the dtype (the float32 result rounded
// again) plus the same, and float16's subnormal spacing.
double Tolerance(DType dtype, double want, double table_error) {
  const double ulp = dtype == DType::kFloat32   ? std::ldexp(1.0, -23)
                     : dtype == DType::kFloat16 ? std::ldexp(1.0, -10)
                                                : std::ldexp(1.0, -7);
  const double ulps = dtype == DType::kFloat32 ? 3.0 : 1.0;
  // float16's subnormals are 2^-24 apart.
  const double floor = dtype == DType::kFloat16 ? std::ldexp(1.0, -24) : 1e-12;
  return ulps * ulp * std::abs(want) + table_error + floor;
}

// Checks result bytes [batch, seq, d] against combine(x, pe_ref) for every dtype.
void ExpectCombined(const Input& in, const char* out, int64_t batch, int64_t seq, int64_t d,
                    const std::vector<double>& pe, bool pe_per_batch, Fusion fusion, float a,
                    float b, const std::string& what) {
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = (n * seq + s) * d + c;
        const double p = pe[((pe_per_batch ? n * seq : 0) + s) * d + c];
        const double x = in.values[i];
        const double want = fusion == Fusion::kMultiply ? (x * a) * (p * b) : x * a + p * b;
        const double table_error =
            kRoundedOnce * std::abs(fusion == Fusion::kMultiply ? x * a * b : b);
        const double got = ValueAt(in.dtype, out, i);
        ASSERT_LE(std::abs(got - want), Tolerance(in.dtype, want, table_error))
            << what << " " << DTypeName(in.dtype) << " [" << n << "," << s << "," << c << "] got "
            << got << " want " << want;
      }
    }
  }
}

// ---- Sinusoidal2D -------------------------------------------------------------------

struct GridCase {
  int64_t h, w;
  bool cls;
  int64_t d;
  double base;
};

TEST(Sinusoidal2D, MatchesMaeGet2dSincosPosEmbed) {
  TableCache cache(64 << 20);
  const GridCase cases[] = {{4, 4, false, 16, 10000},  {3, 5, false, 16, 10000},
                            {5, 3, true, 32, 10000},   {1, 7, true, 8, 10000},
                            {14, 14, true, 64, 10000}, {2, 6, false, 12, 100}};
  for (const GridCase& g : cases) {
    const int64_t seq = g.h * g.w + (g.cls ? 1 : 0);
    std::vector<float> x(2 * seq * g.d, 0.0f);
    Sinusoidal2DSpec spec{g.h, g.w, g.cls, g.base, 0};
    ASSERT_THAT(ApplySinusoidal2D(spec, {}, TensorView{DType::kFloat32, {2, seq, g.d}, x.data()},
                                  {}, cache, {}),
                IsOk());
    const std::vector<double> want = Mae2D(g.d, g.h, g.w, g.cls, g.base);
    ASSERT_EQ(static_cast<int64_t>(want.size()), seq * g.d);
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t i = 0; i < seq * g.d; ++i) {
        ASSERT_NEAR(x[n * seq * g.d + i], want[i], kRoundedOnce)
            << g.h << "x" << g.w << " cls " << g.cls << " d " << g.d << " element " << i;
      }
    }
  }
}

TEST(Sinusoidal2D, EveryFusionAndDtypeOnANonSquareGridWithClsToken) {
  TableCache cache(64 << 20);
  std::mt19937 rng(3);
  const int64_t h = 3, w = 5, d = 24, seq = h * w + 1, batch = 2;
  const std::vector<double> pe = Mae2D(d, h, w, true, 10000);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Fusion fusion : {Fusion::kAdd, Fusion::kMultiply, Fusion::kConcat}) {
      const float a = 1.5f, b = 0.75f;
      Input in = RandomInput(dtype, batch * seq * d, rng);
      std::vector<char> bytes = in.bytes;
      CombineSpec combine{a, b, fusion, std::nullopt};
      auto r = ApplySinusoidal2D({h, w, true, 10000, 0}, combine,
                                 TensorView{dtype, {batch, seq, d}, bytes.data()}, {}, cache, {});
      ASSERT_THAT(r, IsOk());
      if (fusion != Fusion::kConcat) {
        ExpectCombined(in, bytes.data(), batch, seq, d, pe, false, fusion, a, b, "sinusoidal_2d");
        // The cls token's encoding row is zeros: MULTIPLY zeroes it, ADD leaves x*a.
        const double cls = ValueAt(dtype, bytes.data(), 0);
        EXPECT_EQ(cls, fusion == Fusion::kMultiply ? 0.0 : cls);
        continue;
      }
      ASSERT_TRUE(r->concat.has_value());
      EXPECT_EQ(r->shape, (Shape{batch, seq, 2 * d}));
      for (int64_t t = 0; t < batch * seq; ++t) {
        for (int64_t c = 0; c < d; ++c) {
          const double want_pe = pe[(t % seq) * d + c] * b;
          const double got = ValueAt(dtype, r->concat->data(), t * 2 * d + d + c);
          ASSERT_LE(std::abs(got - want_pe), Tolerance(dtype, want_pe, kRoundedOnce))
              << DTypeName(dtype) << " token " << t << " column " << c;
        }
      }
    }
  }
}

// `apply` (a scheme's bfloat16 add of cached rows to an input [2, 40, 200]: 12 column groups
// of 16 and 8 more) on every ISA is bit-identical to the scalar loop's; at AVX2 it reads a
// copy of the table in the add's own layout, cached beside the table.
void ExpectBf16AddReadsTheAddsLayout(
    const std::function<absl::Status(const TensorView&, TableCache&)>& apply) {
  const int64_t batch = 2, seq = 40, d = 200;
  std::vector<uint16_t> input(batch * seq * d);
  for (size_t i = 0; i < input.size(); ++i) input[i] = FloatToBFloat16(0.001f * (i % 977) - 0.4f);
  std::vector<uint16_t> want = input;
  {
    const ScopedKernelOverride scalar(KernelImpl::kScalar);
    TableCache cache(8 << 20);
    ASSERT_THAT(apply(TensorView{DType::kBFloat16, {batch, seq, d}, want.data()}, cache), IsOk());
  }
  for (KernelImpl isa : CpuVectorIsas()) {
    const ScopedKernelOverride forced(isa);
    TableCache cache(8 << 20);
    for (int call = 0; call < 2; ++call) {  // a miss, then the cached tables
      std::vector<uint16_t> got = input;
      ASSERT_THAT(apply(TensorView{DType::kBFloat16, {batch, seq, d}, got.data()}, cache), IsOk());
      EXPECT_EQ(got, want) << KernelImplName(isa) << " call " << call;
      const AddRowLayout* layout = AddRowLayoutFor(DType::kBFloat16);
      EXPECT_EQ(cache.entries(), layout != nullptr ? 2u : 1u) << KernelImplName(isa);
      EXPECT_EQ(LastAddRowLayout(), layout) << KernelImplName(isa);
    }
  }
}

TEST(Sinusoidal2D, BFloat16AddIsTheSameOnEveryIsaAndReadsTheAddsLayout) {
  ExpectBf16AddReadsTheAddsLayout([](const TensorView& x, TableCache& cache) {
    return ApplySinusoidal2D({5, 8, false, 10000, 0}, {}, x, {}, cache, {}).status();
  });
}

TEST(Sinusoidal2D, BadParametersNameTheirField) {
  TableCache cache(1 << 20);
  std::vector<float> x(17 * 16);
  auto run = [&](Sinusoidal2DSpec spec, Shape shape, PositionsSpec p = {}, CombineSpec c = {}) {
    return ApplySinusoidal2D(spec, c, TensorView{DType::kFloat32, shape, x.data()}, p, cache, {});
  };
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 16, 14}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of 4")));
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 17, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input.shape[-2] (seq)")));
  EXPECT_THAT(run({4, 4, true, 10000, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs 17 tokens")));
  EXPECT_THAT(run({0, 4, false, 10000, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sinusoidal_2d.grid_height")));
  EXPECT_THAT(run({4, -1, false, 10000, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sinusoidal_2d.grid_width")));
  EXPECT_THAT(run({int64_t{1} << 20, 1, false, 10000, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("sinusoidal_2d.grid_height")));
  EXPECT_THAT(run({4, 4, false, -1, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sinusoidal_2d.base")));
  EXPECT_THAT(run({4, 4, false, NAN, 0}, {1, 16, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sinusoidal_2d.base")));
  const int64_t ids[] = {0, 1};
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 16, 16}, Positions({}, ids, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions")));
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 16, 16}, Positions(ids, {}, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions")));
  PositionsSpec axes;
  axes.axis_ids = ids;
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 16, 16}, axes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions")));
  EXPECT_THAT(run({4, 4, false, 10000, 0}, {1, 16, 16}, {}, CombineSpec{NAN, 1, Fusion::kAdd, {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sinusoidal_2d.input_scale")));
}

// ---- Fourier ------------------------------------------------------------------------

TEST(Fourier, OneAxisFromIntegerPositionsAndFromValues) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0, 1);
  const int64_t f = 12, d = 2 * f, seq = 9, batch = 2;
  std::vector<double> b(f);
  for (auto& v : b) v = normal(rng) * 0.1;  // B ~ N(0, sigma^2), as Tancik et al. sample it
  TableCache cache(16 << 20);
  // Integer positions with offsets per batch row: near ones read a cached table of positions
  // 0..R-1 (twice: computed, then cached), a far one computes its rows alone.
  for (int64_t far : {int64_t{100}, int64_t{100}, int64_t{1000000000}}) {
    const int64_t offsets[] = {0, far};
    std::vector<float> x(batch * seq * d, 0.0f);
    ASSERT_THAT(ApplyFourier({b, 1}, {}, TensorView{DType::kFloat32, {batch, seq, d}, x.data()},
                             Positions(offsets, {}, {}), cache, {}),
                IsOk());
    for (int64_t n = 0; n < batch; ++n) {
      std::vector<double> v(seq);
      for (int64_t t = 0; t < seq; ++t) v[t] = static_cast<double>(offsets[n] + t);
      const std::vector<double> want = FourierRef(b, 1, v);
      // The reference rounds 2 pi v and then the product, posenc b*v then 2 pi times it: the
      // float64 angles differ by a few ulps of the largest angle (2 pi |b| 1e9, ~1e-7).
      double max_b = 0;
      for (double f : b) max_b = std::max(max_b, std::abs(f));
      const double angle = 2 * M_PI * max_b * static_cast<double>(far + seq);
      const double tol = kRoundedOnce + 4 * angle * std::ldexp(1.0, -53);
      for (int64_t i = 0; i < seq * d; ++i) {
        ASSERT_NEAR(x[n * seq * d + i], want[i], tol) << "row " << n << " element " << i;
      }
    }
  }
  // Real-valued timestamps, one per token shared by the batch.
  {
    std::vector<double> v(seq);
    for (auto& t : v) t = std::uniform_real_distribution<double>(-3, 50)(rng);
    std::vector<float> x(batch * seq * d, 0.0f);
    ASSERT_THAT(ApplyFourier({b, 1}, {}, TensorView{DType::kFloat32, {batch, seq, d}, x.data()},
                             Positions({}, {}, v), cache, {}),
                IsOk());
    const std::vector<double> want = FourierRef(b, 1, v);
    for (int64_t i = 0; i < batch * seq * d; ++i) {
      ASSERT_NEAR(x[i], want[i % (seq * d)], kRoundedOnce) << i;
    }
  }
}

TEST(Fourier, MultiAxisPerBatchValuesEveryFusionAndDtype) {
  std::mt19937 rng(9);
  TableCache cache(1 << 20);
  std::normal_distribution<double> normal(0, 1);
  const int64_t m = 3, f = 8, seq = 5, batch = 2;
  std::vector<double> b(f * m);
  for (auto& v : b) v = normal(rng) * 2.0;
  std::vector<double> v(batch * seq * m);
  for (auto& c : v) c = std::uniform_real_distribution<double>(-1, 1)(rng);  // NeRF-style coords
  const std::vector<double> pe = FourierRef(b, m, v);                        // [batch*seq, 2F]
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Fusion fusion : {Fusion::kAdd, Fusion::kMultiply, Fusion::kConcat}) {
      const int64_t d = fusion == Fusion::kConcat ? 6 : 2 * f;
      Input in = RandomInput(dtype, batch * seq * d, rng);
      std::vector<char> bytes = in.bytes;
      const float a = 0.5f, s = 2.0f;
      auto r = ApplyFourier({b, m}, CombineSpec{a, s, fusion, std::nullopt},
                            TensorView{dtype, {batch, seq, d}, bytes.data()}, Positions({}, {}, v),
                            cache, {});
      ASSERT_THAT(r, IsOk());
      if (fusion != Fusion::kConcat) {
        ExpectCombined(in, bytes.data(), batch, seq, d, pe, true, fusion, a, s, "fourier");
        continue;
      }
      EXPECT_EQ(r->shape, (Shape{batch, seq, d + 2 * f}));
      for (int64_t t = 0; t < batch * seq; ++t) {
        for (int64_t c = 0; c < 2 * f; ++c) {
          const double want = pe[t * 2 * f + c] * s;
          const double got = ValueAt(dtype, r->concat->data(), t * (d + 2 * f) + d + c);
          ASSERT_LE(std::abs(got - want), Tolerance(dtype, want, 2 * kRoundedOnce))
              << DTypeName(dtype) << " token " << t << " column " << c;
        }
      }
    }
  }
}

TEST(Fourier, BFloat16AddFromIntegerPositionsReadsTheAddsLayout) {
  std::vector<double> b(100);  // 2F = 200
  for (size_t k = 0; k < b.size(); ++k) b[k] = 0.5 / static_cast<double>(k + 1);
  ExpectBf16AddReadsTheAddsLayout([&](const TensorView& x, TableCache& cache) {
    return ApplyFourier({b, 1}, {}, x, {}, cache, {}).status();
  });
}

TEST(Fourier, BadParametersNameTheirField) {
  TableCache cache(1 << 20);
  std::vector<float> x(4 * 8);
  const std::vector<double> b4 = {1, 2, 3, 4};
  auto run = [&](FourierSpec spec, Shape shape, PositionsSpec p = {}, CombineSpec c = {}) {
    return ApplyFourier(spec, c, TensorView{DType::kFloat32, shape, x.data()}, p, cache, {});
  };
  EXPECT_THAT(run({b4, 1}, {1, 4, 6}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d_model = 2F")));
  EXPECT_THAT(run({b4, 3}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fourier.frequencies has 4")));
  EXPECT_THAT(run({b4, 0}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fourier.num_axes")));
  EXPECT_THAT(run({b4, 65}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("fourier.num_axes")));
  EXPECT_THAT(run({{}, 1}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fourier.frequencies has 0")));
  const std::vector<double> huge((int64_t{1} << 15) + 1, 1.0);
  EXPECT_THAT(run({huge, 1}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("fourier.frequencies")));
  const std::vector<double> bad = {1, NAN, 3, 4};
  EXPECT_THAT(run({bad, 1}, {1, 4, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fourier.frequencies[1]")));
  const std::vector<double> b2 = {1, 2, 3, 4};  // F = 2 of 2 axes
  EXPECT_THAT(run({b2, 2}, {1, 4, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions.values is empty")));
  const std::vector<double> v3 = {0, 1, 2};
  EXPECT_THAT(run({b2, 2}, {1, 4, 4}, Positions({}, {}, v3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions.values has 3")));
  const std::vector<double> vinf = {0, 1, 2, 3, 4, INFINITY, 6, 7};
  EXPECT_THAT(run({b2, 2}, {1, 4, 4}, Positions({}, {}, vinf)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions.values[5]")));
  const int64_t ids[] = {0, 1, 2, 3};
  const std::vector<double> v8(8, 0.5);
  EXPECT_THAT(run({b2, 2}, {1, 4, 4}, Positions({}, ids, v8)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positions.ids")));
  EXPECT_THAT(run({b4, 1}, {1, 4, 8}, {}, CombineSpec{1, 1, Fusion::kConcat, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pe_dim")));
}

// ---- MULTIPLY for sinusoidal and learned, under every ISA ------------------------------

TEST(Multiply, SinusoidalAndLearnedAtEveryDtypeAndIsa) {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  std::mt19937 rng(13);
  const int64_t batch = 3, seq = 7, d = 40;
  // The paper's interleaved sinusoid, float64.
  std::vector<double> pe(seq * d);
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double w = std::pow(10000.0, -2.0 * i / d);
      pe[p * d + 2 * i] = std::sin(p * w);
      pe[p * d + 2 * i + 1] = std::cos(p * w);
    }
  }
  auto table = std::make_shared<Table>();
  table->rows = seq;
  table->cols = d;
  std::vector<double> learned(seq * d);
  for (int64_t i = 0; i < seq * d; ++i) {
    table->data.push_back(std::uniform_real_distribution<float>(-1, 1)(rng));
    learned[i] = table->data.back();
  }
  for (KernelImpl isa : isas) {
    const ScopedKernelOverride forced(isa);
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      TableCache cache(16 << 20);
      const float a = 1.25f, b = -0.5f;
      CombineSpec combine{a, b, Fusion::kMultiply, std::nullopt};
      Input in = RandomInput(dtype, batch * seq * d, rng);
      std::vector<char> bytes = in.bytes;
      ASSERT_THAT(ApplySinusoidal({}, combine, TensorView{dtype, {batch, seq, d}, bytes.data()}, {},
                                  cache, {}),
                  IsOk());
      ExpectCombined(in, bytes.data(), batch, seq, d, pe, false, Fusion::kMultiply, a, b,
                     std::string("sinusoidal ") + KernelImplName(isa));
      bytes = in.bytes;
      ASSERT_THAT(ApplyLearned({"t", table, Overflow::kError}, combine,
                               TensorView{dtype, {batch, seq, d}, bytes.data()}, {}, {}),
                  IsOk());
      // Learned rows are float32 already: no table rounding.
      ExpectCombined(in, bytes.data(), batch, seq, d, learned, false, Fusion::kMultiply, a, b,
                     std::string("learned ") + KernelImplName(isa));
    }
  }
  // pe_dim with MULTIPLY must be d_model, as for ADD.
  std::vector<float> x(seq * d);
  TableCache cache(1 << 20);
  EXPECT_THAT(ApplySinusoidal({}, CombineSpec{1, 1, Fusion::kMultiply, 8},
                              TensorView{DType::kFloat32, {seq, d}, x.data()}, {}, cache, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MULTIPLY")));
}

// ---- tables in relative order --------------------------------------------------------

TEST(TablePositions, TransformerXlTableForEveryKlenWithAndWithoutClamp) {
  const int64_t d = 16, max_klen = 2048;
  // The reference rows of positions 0..max_klen-1; Transformer-XL's row r of klen is the
  // row of position min(klen - 1 - r, clamp_len).
  std::vector<std::vector<double>> ref(max_klen);
  for (int64_t p = 0; p < max_klen; ++p) ref[p] = TransformerXlRow(d, static_cast<double>(p));
  const SinusoidalSpec spec{10000.0, SinusoidalLayout::kConcatenated, Timescale::kPerDim, d};
  for (std::optional<int64_t> clamp_len : {std::optional<int64_t>(), std::optional<int64_t>(100)}) {
    for (int64_t klen = 1; klen <= max_klen; ++klen) {
      const TablePositions positions{klen - 1, -1, clamp_len};
      ASSERT_THAT(ValidateTablePositions(positions, klen, false), IsOk());
      const Table t = ComputeSinusoidalTable(spec, positions, 0, klen);
      for (int64_t r = 0; r < klen; ++r) {
        int64_t pos = klen - 1 - r;
        if (clamp_len) pos = std::min(pos, *clamp_len);
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_NEAR(t.data[r * d + c], ref[pos][c], kRoundedOnce)
              << "klen " << klen << " row " << r << " column " << c;
        }
      }
    }
  }
}

TEST(TablePositions, NegativePositionsAreTheOddAndEvenContinuation) {
  const int64_t d = 10;
  const SinusoidalSpec spec{10000.0, SinusoidalLayout::kConcatenated, Timescale::kPerDim, d};
  // XLNet's bidirectional fwd_pos_seq: arange(klen, -qlen, -1) clamped to +-clamp_len.
  const int64_t klen = 6, qlen = 4, clamp = 3;
  const TablePositions positions{klen, -1, clamp};
  ASSERT_THAT(ValidateTablePositions(positions, klen + qlen, true), IsOk());
  const Table t = ComputeSinusoidalTable(spec, positions, 0, klen + qlen);
  for (int64_t r = 0; r < klen + qlen; ++r) {
    const double pos = std::clamp<int64_t>(klen - r, -clamp, clamp);
    const std::vector<double> want = TransformerXlRow(d, pos);
    for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(t.data[r * d + c], want[c], kRoundedOnce);
  }
}

TEST(TablePositions, BadFieldsAreNamed) {
  EXPECT_THAT(ValidateTablePositions({0, 0, {}}, 4, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position_step")));
  EXPECT_THAT(ValidateTablePositions({0, 1, -1}, 4, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("clamp_position")));
  EXPECT_THAT(ValidateTablePositions({int64_t{1} << 41, 1, {}}, 4, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first_position")));
  EXPECT_THAT(ValidateTablePositions({0, int64_t{1} << 40, {}}, 4, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position_step")));
  // Rope tables refuse negative positions; a clamp does not make them non-negative.
  EXPECT_THAT(ValidateTablePositions({2, -1, {}}, 4, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rope tables")));
  EXPECT_THAT(ValidateTablePositions({-1, 1, 5}, 4, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first_position")));
  EXPECT_THAT(ValidateTablePositions({3, -1, {}}, 4, false), IsOk());
  // A clamp keeps a long table of huge steps in range.
  EXPECT_THAT(ValidateTablePositions({0, int64_t{1} << 40, 7}, int64_t{1} << 40, true), IsOk());
  EXPECT_EQ((TablePositions{0, int64_t{1} << 40, 7}.At((int64_t{1} << 40) - 1)), 7);
}

}  // namespace
}  // namespace posenc
