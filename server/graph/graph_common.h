// What every graph encoding shares: the size limits a request is held to, the undirected
// adjacency built from a request's edge list (CSR, unique neighbours, no self-loops) and the
// checks of num_nodes and the edge list. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace posenc {

// Requests past the size limits get RESOURCE_EXHAUSTED before anything proportional to the
// excess is allocated; the solver knobs are for tuning and tests.
struct GraphLimits {
  int64_t max_nodes = 1'000'000;
  int64_t max_edges = 10'000'000;  // node pairs in the request, before de-duplication
  int32_t max_k = 512;
  int64_t max_output_elements = int64_t{1} << 26;  // num_nodes * (k, walk_length, ...)
  // Memory the Lanczos basis may take (about num_nodes * (2k + 34) doubles).
  int64_t max_solver_bytes = int64_t{2} << 30;

  // RANDOM_WALK steps, SHORTEST_PATH anchors, TREE depth and one-hot width.
  int32_t max_walk_length = 1024;
  int32_t max_anchors = 4096;
  int32_t max_tree_depth = 4096;
  int64_t max_tree_width = int64_t{1} << 16;  // max_depth * max_children (one-hot stack)
  // Multiply-adds (or visited edges) one random-walk, shortest-path or tree request may
  // take: each counts its exact work as it goes (random walk) or before it starts (the
  // others) and stops with RESOURCE_EXHAUSTED past this. About 2-4 s on one core.
  int64_t max_work = int64_t{1} << 32;

  // Connected components up to this many nodes use the dense solver (O(n^3), all vectors).
  // Measured (random graph, k 16): dense 0.15 s at 500 nodes, 1 s at 1000, 8 s at 2000;
  // Lanczos 0.03-0.4 s over the same sizes.
  int64_t dense_max_nodes = 500;
  // Larger components use shift-invert on a sparse LDL^T factor when the factor has at most
  // this many entries per Laplacian entry (meshes, grids, trees), else Lanczos on a Chebyshev
  // filter of L (expander-like graphs, which factor badly but have wide spectral gaps).
  double max_factor_fill = 40.0;
};

// Symmetric adjacency in CSR form: unique neighbours in ascending order, no self-loops.
struct Adjacency {
  std::vector<int64_t> offsets;  // num_nodes + 1
  std::vector<int32_t> neighbors;
  int64_t Degree(int32_t v) const { return offsets[v + 1] - offsets[v]; }
};

// REQUIRES: ValidateNodesAndEdges OK.
Adjacency BuildAdjacency(int64_t num_nodes, absl::Span<const int64_t> edges);

// INVALID_ARGUMENT: num_nodes < 1, an odd-length edge list, a node id outside
// [0, num_nodes). RESOURCE_EXHAUSTED: num_nodes or the pair count over the limits.
absl::Status ValidateNodesAndEdges(int64_t num_nodes, absl::Span<const int64_t> edges,
                                   const GraphLimits& limits);

}  // namespace posenc
