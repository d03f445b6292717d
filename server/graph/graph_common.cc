#include "server/graph/graph_common.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace posenc {

Adjacency BuildAdjacency(int64_t num_nodes, absl::Span<const int64_t> edges) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  pairs.reserve(edges.size() / 2);
  for (size_t e = 0; e + 1 < edges.size(); e += 2) {
    int32_t u = static_cast<int32_t>(edges[e]), v = static_cast<int32_t>(edges[e + 1]);
    if (u == v) continue;
    if (u > v) std::swap(u, v);
    pairs.emplace_back(u, v);
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());

  Adjacency adj;
  adj.offsets.assign(static_cast<size_t>(num_nodes) + 1, 0);
  for (const auto& [u, v] : pairs) {
    ++adj.offsets[u + 1];
    ++adj.offsets[v + 1];
  }
  for (int64_t i = 0; i < num_nodes; ++i) adj.offsets[i + 1] += adj.offsets[i];
  adj.neighbors.resize(pairs.size() * 2);
  std::vector<int64_t> next(adj.offsets.begin(), adj.offsets.end() - 1);
  for (const auto& [u, v] : pairs) {
    adj.neighbors[next[u]++] = v;
    adj.neighbors[next[v]++] = u;
  }
  // Pairs were sorted, so each neighbour list is ascending already.
  return adj;
}

absl::Status ValidateNodesAndEdges(int64_t num_nodes, absl::Span<const int64_t> edges,
                                   const GraphLimits& limits) {
  if (num_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_nodes is ", num_nodes, "; it must be >= 1"));
  }
  const int64_t max_nodes =
      std::min<int64_t>(limits.max_nodes, std::numeric_limits<int32_t>::max());
  if (num_nodes > max_nodes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("num_nodes is ", num_nodes, "; this server accepts at most ", max_nodes));
  }
  if (edges.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("edges has ", edges.size(), " entries; it must be pairs u0, v0, u1, v1, ..."));
  }
  if (static_cast<int64_t>(edges.size() / 2) > limits.max_edges) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "edges has ", edges.size() / 2, " pairs; this server accepts at most ", limits.max_edges));
  }
  for (size_t e = 0; e < edges.size(); ++e) {
    if (edges[e] < 0 || edges[e] >= num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("edges[", e, "] is ", edges[e],
                                                     "; node ids must be in [0, ", num_nodes, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc
