#include "tests/support/graphs.h"

#include <random>

namespace posenc::testing {

std::vector<int64_t> RandomEdges(int64_t n, int per_node, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<int64_t> edges;
  edges.reserve(static_cast<size_t>(n * per_node * 2));
  for (int64_t u = 0; u < n; ++u) {
    for (int e = 0; e < per_node; ++e) edges.insert(edges.end(), {u, pick(rng)});
  }
  return edges;
}

std::vector<int64_t> GridEdges(int64_t rows, int64_t cols) {
  std::vector<int64_t> edges;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t v = r * cols + c;
      if (c + 1 < cols) edges.insert(edges.end(), {v, v + 1});
      if (r + 1 < rows) edges.insert(edges.end(), {v, v + cols});
    }
  }
  return edges;
}

std::vector<int64_t> RingEdges(int64_t n) {
  std::vector<int64_t> edges;
  for (int64_t v = 0; v < n; ++v) edges.insert(edges.end(), {v, (v + 1) % n});
  return edges;
}

}  // namespace posenc::testing
