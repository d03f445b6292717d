// Graph encodings as a scheme: Laplacian eigenvectors, random-walk landing probabilities,
// anchor hop distances and tree paths, alone or concatenated onto the caller's node features
// ([num_nodes, d + width] in the features' dtype). The features and every cross-field rule
// are checked before the (possibly long) solve. Free functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/cancel.h"
#include "server/graph/laplacian.h"
#include "server/graph/random_walk.h"
#include "server/graph/shortest_path.h"
#include "server/graph/tree_positions.h"
#include "server/schemes/absolute_scheme.h"
#include "server/tables/named_tables.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

enum class GraphEncodingKind { kLaplacian, kRandomWalk, kShortestPath, kTree };

// The request's encoding and its fields, converted but not yet checked. Spans point into
// the request.
struct GraphRequestSpec {
  GraphEncodingKind encoding = GraphEncodingKind::kLaplacian;
  GraphSpec graph;                    // num_nodes and edges for all; k and normalized for LAPLACIAN
  int32_t walk_length = 0;            // RANDOM_WALK
  absl::Span<const int64_t> anchors;  // SHORTEST_PATH
  absl::Span<const int64_t> parents;  // TREE
  int32_t max_depth = 0;              // TREE
  int32_t max_children = 0;           // TREE
  std::optional<double> depth_decay;  // TREE; default 1
  std::string tree_table;             // TREE; --table name, [max_children, d]
};

struct GraphResult {
  Shape shape;
  DType dtype = DType::kFloat32;
  std::string data;  // shape x dtype bytes
  std::vector<double> eigenvalues;
};

// Without `input`: the encoding as its own dtype (FLOAT32; INT32 hop distances for
// SHORTEST_PATH). With `input` ([num_nodes, d] FLOAT32, FLOAT16 or BFLOAT16; INVALID_ARGUMENT
// otherwise): [num_nodes, d + width] in the input's dtype, each row the input row then the
// encoding converted to that dtype (hop distances as numbers, -1 unreachable: exact up to
// 2^24 in FLOAT32, 2048 in FLOAT16, 256 in BFLOAT16). A field of another encoding set
// (k for RANDOM_WALK, anchors for TREE, ...) and edges with TREE are INVALID_ARGUMENT; a
// tree table not loaded is NOT_FOUND. The output must fit limits.max_output_bytes
// (RESOURCE_EXHAUSTED). Stops with CANCELLED when `cancelled` says so. `graph_limits` bounds
// the work; its max_output_elements is always taken from limits.max_output_bytes.
absl::StatusOr<GraphResult> ApplyGraph(const GraphRequestSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits, const NamedTables& tables,
                                       GraphLimits graph_limits = {},
                                       const CancelCheck& cancelled = {});

// The Laplacian encoding alone (GraphRequestSpec with encoding LAPLACIAN and no tables).
absl::StatusOr<GraphResult> ApplyGraph(const GraphSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits, GraphLimits graph_limits = {},
                                       const CancelCheck& cancelled = {});

}  // namespace posenc
