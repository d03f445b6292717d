#include "server/graph/shortest_path.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"
#include "server/kernels/threads.h"

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

// Anchors per task, at most: one task's hops of a node then fill up to 64 bytes of its output
// row, so two threads rarely write the same cache line. Fewer anchors than the threads'
// share of 16 each are split evenly instead.
constexpr int64_t kAnchorBlock = 16;

// Hop counts from `source` to every node (-1 where unreachable), breadth first. hops and
// queue: num_nodes each.
void HopsFrom(const Adjacency& adj, int32_t source, int32_t* hops, std::vector<int32_t>& queue) {
  std::fill(hops, hops + queue.size(), -1);
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
}

// Anchor blocks [first, last) of `block` anchors: each block's anchors searched one by one
// into a [block, n] scratch, then written node by node into out [n, count]. Stops early
// (setting gone) if the caller has gone.
void SearchAnchorBlocks(const Adjacency& adj, const ShortestPathSpec& spec,
                        const CancelCheck& cancelled, int64_t block, int64_t first, int64_t last,
                        std::atomic<bool>& gone, int32_t* out) {
  const int64_t n = spec.num_nodes;
  const auto count = static_cast<int64_t>(spec.anchors.size());
  std::vector<int32_t> hops(static_cast<size_t>(block * n));
  std::vector<int32_t> queue(static_cast<size_t>(n));
  for (int64_t b = first; b < last; ++b) {
    const int64_t a0 = b * block;
    const int64_t width = std::min(block, count - a0);
    for (int64_t a = 0; a < width; ++a) {  // anchor
      if (gone.load(std::memory_order_relaxed)) return;
      if (IsCancelled(cancelled)) {
        gone.store(true, std::memory_order_relaxed);
        return;
      }
      HopsFrom(adj, static_cast<int32_t>(spec.anchors[a0 + a]), hops.data() + a * n, queue);
    }
    for (int64_t i = 0; i < n; ++i) {  // node
      for (int64_t a = 0; a < width; ++a) out[i * count + a0 + a] = hops[a * n + i];
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ComputeShortestPathEncoding(const ShortestPathSpec& spec,
                                                                 const GraphLimits& limits,
                                                                 const CancelCheck& cancelled) {
  RETURN_IF_ERROR(ValidateShortestPath(spec, limits));
  const int64_t n = spec.num_nodes;
  const auto count = static_cast<int64_t>(spec.anchors.size());
  const Adjacency adj = BuildAdjacency(n, spec.edges);
  std::vector<int32_t> out(static_cast<size_t>(n * count), -1);
  // Anchors are independent searches: the kernel threads split them, in blocks.
  const KernelThreadLease lease(
      WorkBytes(count * (n + static_cast<int64_t>(adj.neighbors.size()))));
  const int64_t block =
      std::clamp<int64_t>((count + lease.threads() - 1) / lease.threads(), 1, kAnchorBlock);
  std::atomic<bool> gone{false};
  ParallelFor(lease.threads(), (count + block - 1) / block, [&](int64_t first, int64_t last) {
    SearchAnchorBlocks(adj, spec, cancelled, block, first, last, gone, out.data());
  });
  if (gone.load()) {
    return absl::CancelledError("the shortest-path encoding stopped: the caller has gone");
  }
  return out;
}

}  // namespace posenc
