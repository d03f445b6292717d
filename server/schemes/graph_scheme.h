// Graph Laplacian encodings as a scheme: the eigenvectors alone ([num_nodes, k] FLOAT32), or
// concatenated onto the caller's node features ([num_nodes, d + k] in the features' dtype).
// The features are checked before the (possibly long) eigen-solve. Free functions;
// thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/cancel.h"
#include "server/graph/laplacian.h"
#include "server/schemes/absolute_scheme.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

struct GraphResult {
  Shape shape;
  DType dtype = DType::kFloat32;
  std::string data;  // shape x dtype bytes
  std::vector<double> eigenvalues;
};

// `input`, when given, is [num_nodes, d] FLOAT32, FLOAT16 or BFLOAT16 (INVALID_ARGUMENT
// otherwise) and the output must fit limits.max_output_bytes (RESOURCE_EXHAUSTED). Stops with
// CANCELLED when `cancelled` says so (polled inside the eigen-solve). `graph_limits` bounds
// the solve; its max_output_elements is always taken from limits.max_output_bytes.
absl::StatusOr<GraphResult> ApplyGraph(const GraphSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits,
                                       GraphLimits graph_limits = {},
                                       const CancelCheck& cancelled = {});

}  // namespace posenc
