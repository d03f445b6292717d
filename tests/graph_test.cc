// Tests of server/graph/laplacian: eigenvalues against numpy.linalg.eigvalsh (tests/fixtures/
// graph_spectra.txt), eigen-pairs by L v = lambda v and orthonormality (eigenspaces can be
// degenerate, so vectors are not compared entry by entry), the sign rule, components, limits,
// and the dense and Lanczos paths against each other.
#include "server/graph/laplacian.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/threads.h"
#include "tests/support/fixtures.h"
#include "tests/support/graphs.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

using ::posenc::testing::FixturePath;
using ::posenc::testing::ReadFixtureLines;

// y = L x for the graph, written independently of the library: dense adjacency sets.
std::vector<double> ApplyLaplacian(int64_t n, const std::vector<int64_t>& edges, bool normalized,
                                   const std::vector<double>& x) {
  std::vector<std::vector<int64_t>> nbrs(n);
  for (size_t e = 0; e + 1 < edges.size(); e += 2) {
    const int64_t u = edges[e], v = edges[e + 1];
    if (u == v) continue;
    nbrs[u].push_back(v);
    nbrs[v].push_back(u);
  }
  for (auto& l : nbrs) {
    std::sort(l.begin(), l.end());
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
  std::vector<double> y(n, 0.0);
  for (int64_t u = 0; u < n; ++u) {
    const double du = static_cast<double>(nbrs[u].size());
    if (du == 0) continue;
    y[u] = normalized ? x[u] : du * x[u];
    for (int64_t v : nbrs[u]) {
      const double w = normalized ? 1.0 / std::sqrt(du * static_cast<double>(nbrs[v].size())) : 1.0;
      y[u] -= w * x[v];
    }
  }
  return y;
}

std::vector<double> Column(const GraphEncoding& enc, int c) {
  std::vector<double> v(enc.num_nodes);
  for (int64_t i = 0; i < enc.num_nodes; ++i) v[i] = enc.vectors[i * enc.k + c];
  return v;
}

// Checks every used column: unit norm, orthogonal to the others, L v = lambda v, sign rule;
// unused columns zero. Tolerances are for float32 vectors: `tol` on norms, dot products and
// the residual relative to the spectral scale `scale`.
void CheckEigenPairs(const GraphEncoding& enc, const std::vector<int64_t>& edges, bool normalized,
                     double tol, double scale) {
  const int used = static_cast<int>(enc.eigenvalues.size());
  for (int c = 0; c < used; ++c) {
    const std::vector<double> v = Column(enc, c);
    const std::vector<double> lv = ApplyLaplacian(enc.num_nodes, edges, normalized, v);
    double residual = 0, norm = 0;
    for (int64_t i = 0; i < enc.num_nodes; ++i) {
      residual += std::pow(lv[i] - enc.eigenvalues[c] * v[i], 2);
      norm += v[i] * v[i];
    }
    EXPECT_NEAR(std::sqrt(norm), 1.0, tol) << "column " << c;
    EXPECT_LE(std::sqrt(residual), tol * scale)
        << "column " << c << " lambda " << enc.eigenvalues[c];
    for (int d = 0; d < c; ++d) {
      const std::vector<double> w = Column(enc, d);
      double dot = 0;
      for (int64_t i = 0; i < enc.num_nodes; ++i) dot += v[i] * w[i];
      EXPECT_NEAR(dot, 0.0, tol) << "columns " << d << " and " << c;
    }
    // Sign rule: the entry of largest magnitude (the first within 1e-6 on ties) is positive.
    double largest = 0;
    for (double x : v) largest = std::max(largest, std::fabs(x));
    for (double x : v) {
      if (std::fabs(x) >= largest * (1 - 1e-5)) {
        EXPECT_GT(x, 0) << "column " << c;
        break;
      }
    }
    if (c > 0) {
      EXPECT_LE(enc.eigenvalues[c - 1], enc.eigenvalues[c] + 1e-12);
    }
  }
  for (int c = used; c < enc.k; ++c) {
    for (double x : Column(enc, c)) ASSERT_EQ(x, 0.0) << "column " << c;
  }
}

struct FixtureGraph {
  std::string name;
  int64_t n;
  bool normalized;
  std::vector<int64_t> edges;
  std::vector<double> eigenvalues;
};

// "graph NAME N NORMALIZED", then its "edges ..." and "eigvalsh ..." lines.
std::vector<FixtureGraph> LoadFixtureGraphs() {
  std::vector<FixtureGraph> graphs;
  for (const std::vector<std::string>& words : ReadFixtureLines("graph_spectra.txt")) {
    if (words[0] == "graph" && words.size() >= 4) {
      graphs.push_back({words[1], std::stoll(words[2]), words[3] != "0", {}, {}});
    } else if (words[0] == "edges" && !graphs.empty()) {
      for (size_t i = 1; i < words.size(); ++i) graphs.back().edges.push_back(std::stoll(words[i]));
    } else if (words[0] == "eigvalsh" && !graphs.empty()) {
      for (size_t i = 1; i < words.size(); ++i) {
        graphs.back().eigenvalues.push_back(std::stod(words[i]));
      }
    }
  }
  return graphs;
}

TEST(GraphEncoding, SmallGraphsMatchNumpyEigvalsh) {
  const std::vector<FixtureGraph> graphs = LoadFixtureGraphs();
  ASSERT_GE(graphs.size(), 20u) << FixturePath("graph_spectra.txt");
  for (const FixtureGraph& g : graphs) {
    SCOPED_TRACE(g.name + (g.normalized ? " normalized" : ""));
    for (int k : {1, 3, static_cast<int>(g.n) + 2}) {
      auto enc = ComputeLaplacianEncoding({g.n, g.edges, k, g.normalized}, GraphLimits());
      ASSERT_THAT(enc, IsOk());
      ASSERT_EQ(enc->vectors.size(), static_cast<size_t>(g.n * k));
      const size_t used = std::min<size_t>(k, g.n - 1);
      ASSERT_EQ(enc->eigenvalues.size(), used);
      // numpy's eigvalsh and Eigen agree to rounding: 1e-10 absolute on spectra within [0, 2n].
      for (size_t c = 0; c < used; ++c) {
        EXPECT_NEAR(enc->eigenvalues[c], g.eigenvalues[c + 1], 1e-10) << "eigenvalue " << c + 1;
      }
      CheckEigenPairs(*enc, g.edges, g.normalized, 1e-5, g.normalized ? 2.0 : 2.0 * g.n);
    }
  }
}

TEST(GraphEncoding, ComponentsGiveIndicatorColumnsFirst) {
  // Components {0,3,6} (triangle), {1,4,5,7} (path), {2} (isolated); node 0's is skipped.
  const std::vector<int64_t> edges = {0, 3, 3, 6, 6, 0, 1, 4, 4, 5, 5, 7};
  auto enc = ComputeLaplacianEncoding({8, edges, 3, false}, GraphLimits());
  ASSERT_THAT(enc, IsOk());
  EXPECT_EQ(enc->eigenvalues[0], 0.0);
  EXPECT_EQ(enc->eigenvalues[1], 0.0);
  EXPECT_GT(enc->eigenvalues[2], 0.1);
  const float half = 0.5f;
  const std::vector<double> path = Column(*enc, 0), isolated = Column(*enc, 1);
  for (int64_t v = 0; v < 8; ++v) {
    const bool in_path = v == 1 || v == 4 || v == 5 || v == 7;
    EXPECT_FLOAT_EQ(path[v], in_path ? half : 0.f) << v;
    EXPECT_FLOAT_EQ(isolated[v], v == 2 ? 1.f : 0.f) << v;
  }
  // Normalized: the path's null vector is D^1/2 1 / |.|: degrees 1,2,2,1 -> sqrt(d/6).
  auto norm = ComputeLaplacianEncoding({8, edges, 2, true}, GraphLimits());
  ASSERT_THAT(norm, IsOk());
  const std::vector<double> npath = Column(*norm, 0);
  EXPECT_NEAR(npath[1], std::sqrt(1.0 / 6), 1e-7);
  EXPECT_NEAR(npath[4], std::sqrt(2.0 / 6), 1e-7);
}

TEST(GraphEncoding, SignRuleOnPathFiedlerVector) {
  // The Fiedler vector of a path is cos(pi (i + 1/2) / n) up to sign: its two ends tie in
  // magnitude, and the first one must be the positive one.
  std::vector<int64_t> edges;
  for (int64_t v = 0; v + 1 < 9; ++v) edges.insert(edges.end(), {v, v + 1});
  auto enc = ComputeLaplacianEncoding({9, edges, 2, false}, GraphLimits());
  ASSERT_THAT(enc, IsOk());
  const std::vector<double> fiedler = Column(*enc, 0);
  EXPECT_GT(fiedler[0], 0);
  EXPECT_LT(fiedler[8], 0);
  EXPECT_NEAR(fiedler[0], -fiedler[8], 1e-6);
  EXPECT_NEAR(enc->eigenvalues[0], 2 - 2 * std::cos(M_PI / 9), 1e-12);
}

using testing::GridEdges;
using testing::RandomEdges;

// The same graph through the dense solver, shift-invert Lanczos and shifted-operator Lanczos.
void CheckPathsAgree(const std::string& name, int64_t n, const std::vector<int64_t>& edges, int k,
                     bool normalized, double scale) {
  SCOPED_TRACE(name + (normalized ? " normalized" : ""));
  GraphLimits dense, shift_invert, shifted;
  dense.dense_max_nodes = 1 << 20;
  shift_invert.dense_max_nodes = 0;
  shift_invert.max_factor_fill = 1e9;
  shifted.dense_max_nodes = 0;
  shifted.max_factor_fill = 0;
  auto a = ComputeLaplacianEncoding({n, edges, k, normalized}, dense);
  auto b = ComputeLaplacianEncoding({n, edges, k, normalized}, shift_invert);
  auto c = ComputeLaplacianEncoding({n, edges, k, normalized}, shifted);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  ASSERT_EQ(a->eigenvalues.size(), static_cast<size_t>(k));
  ASSERT_EQ(b->eigenvalues.size(), static_cast<size_t>(k));
  ASSERT_EQ(c->eigenvalues.size(), static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    // Lanczos converges to 1e-10 relative on its operator; eigenvalues agree far tighter than
    // the 1e-8 * scale allowed here.
    EXPECT_NEAR(b->eigenvalues[i], a->eigenvalues[i], 1e-8 * scale) << i;
    EXPECT_NEAR(c->eigenvalues[i], a->eigenvalues[i], 1e-8 * scale) << i;
  }
  CheckEigenPairs(*a, edges, normalized, 1e-5, scale);
  CheckEigenPairs(*b, edges, normalized, 1e-5, scale);
  CheckEigenPairs(*c, edges, normalized, 1e-5, scale);
}

TEST(GraphEncoding, DenseAndLanczosAgreeOnMediumGraphs) {
  CheckPathsAgree("random 600", 600, RandomEdges(600, 3, 1), 8, false, 20);
  CheckPathsAgree("random 600", 600, RandomEdges(600, 3, 1), 8, true, 2);
  // A square grid has eigenvalues of multiplicity 2.
  CheckPathsAgree("grid 25x25", 625, GridEdges(25, 25), 10, false, 8);
  CheckPathsAgree("grid 20x31", 620, GridEdges(20, 31), 10, true, 2);
  // Two large components and a small one.
  std::vector<int64_t> two = GridEdges(15, 20);
  for (int64_t v = 300; v + 1 < 700; ++v) two.insert(two.end(), {v, v + 1});
  two.insert(two.end(), {700, 701, 701, 702});
  CheckPathsAgree("grid + path + triangle", 703, two, 12, false, 8);
}

// Large enough for the kernel threads (a product over 256 KiB of work): the sparse products
// of the Chebyshev filter split their rows across two threads and give the one-thread answer
// bit for bit, and eigen pairs of L.
TEST(GraphEncoding, KernelThreadsGiveTheOneThreadAnswer) {
  const int64_t n = 6000;
  const std::vector<int64_t> edges = RandomEdges(n, 5, 7);
  GraphLimits limits;
  limits.max_factor_fill = 0;  // no sparse factor: the filtered products
  SetKernelThreads(1);
  auto one = ComputeLaplacianEncoding({n, edges, 6, false}, limits);
  SetKernelThreads(2);
  auto two = ComputeLaplacianEncoding({n, edges, 6, false}, limits);
  SetKernelThreads(0);
  ASSERT_THAT(one, IsOk());
  ASSERT_THAT(two, IsOk());
  EXPECT_EQ(one->vectors, two->vectors);
  EXPECT_EQ(one->eigenvalues, two->eigenvalues);
  CheckEigenPairs(*two, edges, false, 1e-5, 20);
}

TEST(GraphEncoding, RingAndStarClosedForms) {
  // Ring of n: eigenvalues 2 - 2 cos(2 pi j / n), each of multiplicity 2 for 0 < j < n/2.
  const int64_t n = 3000;  // past the dense limit: the Lanczos path
  std::vector<int64_t> ring;
  for (int64_t v = 0; v < n; ++v) ring.insert(ring.end(), {v, (v + 1) % n});
  auto enc = ComputeLaplacianEncoding({n, ring, 6, false}, GraphLimits());
  ASSERT_THAT(enc, IsOk());
  for (int c = 0; c < 6; ++c) {
    EXPECT_NEAR(enc->eigenvalues[c], 2 - 2 * std::cos(2 * M_PI * (c / 2 + 1) / n), 1e-12) << c;
  }
  CheckEigenPairs(*enc, ring, false, 1e-5, 4);
  // Star with 9 leaves: 0, 1 (multiplicity 8), 10.
  std::vector<int64_t> star;
  for (int64_t v = 1; v < 10; ++v) star.insert(star.end(), {0, v});
  auto s = ComputeLaplacianEncoding({10, star, 9, false}, GraphLimits());
  ASSERT_THAT(s, IsOk());
  for (int c = 0; c < 8; ++c) EXPECT_NEAR(s->eigenvalues[c], 1.0, 1e-12);
  EXPECT_NEAR(s->eigenvalues[8], 10.0, 1e-12);
  CheckEigenPairs(*s, star, false, 1e-5, 10);
}

void ExpectError(const absl::StatusOr<GraphEncoding>& r, absl::StatusCode code,
                 const std::string& text) {
  EXPECT_THAT(r, StatusIs(code, HasSubstr(text)));
}

TEST(GraphEncoding, Limits) {
  const GraphLimits limits;
  const std::vector<int64_t> edges = {0, 1, 1, 2, 2, 3, 3, 12};
  ExpectError(ComputeLaplacianEncoding({10, edges, 2, false}, limits),
              absl::StatusCode::kInvalidArgument, "edges[7] is 12; node ids must be in [0, 10)");
  const std::vector<int64_t> negative = {0, -1};
  ExpectError(ComputeLaplacianEncoding({10, negative, 2, false}, limits),
              absl::StatusCode::kInvalidArgument, "edges[1] is -1");
  const std::vector<int64_t> odd = {0, 1, 2};
  ExpectError(ComputeLaplacianEncoding({10, odd, 2, false}, limits),
              absl::StatusCode::kInvalidArgument, "edges has 3 entries");
  ExpectError(ComputeLaplacianEncoding({0, {}, 2, false}, limits),
              absl::StatusCode::kInvalidArgument, "num_nodes is 0");
  ExpectError(ComputeLaplacianEncoding({-5, {}, 2, false}, limits),
              absl::StatusCode::kInvalidArgument, "num_nodes is -5");
  ExpectError(ComputeLaplacianEncoding({10, {}, 0, false}, limits),
              absl::StatusCode::kInvalidArgument, "k is 0");

  GraphLimits small;
  small.max_nodes = 100;
  small.max_edges = 3;
  small.max_k = 4;
  small.max_output_elements = 200;
  ExpectError(ComputeLaplacianEncoding({101, {}, 1, false}, small),
              absl::StatusCode::kResourceExhausted, "num_nodes is 101");
  ExpectError(ComputeLaplacianEncoding({10, edges, 1, false}, small),
              absl::StatusCode::kResourceExhausted, "edges has 4 pairs");
  ExpectError(ComputeLaplacianEncoding({10, {}, 5, false}, small),
              absl::StatusCode::kResourceExhausted, "k is 5");
  ExpectError(ComputeLaplacianEncoding({100, {}, 3, false}, small),
              absl::StatusCode::kResourceExhausted, "num_nodes * k");
  GraphLimits tiny_solver;
  tiny_solver.dense_max_nodes = 10;
  tiny_solver.max_solver_bytes = 1000;
  ExpectError(ComputeLaplacianEncoding({100, GridEdges(10, 10), 3, false}, tiny_solver),
              absl::StatusCode::kResourceExhausted, "Lanczos basis");
}

TEST(GraphEncoding, ManyComponentsAndFewNodes) {
  // 50 isolated nodes, k 4: columns are e_1 .. e_4 (node 0's is skipped).
  auto enc = ComputeLaplacianEncoding({50, {}, 4, true}, GraphLimits());
  ASSERT_THAT(enc, IsOk());
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(enc->eigenvalues[c], 0.0);
    const std::vector<double> v = Column(*enc, c);
    for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(v[i], i == c + 1 ? 1.0 : 0.0);
  }
  // One node: no eigenvalue left; k columns of zeros.
  auto one = ComputeLaplacianEncoding({1, {}, 3, false}, GraphLimits());
  ASSERT_THAT(one, IsOk());
  EXPECT_TRUE(one->eigenvalues.empty());
  EXPECT_EQ(one->vectors, std::vector<float>(3, 0.f));
}

}  // namespace
}  // namespace posenc
