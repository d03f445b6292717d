#include "server/graph/shortest_path.h"

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::Status ValidateShortestPath(const ShortestPathSpec& spec, const GraphLimits& limits) {
  RETURN_IF_ERROR(ValidateNodesAndEdges(spec.num_nodes, spec.edges, limits));
  const int64_t count = static_cast<int64_t>(spec.anchors.size());
  if (count < 1) {
    return absl::InvalidArgumentError("anchors is empty; graph_shortest_path needs >= 1 anchor");
  }
  if (count > limits.max_anchors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "anchors has ", count, " ids; this server accepts at most ", limits.max_anchors));
  }
  for (int64_t a = 0; a < count; ++a) {
    if (spec.anchors[a] < 0 || spec.anchors[a] >= spec.num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("anchors[", a, "] is ", spec.anchors[a],
                                                     "; node ids must be in [0, ", spec.num_nodes,
                                                     ")"));
    }
  }
  if (spec.num_nodes * count > limits.max_output_elements) {
    return absl::ResourceExhaustedError(absl::StrCat("num_nodes * len(anchors) is ", spec.num_nodes,
                                                     " * ", count, "; this server returns at most ",
                                                     limits.max_output_elements, " elements"));
  }
  // Edges < 2^31 pairs and nodes < 2^31, anchors < 2^31: the product fits in int64.
  const int64_t work = count * (spec.num_nodes + static_cast<int64_t>(spec.edges.size()));
  if (work > limits.max_work) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph_shortest_path would visit ", work, " nodes and edges (len(anchors) * (num_nodes",
        " + 2 * edges)); this server allows ", limits.max_work));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ComputeShortestPathEncoding(const ShortestPathSpec& spec,
                                                                 const GraphLimits& limits,
                                                                 const CancelCheck& cancelled) {
  RETURN_IF_ERROR(ValidateShortestPath(spec, limits));
  const int64_t n = spec.num_nodes;
  const int64_t count = static_cast<int64_t>(spec.anchors.size());
  const Adjacency adj = BuildAdjacency(n, spec.edges);
  std::vector<int32_t> out(static_cast<size_t>(n * count), -1);
  std::vector<int32_t> hops(static_cast<size_t>(n));
  std::vector<int32_t> queue(static_cast<size_t>(n));
  for (int64_t a = 0; a < count; ++a) {  // anchor
    if (IsCancelled(cancelled)) {
      return absl::CancelledError("the shortest-path encoding stopped: the caller has gone");
    }
    std::fill(hops.begin(), hops.end(), -1);
    const auto source = static_cast<int32_t>(spec.anchors[a]);
    hops[source] = 0;
    queue[0] = source;
    size_t tail = 1;
    for (size_t head = 0; head < tail; ++head) {
      const int32_t v = queue[head];
      for (int64_t e = adj.offsets[v]; e < adj.offsets[v + 1]; ++e) {
        const int32_t w = adj.neighbors[e];
        if (hops[w] >= 0) continue;
        hops[w] = hops[v] + 1;
        queue[tail++] = w;
      }
    }
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i * count + a)] = hops[i];
  }
  return out;
}

}  // namespace posenc
