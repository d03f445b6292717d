// Tree positional encodings (Shiv & Quirk 2019) from a parent array: each node's path is the
// child indices c_1 .. c_depth from its root down to it, a child index being the node's rank
// among its parent's children in increasing node id. Pure function; thread-safe.
//
// One-hot stack ([num_nodes, max_depth * max_children]): block l = one_hot(c_{depth-l}) *
// depth_decay^l while l < min(depth, max_depth), zeros after. Table sum ([num_nodes, d]):
// sum over the same l of depth_decay^l * table[c_{depth-l}], in float64, rounded once.
// A root's encoding is zeros; a forest is allowed.
// Cost: sum over nodes of min(depth, max_depth) (times d with a table), known from the
// depths before any output is built and refused past GraphLimits::max_work.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/graph/graph_common.h"

namespace posenc {

struct TreeSpec {
  int64_t num_nodes = 0;
  absl::Span<const int64_t> parents;  // size num_nodes; -1 for a root
  int32_t max_depth = 0;
  int32_t max_children = 0;
  double depth_decay = 1.0;
  // Optional [max_children, table_dim] float32 row-major; null: the one-hot stack.
  const float* table = nullptr;
  int64_t table_dim = 0;
};

// Largest |depth_decay|^l used is |depth_decay|^(max_depth - 1); it must stay finite and the
// encoding finite (INVALID_ARGUMENT otherwise).
// INVALID_ARGUMENT: num_nodes < 1, parents not of size num_nodes, max_depth or max_children
// < 1, depth_decay not finite, and, naming the node: a parent outside [-1, num_nodes), a
// cycle (a node that is its own ancestor), a child index >= max_children.
// RESOURCE_EXHAUSTED: max_depth > limits.max_tree_depth, max_depth * max_children over
// limits.max_tree_width (one-hot), the output past limits.max_output_elements, the work past
// limits.max_work.
absl::StatusOr<std::vector<float>> ComputeTreeEncoding(const TreeSpec& spec,
                                                       const GraphLimits& limits);

}  // namespace posenc
