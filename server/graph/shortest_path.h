// Hop distances from every node to a list of anchor nodes (graph_shortest_path): one
// breadth-first search per anchor over the undirected adjacency. Pure function; thread-safe.
// Cost: len(anchors) * (num_nodes + 2 * edges), checked against GraphLimits::max_work
// before any search starts.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/common/cancel.h"
#include "server/graph/graph_common.h"

namespace posenc {

struct ShortestPathSpec {
  int64_t num_nodes = 0;
  absl::Span<const int64_t> edges;  // as GraphSpec: undirected, self-loops ignored
  absl::Span<const int64_t> anchors;
};

// [num_nodes, len(anchors)] row-major: the hops from node i to anchors[a], -1 where
// unreachable. INVALID_ARGUMENT: the edge list, no anchors, an anchor outside
// [0, num_nodes) (named by its index). RESOURCE_EXHAUSTED: more than limits.max_anchors
// anchors, the output past limits.max_output_elements, the work past limits.max_work.
// CANCELLED between searches when `cancelled` says so.
absl::StatusOr<std::vector<int32_t>> ComputeShortestPathEncoding(const ShortestPathSpec& spec,
                                                                 const GraphLimits& limits,
                                                                 const CancelCheck& cancelled = {});

}  // namespace posenc
