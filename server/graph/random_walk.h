// Random-walk landing probabilities of graph nodes (PyG's AddRandomWalkPE, as GraphGPS uses
// them): column s - 1 of node i's row is (P^s)[i][i], P = D^-1 A, s = 1..walk_length; an
// isolated node's row is zeros. Pure function; thread-safe; the result owns its buffer.
//
// Cost: a walk of s steps that returns to i never goes farther than s/2 hops, so each node's
// probabilities come from the ball of walk_length/2 hops around it: walk_length sparse
// row-vector products over the ball's edges, in float64, rounded once. That is
// sum_i walk_length * edges(ball_i), counted exactly as the work runs and refused past
// GraphLimits::max_work: cheap for the sparse, local graphs these encodings serve
// (molecules, meshes, road networks), refused for large expanders with long walks, where
// every ball is the whole graph.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/common/cancel.h"
#include "server/graph/graph_common.h"

namespace posenc {

struct RandomWalkSpec {
  int64_t num_nodes = 0;
  absl::Span<const int64_t> edges;  // as GraphSpec: undirected, self-loops ignored
  int32_t walk_length = 0;
};

// [num_nodes, walk_length] row-major. INVALID_ARGUMENT: the edge list (ValidateNodesAndEdges)
// or walk_length < 1. RESOURCE_EXHAUSTED: walk_length > limits.max_walk_length, the output
// past limits.max_output_elements, or the work past limits.max_work. CANCELLED when
// `cancelled` says so (asked every few nodes).
absl::StatusOr<std::vector<float>> ComputeRandomWalkEncoding(const RandomWalkSpec& spec,
                                                             const GraphLimits& limits,
                                                             const CancelCheck& cancelled = {});

}  // namespace posenc
