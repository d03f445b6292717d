// Times ComputeLaplacianEncoding on large sparse graphs (a random graph with ~5 edges per
// node, a 2-D grid, a ring) against the dense solver on the largest graph it takes by default,
// measured in the same run; then the Laplacian (sparse path), random-walk, shortest-path and
// tree encodings, each against a plain float64 reference computed here in the same run (a
// dense symmetric eigensolver, dense matrix powers, Floyd-Warshall, a walk to the root per
// node), with the largest difference; then the Laplacian, random walk and shortest paths at
// the Laplacian rows' size on one thread against every kernel thread.
// Usage: graph_bench [num_nodes=100000] [k=16]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <algorithm>

#include "server/graph/laplacian.h"
#include "server/graph/random_walk.h"
#include "server/graph/shortest_path.h"
#include "server/graph/tree_positions.h"
#include "server/kernels/threads.h"
#include "tests/support/graphs.h"

namespace {

using Clock = std::chrono::steady_clock;

using posenc::testing::GridEdges;
using posenc::testing::RandomEdges;
using posenc::testing::RingEdges;

double Run(const char* name, int64_t n, const std::vector<int64_t>& edges, int k, bool normalized,
           const posenc::GraphLimits& limits) {
  const posenc::GraphSpec spec{n, edges, k, normalized};
  const auto start = Clock::now();
  auto enc = posenc::ComputeLaplacianEncoding(spec, limits);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!enc.ok()) {
    std::printf("%-34s n=%-8lld FAILED %s\n", name, static_cast<long long>(n),
                std::string(enc.status().message()).c_str());
    return seconds;
  }
  const auto& ev = enc->eigenvalues;
  std::printf("%-34s n=%-8lld k=%-3d %8.3f s  lambda_1=%.6g lambda_k=%.6g\n", name,
              static_cast<long long>(n), k, seconds, ev.empty() ? 0.0 : ev.front(),
              ev.empty() ? 0.0 : ev.back());
  return seconds;
}

template <typename F>
double Seconds(const F& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Eigen::MatrixXd Adjacency(int64_t n, const std::vector<int64_t>& edges) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  for (size_t e = 0; e + 1 < edges.size(); e += 2) {
    if (edges[e] == edges[e + 1]) continue;
    a(edges[e], edges[e + 1]) = a(edges[e + 1], edges[e]) = 1.0;
  }
  return a;
}

void RandomWalkRow(const char* name, int64_t n, const std::vector<int64_t>& edges, int steps) {
  const posenc::GraphLimits limits;
  std::vector<float> got;
  const double fast = Seconds([&] {
    got = *posenc::ComputeRandomWalkEncoding({n, edges, steps}, limits);
  });
  std::vector<double> want(static_cast<size_t>(n * steps));
  const double reference = Seconds([&] {
    Eigen::MatrixXd p = Adjacency(n, edges);
    for (int64_t i = 0; i < n; ++i) {
      const double deg = p.row(i).sum();
      if (deg > 0) p.row(i) /= deg;
    }
    Eigen::MatrixXd power = p;
    for (int s = 0; s < steps; ++s) {
      for (int64_t i = 0; i < n; ++i) want[i * steps + s] = power(i, i);
      if (s + 1 < steps) power = power * p;
    }
  });
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(got[i] - want[i]));
  std::printf(
      "%-34s n=%-8lld S=%-3d %8.4f s  float64 dense powers %8.4f s  ratio %.3f  "
      "max |diff| %.2g\n",
      name, static_cast<long long>(n), steps, fast, reference, fast / reference, diff);
}

// The Laplacian's sparse path (dense_max_nodes lowered below n) against a float64 dense
// symmetric eigensolver on L = D - A built here: the time of each, the largest eigenvalue
// difference, and the largest entry difference of the eigenvectors (each reference vector
// signed as posenc signs its own: largest entry positive; the eigenvalues are distinct here).
void LaplacianRow(int64_t n, const std::vector<int64_t>& edges, int k) {
  posenc::GraphLimits sparse;
  sparse.dense_max_nodes = 16;
  posenc::GraphEncoding got;
  const double fast = Seconds([&] {
    got = *posenc::ComputeLaplacianEncoding({n, edges, k, false}, sparse);
  });
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ref;
  const double reference = Seconds([&] {
    const Eigen::MatrixXd a = Adjacency(n, edges);
    Eigen::MatrixXd lap = -a;
    for (int64_t i = 0; i < n; ++i) lap(i, i) = a.row(i).sum();
    ref.compute(lap);
  });
  double value_diff = 0, vector_diff = 0;
  for (int c = 0; c < static_cast<int>(got.eigenvalues.size()); ++c) {
    value_diff = std::max(value_diff, std::abs(got.eigenvalues[c] - ref.eigenvalues()(c + 1)));
    Eigen::VectorXd v = ref.eigenvectors().col(c + 1);
    Eigen::Index top = 0;
    v.cwiseAbs().maxCoeff(&top);
    if (v(top) < 0) v = -v;
    for (int64_t i = 0; i < n; ++i) {
      vector_diff = std::max(vector_diff, std::abs(got.vectors[i * k + c] - v(i)));
    }
  }
  std::printf(
      "%-34s n=%-8lld k=%-3d %8.4f s  float64 dense eigensolver %8.4f s  ratio %.3f  "
      "max |diff| eigenvalues %.2g vectors %.2g\n",
      "laplacian (sparse), random 5/node", static_cast<long long>(n), k, fast, reference,
      fast / reference, value_diff, vector_diff);
}

void ShortestPathRow(int64_t n, const std::vector<int64_t>& edges, int anchors) {
  std::vector<int64_t> ids;
  for (int a = 0; a < anchors; ++a) ids.push_back(a * (n / anchors));
  std::vector<int32_t> got;
  const double fast = Seconds([&] {
    got = *posenc::ComputeShortestPathEncoding({n, edges, ids}, posenc::GraphLimits());
  });
  Eigen::MatrixXd dist;
  const double reference = Seconds([&] {  // Floyd-Warshall in float64
    dist = Adjacency(n, edges);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (i != j && dist(i, j) == 0) dist(i, j) = 1e300;
      }
    }
    for (int64_t m = 0; m < n; ++m) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) dist(i, j) = std::min(dist(i, j), dist(i, m) + dist(m, j));
      }
    }
  });
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int a = 0; a < anchors; ++a) {
      const double d = dist(i, ids[a]);
      wrong += got[i * anchors + a] != (d >= 1e300 ? -1 : static_cast<int32_t>(d));
    }
  }
  std::printf(
      "%-34s n=%-8lld A=%-3d %8.4f s  float64 Floyd-Warshall %8.4f s  ratio %.4f  "
      "mismatches %lld\n",
      "shortest path, random 3/node", static_cast<long long>(n), anchors, fast, reference,
      fast / reference, static_cast<long long>(wrong));
}

// One solver on one thread and on every kernel thread, same inputs, same run: the speedup
// of splitting roots (random walk) or anchors (shortest path) across the kernel threads,
// and whether the answers are identical.
// Each the best of three calls, alternating, so that both meet the machine in the same state.
template <typename Solve>
void ThreadsRow(const char* name, int64_t n, Solve solve) {
  decltype(solve()) one, all;
  double one_s = 1e30, all_s = 1e30;
  for (int round = 0; round < 3; ++round) {
    posenc::SetKernelThreads(1);
    one_s = std::min(one_s, Seconds([&] { one = solve(); }));
    posenc::SetKernelThreads(0);
    all_s = std::min(all_s, Seconds([&] { all = solve(); }));
  }
  std::printf("%-34s n=%-8lld 1 thread %8.4f s  %d threads %8.4f s  speedup %.2f  %s\n", name,
              static_cast<long long>(n), one_s, posenc::KernelThreads(), all_s, one_s / all_s,
              one == all ? "identical" : "DIFFERENT");
}

void TreeRow(int64_t n, int depth, int children) {
  // A random recursive tree: node i's parent uniform in [0, i), capped at `children`.
  std::vector<int64_t> parents(static_cast<size_t>(n), -1);
  std::vector<int> count(static_cast<size_t>(n), 0);
  uint64_t state = 12345;
  for (int64_t i = 1; i < n; ++i) {
    int64_t p;
    do {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      p = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(i));
    } while (count[p] >= children);
    ++count[p];
    parents[i] = p;
  }
  std::vector<float> got;
  const double fast = Seconds([&] {
    got = *posenc::ComputeTreeEncoding({n, parents, depth, children, 0.9}, posenc::GraphLimits());
  });
  const int64_t width = int64_t{depth} * children;
  std::vector<double> want(static_cast<size_t>(n * width), 0.0);
  const double reference = Seconds([&] {
    std::vector<int> rank(static_cast<size_t>(n), 0), seen(static_cast<size_t>(n), 0);
    for (int64_t v = 1; v < n; ++v) rank[v] = seen[parents[v]]++;
    for (int64_t v = 0; v < n; ++v) {
      std::vector<int> path;  // child indices from v up to its root
      for (int64_t u = v; parents[u] >= 0; u = parents[u]) path.push_back(rank[u]);
      for (int64_t l = 0; l < std::min<int64_t>(depth, static_cast<int64_t>(path.size())); ++l) {
        want[v * width + l * children + path[l]] = std::pow(0.9, static_cast<double>(l));
      }
    }
  });
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(got[i] - want[i]));
  std::printf(
      "%-34s n=%-8lld D=%-3d %8.4f s  float64 walk to the root %8.4f s  ratio %.3f  "
      "max |diff| %.2g\n",
      "tree one-hot, random recursive", static_cast<long long>(n), depth, fast, reference,
      fast / reference, diff);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 100000;
  const int k = argc > 2 ? std::atoi(argv[2]) : 16;
  const posenc::GraphLimits limits;

  // Baseline: the dense path on the largest component it handles by default.
  const int64_t dense_n = limits.dense_max_nodes;
  const double baseline =
      Run("baseline: dense random graph", dense_n, RandomEdges(dense_n, 5, 1), k, false, limits);

  const int64_t side = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  struct Case {
    const char* name;
    int64_t nodes;
    std::vector<int64_t> edges;
    bool normalized;
  };
  const Case cases[] = {
      {"random, 5 edges/node", n, RandomEdges(n, 5, 2), false},
      {"random, 5 edges/node, normalized", n, RandomEdges(n, 5, 2), true},
      {"square grid", side * side, GridEdges(side, side), false},
      {"grid 2:1, normalized", (side / 2) * (side * 2), GridEdges(side / 2, side * 2), true},
      {"ring", n, RingEdges(n), false},
  };
  for (const Case& c : cases) {
    const double seconds = Run(c.name, c.nodes, c.edges, k, c.normalized, limits);
    std::printf("%-34s ratio to baseline %.2f\n", "", seconds / baseline);
  }

  // The other encodings against float64 references on graphs the references can take.
  LaplacianRow(1000, RandomEdges(1000, 5, 6), k);
  RandomWalkRow("random walk, random 3/node", 500, RandomEdges(500, 3, 3), 16);
  RandomWalkRow("random walk, grid 20x25", 500, GridEdges(20, 25), 16);
  ShortestPathRow(500, RandomEdges(500, 3, 4), 16);
  TreeRow(20000, 16, 8);

  // The same solvers at the size of the Laplacian rows, on the kernel threads.
  const std::vector<int64_t> expander = RandomEdges(n, 5, 2);
  ThreadsRow("laplacian, random 5/node, k=16", n, [&] {
    return posenc::ComputeLaplacianEncoding({n, expander, k, false}, posenc::GraphLimits())
        ->vectors;
  });
  const std::vector<int64_t> sparse = RandomEdges(n, 3, 5);
  ThreadsRow("random walk, random 3/node, S=6", n, [&] {
    return *posenc::ComputeRandomWalkEncoding({n, sparse, 6}, posenc::GraphLimits());
  });
  std::vector<int64_t> anchors;
  for (int64_t a = 0; a < 64; ++a) anchors.push_back(a * (n / 64));
  ThreadsRow("shortest path, random 3/node, A=64", n, [&] {
    return *posenc::ComputeShortestPathEncoding({n, sparse, anchors}, posenc::GraphLimits());
  });
  return 0;
}
