// Tests of the graph encodings beyond Laplacian eigenvectors (server/graph): random-walk
// landing probabilities against dense float64 matrix powers, hop distances against
// Floyd-Warshall on the dense adjacency, tree encodings on hand-drawn trees; each written
// here from the formula, sharing no code with server/graph.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/graph/random_walk.h"
#include "server/graph/shortest_path.h"
#include "server/graph/tree_positions.h"
#include "server/kernels/threads.h"
#include "tests/support/graphs.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::RandomEdges;
using ::posenc::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Dense symmetric 0/1 adjacency: self-loops dropped, repeats once.
std::vector<double> DenseAdjacency(int64_t n, const std::vector<int64_t>& edges) {
  std::vector<double> a(static_cast<size_t>(n * n), 0.0);
  for (size_t e = 0; e + 1 < edges.size(); e += 2) {
    if (edges[e] == edges[e + 1]) continue;
    a[edges[e] * n + edges[e + 1]] = 1.0;
    a[edges[e + 1] * n + edges[e]] = 1.0;
  }
  return a;
}

// diag(P^s), s = 1..steps, P = D^-1 A (rows of isolated nodes zero), by dense products.
std::vector<double> DenseRandomWalk(int64_t n, const std::vector<int64_t>& edges, int steps) {
  std::vector<double> p = DenseAdjacency(n, edges);
  for (int64_t i = 0; i < n; ++i) {
    double deg = 0;
    for (int64_t j = 0; j < n; ++j) deg += p[i * n + j];
    for (int64_t j = 0; j < n; ++j) p[i * n + j] = deg > 0 ? p[i * n + j] / deg : 0.0;
  }
  std::vector<double> power = p, next(p.size()), out(static_cast<size_t>(n * steps));
  for (int s = 1; s <= steps; ++s) {
    for (int64_t i = 0; i < n; ++i) out[i * steps + (s - 1)] = power[i * n + i];
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t m = 0; m < n; ++m) acc += power[i * n + m] * p[m * n + j];
        next[i * n + j] = acc;
      }
    }
    std::swap(power, next);
  }
  return out;
}

TEST(RandomWalk, MatchesDenseMatrixPowersWithIsolatedNodes) {
  struct Case {
    int64_t n;
    int per_node;
    int steps;
    uint32_t seed;
  };
  for (const Case& c : {Case{12, 1, 1, 1}, Case{30, 1, 8, 2}, Case{40, 2, 16, 3}, Case{25, 3, 7, 4},
                        Case{60, 1, 20, 5}}) {
    // Edges among the first 80% of the nodes only: the rest are isolated.
    const int64_t connected = c.n * 4 / 5;
    std::vector<int64_t> edges = RandomEdges(connected, c.per_node, c.seed);
    edges.push_back(0);  // a self-loop, ignored
    edges.push_back(0);
    const std::vector<double> want = DenseRandomWalk(c.n, edges, c.steps);
    auto got = ComputeRandomWalkEncoding({c.n, edges, c.steps}, GraphLimits());
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // Probabilities in [0, 1], float64 in both, rounded once to float32.
      ASSERT_NEAR((*got)[i], want[i], 1e-7)
          << "n " << c.n << " node " << i / c.steps << " step " << i % c.steps + 1;
    }
    for (int64_t v = connected; v < c.n; ++v) {
      for (int s = 0; s < c.steps; ++s) EXPECT_EQ((*got)[v * c.steps + s], 0.0f);
    }
  }
}

TEST(RandomWalk, KnownValuesOnATriangleAndAPath) {
  // Triangle: P^1 diag 0, P^2 diag 1/2, P^3 diag 1/4.
  const std::vector<int64_t> triangle = {0, 1, 1, 2, 2, 0};
  auto t = ComputeRandomWalkEncoding({3, triangle, 3}, GraphLimits());
  ASSERT_THAT(t, IsOk());
  EXPECT_THAT(*t, ElementsAreArray({0.0f, 0.5f, 0.25f, 0.0f, 0.5f, 0.25f, 0.0f, 0.5f, 0.25f}));
  // Path 0 - 1 - 2 (bipartite: odd steps never return): P^2 diag (1/2, 1, 1/2), P^4 the same.
  const std::vector<int64_t> path = {0, 1, 1, 2};
  auto p = ComputeRandomWalkEncoding({3, path, 4}, GraphLimits());
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(*p, ElementsAreArray(
                      {0.0f, 0.5f, 0.0f, 0.5f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.5f, 0.0f, 0.5f}));
}

TEST(RandomWalk, BadInputAndLimits) {
  const std::vector<int64_t> edges = {0, 1};
  EXPECT_THAT(ComputeRandomWalkEncoding({2, edges, 0}, GraphLimits()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("walk_length is 0")));
  EXPECT_THAT(ComputeRandomWalkEncoding({2, edges, 5000}, GraphLimits()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("walk_length is 5000")));
  const std::vector<int64_t> outside = {0, 7};
  EXPECT_THAT(ComputeRandomWalkEncoding({2, outside, 2}, GraphLimits()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("edges[1] is 7")));
  GraphLimits small;
  small.max_work = 1000;
  const std::vector<int64_t> dense = RandomEdges(200, 5, 9);
  EXPECT_THAT(ComputeRandomWalkEncoding({200, dense, 16}, small),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("multiply-adds")));
  bool asked = false;
  EXPECT_THAT(ComputeRandomWalkEncoding({200, dense, 4}, GraphLimits(),
                                        [&] { return asked = true; }),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_TRUE(asked);
}

// Large enough for the kernel threads (the lease's 256 KiB of work): roots split across two
// threads give the one-thread answer bit for bit, and the dense reference's within 1e-7.
TEST(RandomWalk, KernelThreadsGiveTheOneThreadAnswer) {
  const int64_t n = 256;
  const int steps = 32;
  const std::vector<int64_t> edges = RandomEdges(n, 4, 11);
  SetKernelThreads(1);
  auto one = ComputeRandomWalkEncoding({n, edges, steps}, GraphLimits());
  SetKernelThreads(2);
  auto two = ComputeRandomWalkEncoding({n, edges, steps}, GraphLimits());
  SetKernelThreads(0);
  ASSERT_THAT(one, IsOk());
  ASSERT_THAT(two, IsOk());
  EXPECT_EQ(*one, *two);
  const std::vector<double> want = DenseRandomWalk(n, edges, steps);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR((*two)[i], want[i], 1e-7) << "node " << i / steps << " step " << i % steps + 1;
  }
}

// The work limit and cancellation hold however the roots are split: the total over all
// threads is what passes max_work, and every thread stops when the caller goes.
TEST(RandomWalk, LimitsHoldOnKernelThreads) {
  const int64_t n = 256;
  const std::vector<int64_t> edges = RandomEdges(n, 4, 12);
  SetKernelThreads(2);
  GraphLimits small;
  small.max_work = 100000;
  EXPECT_THAT(ComputeRandomWalkEncoding({n, edges, 32}, small),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("multiply-adds")));
  std::atomic<int> asked{0};
  EXPECT_THAT(ComputeRandomWalkEncoding({n, edges, 32}, GraphLimits(), [&] { return ++asked > 2; }),
              StatusIs(absl::StatusCode::kCancelled));
  SetKernelThreads(0);
}

// --- Shortest paths. ----------------------------------------------------------------------

constexpr int64_t kInf = 1 << 30;

// Hop distances between all pairs of the dense adjacency (kInf where unreachable).
std::vector<int64_t> FloydWarshall(int64_t n, const std::vector<int64_t>& edges) {
  const std::vector<double> a = DenseAdjacency(n, edges);
  std::vector<int64_t> dist(static_cast<size_t>(n * n), kInf);
  for (int64_t i = 0; i < n; ++i) {
    dist[i * n + i] = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (a[i * n + j] > 0) dist[i * n + j] = 1;
    }
  }
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        dist[i * n + j] = std::min(dist[i * n + j], dist[i * n + m] + dist[m * n + j]);
      }
    }
  }
  return dist;
}

TEST(ShortestPath, MatchesFloydWarshall) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const int64_t n = 50;
    // Sparse enough to leave several components and isolated nodes.
    std::vector<int64_t> edges = RandomEdges(40, 1, seed);
    const std::vector<int64_t> dist = FloydWarshall(n, edges);
    const std::vector<int64_t> anchors = {0, 7, 45, 7, 49};  // a repeat, an isolated node
    auto got = ComputeShortestPathEncoding({n, edges, anchors}, GraphLimits());
    ASSERT_THAT(got, IsOk());
    for (int64_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < anchors.size(); ++c) {
        const int64_t d = dist[i * n + anchors[c]];
        ASSERT_EQ((*got)[i * anchors.size() + c], d >= kInf ? -1 : d)
            << "node " << i << " anchor " << anchors[c];
      }
    }
  }
}

// Anchors split across two kernel threads (blocks of up to 16, and an uneven last one):
// Floyd-Warshall's distances, and the one-thread answer bit for bit, with and without
// enough anchors for whole blocks.
TEST(ShortestPath, KernelThreadsMatchFloydWarshall) {
  const int64_t n = 300;
  const std::vector<int64_t> edges = RandomEdges(260, 2, 21);
  const std::vector<int64_t> dist = FloydWarshall(n, edges);
  for (int64_t count : {int64_t{3}, int64_t{90}}) {
    std::vector<int64_t> anchors;
    for (int64_t c = 0; c < count; ++c) anchors.push_back((c * 37 + 5) % n);
    // Work of 90 anchors: past the lease's 256 KiB; 3 anchors: below it, one thread.
    SetKernelThreads(1);
    auto one = ComputeShortestPathEncoding({n, edges, anchors}, GraphLimits());
    SetKernelThreads(2);
    auto two = ComputeShortestPathEncoding({n, edges, anchors}, GraphLimits());
    SetKernelThreads(0);
    ASSERT_THAT(one, IsOk());
    ASSERT_THAT(two, IsOk());
    EXPECT_EQ(*one, *two);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < count; ++c) {
        const int64_t d = dist[i * n + anchors[c]];
        ASSERT_EQ((*two)[i * count + c], d >= kInf ? -1 : d)
            << "node " << i << " anchor " << anchors[c] << " of " << count;
      }
    }
  }
}

TEST(ShortestPath, BadInput) {
  const std::vector<int64_t> edges = {0, 1, 1, 2};
  EXPECT_THAT(ComputeShortestPathEncoding({3, edges, {}}, GraphLimits()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("anchors is empty")));
  const std::vector<int64_t> bad = {1, 3};
  EXPECT_THAT(ComputeShortestPathEncoding({3, edges, bad}, GraphLimits()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("anchors[1] is 3")));
  GraphLimits few;
  few.max_anchors = 1;
  const std::vector<int64_t> two = {0, 1};
  EXPECT_THAT(ComputeShortestPathEncoding({3, edges, two}, few),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("anchors has 2")));
  few.max_anchors = 10;
  few.max_work = 5;
  EXPECT_THAT(ComputeShortestPathEncoding({3, edges, two}, few),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("would visit")));
}

// --- Trees. -------------------------------------------------------------------------------

//            0            6 (a second root: a forest)
//          / | \          |
//         1  2  5         7
//        / \    |
//       3   4   8
// Child indices by increasing id: 1->0, 2->1, 5->2 under 0; 3->0, 4->1 under 1; 8->0 under 5;
// 7->0 under 6.
const std::vector<int64_t> kForest = {-1, 0, 0, 1, 1, 0, -1, 6, 5};

TEST(Tree, OneHotStackOnAHandDrawnForest) {
  const int32_t depth = 3, children = 3;
  auto got = ComputeTreeEncoding({9, kForest, depth, children, 0.5}, GraphLimits());
  ASSERT_THAT(got, IsOk());
  // Per node, the (block, child index, weight) entries: own step first, decay^l.
  struct Hot {
    int block, child;
    float weight;
  };
  const std::vector<std::vector<Hot>> want = {
      {},                         // 0: root
      {{0, 0, 1}},                // 1: path (0)
      {{0, 1, 1}},                // 2: path (1)
      {{0, 0, 1}, {1, 0, 0.5f}},  // 3: path (0, 0)
      {{0, 1, 1}, {1, 0, 0.5f}},  // 4: path (0, 1)
      {{0, 2, 1}},                // 5: path (2)
      {},                         // 6: root
      {{0, 0, 1}},                // 7: path (0) under root 6
      {{0, 0, 1}, {1, 2, 0.5f}},  // 8: path (2, 0)
  };
  const int64_t width = depth * children;
  for (int64_t v = 0; v < 9; ++v) {
    std::vector<float> row(static_cast<size_t>(width), 0.0f);
    for (const Hot& h : want[v]) row[h.block * children + h.child] = h.weight;
    EXPECT_THAT(std::vector<float>(got->begin() + v * width, got->begin() + (v + 1) * width),
                ElementsAreArray(row))
        << "node " << v;
  }
}

TEST(Tree, PathDeeperThanMaxDepthKeepsTheNodesOwnSteps) {
  // A path 0 - 1 - ... - 9 (node v has depth v, every child index 0), plus node 10, second
  // child of 8 (depth 9, path (0,...,0,1)).
  std::vector<int64_t> parents = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8};
  const int32_t max_depth = 4, children = 2;
  auto got = ComputeTreeEncoding({11, parents, max_depth, children, 0.9}, GraphLimits());
  ASSERT_THAT(got, IsOk());
  const int64_t width = max_depth * children;
  for (int64_t v = 0; v < 11; ++v) {
    const int64_t depth = v == 10 ? 9 : v;
    for (int64_t l = 0; l < max_depth; ++l) {
      for (int64_t c = 0; c < children; ++c) {
        const int64_t own = (v == 10 && l == 0) ? 1 : 0;  // node 10's own step is child 1
        const double w = l < depth && c == own ? std::pow(0.9, static_cast<double>(l)) : 0.0;
        EXPECT_FLOAT_EQ((*got)[v * width + l * children + c], static_cast<float>(w))
            << "node " << v << " block " << l << " child " << c;
      }
    }
  }
}

TEST(Tree, TableSumIsTheDecayedSumOfRows) {
  const int64_t d = 4;
  const int32_t children = 3, max_depth = 2;
  std::vector<float> table(static_cast<size_t>(children * d));
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.25f * static_cast<float>(i) - 1.0f;
  TreeSpec spec{9, kForest, max_depth, children, -0.5, table.data(), d};
  auto got = ComputeTreeEncoding(spec, GraphLimits());
  ASSERT_THAT(got, IsOk());
  // Paths from the drawing above, the node's own step last: c_depth first in the sum.
  const std::vector<std::vector<int>> paths = {{}, {0}, {1}, {0, 0}, {0, 1}, {2}, {}, {0}, {2, 0}};
  for (int64_t v = 0; v < 9; ++v) {
    for (int64_t f = 0; f < d; ++f) {
      double want = 0;
      const std::vector<int>& path = paths[v];
      const int64_t depth = static_cast<int64_t>(path.size());
      for (int64_t l = 0; l < std::min<int64_t>(depth, max_depth); ++l) {
        want += std::pow(-0.5, static_cast<double>(l)) * table[path[depth - 1 - l] * d + f];
      }
      EXPECT_FLOAT_EQ((*got)[v * d + f], static_cast<float>(want)) << "node " << v;
    }
  }
}

TEST(Tree, BadInputNamesTheNode) {
  const GraphLimits limits;
  const std::vector<int64_t> out_of_range = {-1, 0, 5};
  EXPECT_THAT(ComputeTreeEncoding({3, out_of_range, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parents[2] is 5")));
  const std::vector<int64_t> below = {-1, -2};
  EXPECT_THAT(ComputeTreeEncoding({2, below, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parents[1] is -2")));
  const std::vector<int64_t> self = {-1, 1};
  EXPECT_THAT(ComputeTreeEncoding({2, self, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node 1 is its own parent")));
  const std::vector<int64_t> cycle = {-1, 3, 1, 2};  // 1 -> 3 -> 2 -> 1
  EXPECT_THAT(ComputeTreeEncoding({4, cycle, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(a cycle)")));
  const std::vector<int64_t> wide = {-1, 0, 0, 0};  // node 3 is child 2
  EXPECT_THAT(ComputeTreeEncoding({4, wide, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node 3 is child 2 (0-based, by increasing id) of node 0")));
  EXPECT_THAT(ComputeTreeEncoding({4, wide, 2, 3}, limits), IsOk());
  const std::vector<int64_t> short_list = {-1, 0};
  EXPECT_THAT(ComputeTreeEncoding({3, short_list, 2, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parents has 2 entries")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 0, 2}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_depth is 0")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 2, 0}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_children is 0")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 2, 2, NAN}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth_decay")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 200, 2, 1e3}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth_decay")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 1 << 20, 2}, limits),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_depth")));
  EXPECT_THAT(ComputeTreeEncoding({2, short_list, 4096, 4096}, limits),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_depth * max_children")));
}

}  // namespace
}  // namespace posenc
