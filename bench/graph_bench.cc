// Times ComputeLaplacianEncoding on large sparse graphs (a random graph with ~5 edges per
// node, a 2-D grid, a ring) against the dense solver on the largest graph it takes by default,
// measured in the same run. Usage: graph_bench [num_nodes=100000] [k=16]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/graph/laplacian.h"
#include "tests/support/graphs.h"

namespace {

using Clock = std::chrono::steady_clock;

using posenc::testing::GridEdges;
using posenc::testing::RandomEdges;
using posenc::testing::RingEdges;

double Run(const char* name, int64_t n, const std::vector<int64_t>& edges, int k,
           bool normalized, const posenc::GraphLimits& limits) {
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
  return 0;
}
