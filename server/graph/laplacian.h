// Laplacian eigenvector positional encodings of graph nodes (GraphEncode): the k smallest
// non-trivial eigenvectors of L = D - A or I - D^-1/2 A D^-1/2. Pure function; thread-safe;
// the result owns its buffers. A dense eigensolver for small components; for large ones,
// Lanczos (Spectra) on the inverse of L + sigma I when its sparse factor fits the fill
// budget, else on a Chebyshev-filtered operator (its answer checked), else on cI - L.
//
//   GraphSpec spec{/*num_nodes=*/4, edges, /*k=*/2, /*normalized=*/false};
//   ASSIGN_OR_RETURN(GraphEncoding enc, ComputeLaplacianEncoding(spec, GraphLimits()));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/common/cancel.h"
#include "server/graph/graph_common.h"

namespace posenc {

struct GraphSpec {
  int64_t num_nodes = 0;
  // u0, v0, u1, v1, ...: undirected; self-loops ignored, repeated pairs count once.
  absl::Span<const int64_t> edges;
  int32_t k = 0;
  bool normalized = false;
};

struct GraphEncoding {
  int64_t num_nodes = 0;
  int32_t k = 0;
  // [num_nodes, k] row-major: column c is the eigenvector of eigenvalues[c]; columns past
  // eigenvalues.size() (graphs with fewer than k + 1 nodes) are zero.
  std::vector<float> vectors;
  // The eigenvalues used, ascending: min(k, num_nodes - 1) of them.
  std::vector<double> eigenvalues;
};

// The encoding of the graph. Eigenvalues are ascending and the first (0) is skipped. The
// null space of a graph with several connected components is spanned by one vector per
// component (constant on it; D^1/2-weighted when normalized), ordered by each component's
// smallest node id; the one of node 0's component is the skipped one. Each column's sign
// makes its entry of largest magnitude positive (the first within 1e-6 relative, on ties).
// INVALID_ARGUMENT: num_nodes < 1, k < 1, an odd-length edge list, a node id outside
// [0, num_nodes). RESOURCE_EXHAUSTED: a GraphLimits bound is exceeded, or the Lanczos solver
// does not converge within its iteration budget. CANCELLED: `cancelled` returned true (it
// is asked between components and at every Lanczos operator product).
absl::StatusOr<GraphEncoding> ComputeLaplacianEncoding(const GraphSpec& spec,
                                                       const GraphLimits& limits,
                                                       const CancelCheck& cancelled = {});

}  // namespace posenc
