// Laplacian eigenvector positional encodings of graph nodes (GraphEncode): the k smallest
// non-trivial eigenvectors of L = D - A or I - D^-1/2 A D^-1/2. Pure function; thread-safe;
// the result owns its buffers. Dense eigensolver for small components, Lanczos (Spectra) on
// a shift-inverted or shifted operator for large ones.
//
//   GraphSpec spec{/*num_nodes=*/4, edges, /*k=*/2, /*normalized=*/false};
//   ASSIGN_OR_RETURN(GraphEncoding enc, ComputeLaplacianEncoding(spec, GraphLimits()));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/common/cancel.h"

namespace posenc {

struct GraphSpec {
  int64_t num_nodes = 0;
  // u0, v0, u1, v1, ...: undirected; self-loops ignored, repeated pairs count once.
  absl::Span<const int64_t> edges;
  int32_t k = 0;
  bool normalized = false;
};

// Requests past the size limits get RESOURCE_EXHAUSTED; the solver knobs are for tuning and
// tests.
struct GraphLimits {
  int64_t max_nodes = 1'000'000;
  int64_t max_edges = 10'000'000;  // node pairs in the request, before de-duplication
  int32_t max_k = 512;
  int64_t max_output_elements = int64_t{1} << 26;  // num_nodes * k
  // Memory the Lanczos basis may take (about num_nodes * (2k + 34) doubles).
  int64_t max_solver_bytes = int64_t{2} << 30;

  // Connected components up to this many nodes use the dense solver (O(n^3), all vectors).
  // Measured (random graph, k 16): dense 0.15 s at 500 nodes, 1 s at 1000, 8 s at 2000;
  // Lanczos 0.03-0.4 s over the same sizes.
  int64_t dense_max_nodes = 500;
  // Larger components use shift-invert on a sparse LDL^T factor when the factor has at most
  // this many entries per Laplacian entry (meshes, grids, trees), else Lanczos on a Chebyshev
  // filter of L (expander-like graphs, which factor badly but have wide spectral gaps).
  double max_factor_fill = 40.0;
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
