// Edge lists of test graphs for the Laplacian encoding tests and graph_bench, as flat
// [u0, v0, u1, v1, ...] vectors (the GraphSpec form). Pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace posenc::testing {

// n nodes, each with per_node edges to uniformly drawn nodes (self-loops and repeats
// included), reproducible from `seed`.
std::vector<int64_t> RandomEdges(int64_t n, int per_node, uint32_t seed);
// A rows x cols 2-D grid, node r * cols + c.
std::vector<int64_t> GridEdges(int64_t rows, int64_t cols);
// A ring of n nodes.
std::vector<int64_t> RingEdges(int64_t n);

}  // namespace posenc::testing
