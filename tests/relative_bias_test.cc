// Tests of the relative-position biases in server/kernels/bias_kernel: DeBERTa-v2 buckets
// bit for bit against torch running HF's own make_log_bucket_position (tests/fixtures/
// gen_relative_reference.py), and Shaw et al.'s indices, embeddings and query term against
// float64 versions of tensor2tensor's formula written here, at every dtype and on both ISAs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/bias_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/tensor/dtype.h"
#include "tests/support/fixtures.h"
#include "tests/support/random_values.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::FixturePath;
using ::posenc::testing::IsOk;
using ::posenc::testing::RandomFloats;
using ::posenc::testing::ReadFixtureLines;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

// --- DeBERTa. -----------------------------------------------------------------------------

TEST(DebertaBuckets, MatchTorchRunningHfCode) {
  const auto lines = ReadFixtureLines("deberta_buckets.txt");
  ASSERT_FALSE(lines.empty()) << "missing fixture " << FixturePath("deberta_buckets.txt");
  struct Run {
    int64_t first;
    int64_t bucket;
    int64_t step;
  };
  DebertaSpec spec;
  int64_t lo = 0, hi = -1;
  std::vector<Run> runs;
  int configs = 0, unbucketed = 0;
  int64_t checked = 0;
  auto check = [&]() {
    if (runs.empty()) return;
    ASSERT_EQ(runs.front().first, lo);
    // One query at position hi against keys 0 .. hi - lo: rel = query - key covers [lo, hi].
    const BiasGeometry geom{1, hi - lo + 1, hi};
    ASSERT_THAT(ValidateDebertaSpec(spec, geom), IsOk());
    std::vector<int32_t> out(static_cast<size_t>(geom.key_length));
    ASSERT_THAT(BuildDebertaPositions(spec, geom, out.data()), IsOk());
    for (size_t r = 0; r < runs.size(); ++r) {
      const int64_t end = r + 1 < runs.size() ? runs[r + 1].first : hi + 1;
      for (int64_t rel = runs[r].first; rel < end; ++rel) {
        const int64_t want = runs[r].bucket + runs[r].step * (rel - runs[r].first);
        ASSERT_EQ(out[static_cast<size_t>(hi - rel)], want)
            << "rel " << rel << " buckets " << spec.position_buckets << " max "
            << spec.max_relative_positions;
        if (spec.Bucketed()) {
          ASSERT_EQ(DebertaLogBucket(rel, spec.position_buckets, spec.max_relative_positions),
                    want);
        }
        ++checked;
      }
    }
    runs.clear();
  };
  for (const std::vector<std::string>& w : lines) {
    if (w[0] == "config") {
      ASSERT_EQ(w.size(), 5u) << absl::StrJoin(w, " ");
      check();
      spec.position_buckets = std::stoi(w[1]);
      spec.max_relative_positions = std::stoi(w[2]);
      lo = std::stoll(w[3]);
      hi = std::stoll(w[4]);
      ++configs;
      if (!spec.Bucketed()) ++unbucketed;
    } else {
      ASSERT_EQ(w[0], "run");
      runs.push_back({std::stoll(w[1]), std::stoll(w[2]), std::stoll(w[3])});
    }
  }
  check();
  EXPECT_EQ(configs, 10);
  EXPECT_EQ(unbucketed, 3);
  EXPECT_EQ(checked, int64_t{10} * 8193);
}

// The build against the per-element formula (DebertaLogBucket of query_pos - key_pos, the
// scalar definition) id for id, over bucket settings with rising and falling log ranges,
// query blocks with and without offsets (some far past the row), and sizes past the
// threading threshold (256 KiB) and the streaming one (32 MiB).
TEST(DebertaBuckets, BuildMatchesPerElementBucketsBitForBit) {
  struct Spec {
    int32_t buckets, max_position;
  };
  const Spec specs[] = {{256, 512}, {2, 8},     {3, 3},     {4, 5},       {64, 10},
                        {256, 100}, {32, 4096}, {512, 513}, {1000, 20000}};
  // The last two: offsets far past the row, whose work is the row's, not the offset's.
  const BiasGeometry geoms[] = {{1, 1, 0},
                                {7, 13, 6},
                                {13, 7, 0},
                                {1, 3000, 2999},
                                {300, 300, 0},
                                {257, 611, 354},
                                {64, 64, 5000},
                                {3000, 3000, 0},
                                {444, 5, int64_t{1} << 31},
                                {5, 444, (int64_t{1} << 40) - 5}};
  int compared = 0;
  for (const Spec& sp : specs) {
    const DebertaSpec spec{sp.buckets, sp.max_position};
    for (const BiasGeometry& geom : geoms) {
      const auto q = geom.query_length, k = geom.key_length;
      if (q * k > 1000000 && sp.buckets != 256) continue;  // the largest with HF's defaults
      std::vector<int32_t> out(static_cast<size_t>(q * k), -7);
      ASSERT_THAT(BuildDebertaPositions(spec, geom, out.data()), IsOk());
      for (int64_t i = 0; i < q; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          const std::optional<int32_t> want =
              DebertaLogBucket(geom.query_offset + i - j, sp.buckets, sp.max_position);
          ASSERT_TRUE(want.has_value());
          ASSERT_EQ(out[static_cast<size_t>(i * k + j)], *want)
              << "buckets " << sp.buckets << " max " << sp.max_position << " q " << q << " k " << k
              << " offset " << geom.query_offset << " at " << i << "," << j;
        }
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 9 * 10 - 7);  // all but seven of the largest
}

// Bucketed rows are kept per (spec, first offset, length): repeat calls, calls that share a
// row through different geometries, more pairs than the cache holds, and a spec without
// finite buckets all give what each element's bucket says, pass after pass.
TEST(DebertaBuckets, KeptRowsGiveEveryCallItsOwnBuckets) {
  struct Call {
    DebertaSpec spec;
    BiasGeometry geom;
  };
  std::vector<Call> calls;
  for (int32_t buckets : {256, 64, 8}) {
    // {3, 5, 2} and {5, 3, 0} share their row (first offset 4, 7 entries).
    for (const BiasGeometry& geom : {BiasGeometry{3, 5, 2}, BiasGeometry{5, 3, 0},
                                     BiasGeometry{40, 300, 7}, BiasGeometry{300, 40, 1000}}) {
      calls.push_back({{buckets, 4 * buckets}, geom});
    }
  }
  ASSERT_GT(calls.size(), 8u);  // more than the cache keeps
  for (int pass = 0; pass < 3; ++pass) {
    for (const Call& c : calls) {
      const int64_t q = c.geom.query_length, k = c.geom.key_length;
      std::vector<int32_t> out(static_cast<size_t>(q * k), -7);
      ASSERT_THAT(BuildDebertaPositions(c.spec, c.geom, out.data()), IsOk());
      for (int64_t i = 0; i < q; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          ASSERT_EQ(out[static_cast<size_t>(i * k + j)],
                    *DebertaLogBucket(c.geom.query_offset + i - j, c.spec.position_buckets,
                                      c.spec.max_relative_positions))
              << "pass " << pass << " buckets " << c.spec.position_buckets << " q " << q << " k "
              << k << " at " << i << "," << j;
        }
      }
    }
    const BiasGeometry far{1, 1000, 999};
    std::vector<int32_t> wide(1000);
    EXPECT_THAT(BuildDebertaPositions({256, 129}, far, wide.data()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("deberta.max_relative_positions")));
  }
}

TEST(DebertaBuckets, DefaultsAreHfs) {
  const DebertaSpec spec;
  EXPECT_EQ(spec.position_buckets, 256);
  EXPECT_EQ(spec.max_relative_positions, 512);
}

TEST(DebertaBuckets, GeometryAndOffset) {
  // Query i at offset + i, key j at j: rel = offset + i - j, unbucketed.
  const DebertaSpec raw{-1, -1};
  const BiasGeometry geom{3, 5, 2};
  std::vector<int32_t> out(15);
  ASSERT_THAT(BuildDebertaPositions(raw, geom, out.data()), IsOk());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) EXPECT_EQ(out[i * 5 + j], 2 + i - j) << i << "," << j;
  }
}

TEST(DebertaBuckets, BadFields) {
  const BiasGeometry geom{4, 4, 0};
  std::vector<int32_t> out(16);
  EXPECT_THAT(BuildDebertaPositions({1, 512}, geom, out.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deberta.position_buckets")));
  // max_relative_positions - 1 == mid: HF's log range is 0 and the buckets infinite.
  const BiasGeometry far{1, 1000, 999};
  std::vector<int32_t> wide(1000);
  EXPECT_THAT(BuildDebertaPositions({256, 129}, far, wide.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("deberta.max_relative_positions")));
  // Unbucketed distances past INT32.
  const BiasGeometry huge{1, 1, int64_t{1} << 33};
  EXPECT_THAT(ValidateDebertaSpec({0, 0}, huge),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("INT32")));
  EXPECT_THAT(ValidateDebertaSpec({256, 512}, huge), IsOk());
}

// --- Shaw: the formula, float64, written from tensor2tensor. -------------------------------

int64_t ShawIndex(int64_t k_clip, int64_t query_pos, int64_t key_pos) {
  const int64_t d = key_pos - query_pos;  // _generate_relative_positions_matrix: range_vec
  const int64_t clipped = d < -k_clip ? -k_clip : (d > k_clip ? k_clip : d);
  return clipped + k_clip;
}

TEST(ShawIndex, MatchesClippedDistances) {
  for (int32_t k_clip : {1, 2, 5, 64}) {
    for (const BiasGeometry& geom : {BiasGeometry{7, 7, 0}, BiasGeometry{1, 9, 8},
                                     BiasGeometry{5, 12, 3}, BiasGeometry{4, 3, 100}}) {
      std::vector<int32_t> out(static_cast<size_t>(geom.query_length * geom.key_length));
      ASSERT_THAT(BuildShawIndex({k_clip}, geom, out.data()), IsOk());
      for (int64_t i = 0; i < geom.query_length; ++i) {
        for (int64_t j = 0; j < geom.key_length; ++j) {
          ASSERT_EQ(out[i * geom.key_length + j], ShawIndex(k_clip, geom.query_offset + i, j))
              << "k " << k_clip << " i " << i << " j " << j;
        }
      }
    }
  }
}

TEST(ShawEmbeddings, GatherTableRows) {
  const int32_t k_clip = 3;
  const int64_t d = 5;
  const std::vector<float> table = RandomFloats(static_cast<size_t>((2 * k_clip + 1) * d), 7);
  const BiasGeometry geom{4, 9, 2};
  std::vector<float> out(static_cast<size_t>(4 * 9 * d));
  ASSERT_THAT(BuildShawEmbeddings({k_clip}, geom, table.data(), d, out.data()), IsOk());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 9; ++j) {
      const int64_t r = ShawIndex(k_clip, 2 + i, j);
      for (int64_t f = 0; f < d; ++f) {
        ASSERT_EQ(out[(i * 9 + j) * d + f], table[r * d + f]) << i << "," << j << "," << f;
      }
    }
  }
}

// The query term in float64: sum_d query[b,h,i,d] * table[index(i,j), d] (+ scores).
std::vector<double> ShawTermReference(const std::vector<float>& query,
                                      const std::vector<float>& table, int64_t rows, int64_t q,
                                      int64_t k, int64_t d, int32_t k_clip, int64_t offset) {
  std::vector<double> out(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % q;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t t = ShawIndex(k_clip, offset + i, j);
      double acc = 0;
      for (int64_t f = 0; f < d; ++f) {
        acc += static_cast<double>(query[r * d + f]) * static_cast<double>(table[t * d + f]);
      }
      out[r * k + j] = acc;
    }
  }
  return out;
}

double Magnitude(const std::vector<float>& query, const std::vector<float>& table, int64_t r,
                 int64_t t, int64_t d) {
  double m = 0;
  for (int64_t f = 0; f < d; ++f) m += std::fabs(double{query[r * d + f]} * table[t * d + f]);
  return m;
}

double UlpOf(DType t) {
  switch (t) {
    case DType::kFloat16: return std::ldexp(1.0, -11);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

struct ShawCase {
  int64_t batch, heads, q, k, d;
  int32_t k_clip;
  int64_t offset;
};

TEST(ShawQueryTerm, MatchesFloat64ReferenceAtEveryDtypeAndIsa) {
  const ShawCase cases[] = {
      {2, 3, 5, 7, 16, 2, 2},    // the common geometry, clipping on both sides
      {1, 2, 1, 33, 13, 4, 32},  // one decode query, odd d (AVX2 tail)
      {1, 1, 9, 9, 3, 16, 0},    // k wider than the keys: no clipping
      {2, 2, 6, 40, 64, 8, 10},  // d a multiple of 8, wide keys
      {1, 1, 3, 5, 1, 1, 100},   // d 1, every key clipped to the left
      // Past the threading threshold (256 KiB of work), reach 33 (not whole vectors), d odd.
      {1, 4, 64, 300, 37, 16, 5},
      {1, 2, 20, 100, 24, 40, 30},  // reach 81: more than one pass of 64 dot products
  };
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  for (const ShawCase& c : cases) {
    const int64_t rows = c.batch * c.heads * c.q;
    const std::vector<float> table =
        RandomFloats(static_cast<size_t>((2 * c.k_clip + 1) * c.d), 11);
    const std::vector<float> query_f = RandomFloats(static_cast<size_t>(rows * c.d), 13);
    const std::vector<float> scores_f = RandomFloats(static_cast<size_t>(rows * c.k), 17, -4, 4);
    for (DType qt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      // The query as the kernel sees it (rounded to its dtype), then the reference on that.
      std::vector<uint8_t> query_bytes(query_f.size() * DTypeSize(qt));
      FromFloat32(query_f.data(), qt, query_bytes.data(), query_f.size());
      std::vector<float> query(query_f.size());
      ToFloat32(qt, query_bytes.data(), query.data(), query.size());
      const std::vector<double> want =
          ShawTermReference(query, table, rows, c.q, c.k, c.d, c.k_clip, c.offset);
      const ConstTensorView qv(qt, {c.batch, c.heads, c.q, c.d}, query_bytes.data());
      for (const std::optional<DType> st :
           {std::optional<DType>(), std::optional<DType>(DType::kFloat32),
            std::optional<DType>(DType::kFloat16), std::optional<DType>(DType::kBFloat16)}) {
        const DType out_t = st.value_or(qt);
        std::vector<uint8_t> out(static_cast<size_t>(rows * c.k) * DTypeSize(out_t));
        std::vector<float> scores(scores_f.size(), 0.0f);
        if (st) {
          FromFloat32(scores_f.data(), out_t, out.data(), scores_f.size());
          ToFloat32(out_t, out.data(), scores.data(), scores.size());
        }
        for (KernelImpl isa : isas) {
          for (bool named : {false, true}) {  // forced by the override, then named
            ScopedKernelOverride force(named ? KernelImpl::kAuto : isa);
            std::vector<uint8_t> got_bytes = out;
            const TensorView ov{out_t, {c.batch, c.heads, c.q, c.k}, got_bytes.data()};
            ASSERT_THAT(ShawQueryTerm({c.k_clip}, {c.q, c.k, c.offset}, table.data(), c.d, qv, ov,
                                      st.has_value(), named ? isa : KernelImpl::kAuto),
                        IsOk());
            std::vector<float> got(static_cast<size_t>(rows * c.k));
            ToFloat32(out_t, got_bytes.data(), got.data(), got.size());
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t j = 0; j < c.k; ++j) {
                const int64_t t = ShawIndex(c.k_clip, c.offset + r % c.q, j);
                const double exact = want[r * c.k + j] + scores[r * c.k + j];
                // float32 FMA accumulation over d (d ulps of the magnitude), the score add,
                // then one rounding to the output dtype.
                const double tol =
                    2.0 * c.d * std::ldexp(1.0, -24) * (Magnitude(query, table, r, t, c.d) + 1) +
                    (UlpOf(out_t) + std::ldexp(1.0, -23)) * std::fabs(exact);
                ASSERT_NEAR(got[r * c.k + j], exact, tol)
                    << "query " << DTypeName(qt) << " out " << DTypeName(out_t) << " isa "
                    << KernelImplName(isa) << (named ? " named" : " forced") << " row " << r
                    << " key " << j;
              }
            }
          }
        }
      }
    }
  }
}

// Through the transposed table each dot product sums over d in order with FMA, as the
// scalar rows do: every vector ISA gives the scalar term bit for bit, stored or added to
// scores (the clipped spans added as constants, the middle from the dot products).
TEST(ShawQueryTerm, VectorIsasMatchScalarBitForBit) {
  const int64_t heads = 3, q = 70, k = 90, d = 29;
  const int32_t k_clip = 40;
  const std::vector<float> table = RandomFloats(static_cast<size_t>((2 * k_clip + 1) * d), 5);
  const std::vector<float> query = RandomFloats(static_cast<size_t>(heads * q * d), 7);
  const std::vector<float> scores = RandomFloats(static_cast<size_t>(heads * q * k), 9, -4, 4);
  const ConstTensorView qv(DType::kFloat32, {1, heads, q, d}, query.data());
  for (DType out_t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool add : {false, true}) {
      auto term = [&](KernelImpl isa) {
        std::vector<uint8_t> out(scores.size() * DTypeSize(out_t));
        FromFloat32(scores.data(), out_t, out.data(), scores.size());
        const TensorView ov{out_t, {1, heads, q, k}, out.data()};
        EXPECT_THAT(ShawQueryTerm({k_clip}, {q, k, 3}, table.data(), d, qv, ov, add, isa), IsOk());
        return out;
      };
      const std::vector<uint8_t> scalar = term(KernelImpl::kScalar);
      for (KernelImpl isa : CpuVectorIsas()) {
        const std::vector<uint8_t> got = term(isa);
        ASSERT_EQ(got, scalar) << KernelImplName(isa) << " out " << DTypeName(out_t)
                               << (add ? " added" : " stored");
      }
    }
  }
}

TEST(ShawQueryTerm, BadArguments) {
  const std::vector<float> table(5 * 4, 0.5f);
  const std::vector<float> query(2 * 3 * 4, 1.0f);
  std::vector<float> out(2 * 6);
  const BiasGeometry geom{3, 6, 0};
  const ConstTensorView good(DType::kFloat32, {1, 2, 3, 4}, query.data());
  const TensorView ov{DType::kFloat32, {1, 2, 3, 6}, out.data()};
  EXPECT_THAT(ShawQueryTerm({0}, geom, table.data(), 4, good, ov, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shaw.max_relative_position")));
  const ConstTensorView wrong_d(DType::kFloat32, {1, 2, 3, 3}, query.data());
  EXPECT_THAT(ShawQueryTerm({2}, geom, table.data(), 4, wrong_d, ov, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query is [1,2,3,3]")));
  const ConstTensorView ints(DType::kInt32, {1, 2, 3, 4}, query.data());
  EXPECT_THAT(ShawQueryTerm({2}, geom, table.data(), 4, ints, ov, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query is")));
  const TensorView wrong_heads{DType::kFloat32, {2, 1, 3, 6}, out.data()};
  EXPECT_THAT(ShawQueryTerm({2}, geom, table.data(), 4, good, wrong_heads, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scores.shape[1]")));
  EXPECT_THAT(ValidateShawTableShape({2}, std::vector<int64_t>{4, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shaw.table.shape[0]")));
  EXPECT_THAT(ValidateShawTableShape({2}, std::vector<int64_t>{5, 4}), IsOk());
  EXPECT_THAT(ValidateShawSpec({kMaxShawRelativePosition + 0}), IsOk());
  EXPECT_THAT(ValidateShawSpec({-3}), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("shaw.max_relative_position is -3")));
}

}  // namespace
}  // namespace posenc
