#include "server/graph/tree_positions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::Status ValidateTreeFields(const TreeSpec& spec, const GraphLimits& limits) {
  if (spec.num_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_nodes is ", spec.num_nodes, "; it must be >= 1"));
  }
  const int64_t max_nodes =
      std::min<int64_t>(limits.max_nodes, std::numeric_limits<int32_t>::max());
  if (spec.num_nodes > max_nodes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("num_nodes is ", spec.num_nodes, "; this server accepts at most ", max_nodes));
  }
  if (static_cast<int64_t>(spec.parents.size()) != spec.num_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("parents has ", spec.parents.size(),
                                                   " entries; it must have num_nodes (",
                                                   spec.num_nodes, "), -1 for a root"));
  }
  if (spec.max_depth < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_depth is ", spec.max_depth, "; it must be >= 1"));
  }
  if (spec.max_depth > limits.max_tree_depth) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_depth is ", spec.max_depth, "; this server accepts at most ", limits.max_tree_depth));
  }
  if (spec.max_children < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_children is ", spec.max_children, "; it must be >= 1"));
  }
  const int64_t width =
      spec.table ? spec.table_dim : int64_t{spec.max_depth} * int64_t{spec.max_children};
  if (spec.table == nullptr && width > limits.max_tree_width) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_depth * max_children is ", spec.max_depth, " * ", spec.max_children, " = ", width,
        "; this server's one-hot stack is at most ", limits.max_tree_width, " wide"));
  }
  if (spec.table != nullptr && spec.table_dim < 1) {
    return absl::InvalidArgumentError("table has no columns");
  }
  const std::optional<int64_t> elements = CheckedMul(spec.num_nodes, width);
  if (!elements || *elements > limits.max_output_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the tree encoding [", spec.num_nodes, ", ", width,
        "] would be more elements than this server returns (", limits.max_output_elements, ")"));
  }
  if (!std::isfinite(spec.depth_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("depth_decay is ", spec.depth_decay, "; it must be finite"));
  }
  const double largest = std::pow(std::fabs(spec.depth_decay), spec.max_depth - 1);
  if (!(largest <= std::numeric_limits<float>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("depth_decay is ", spec.depth_decay, "; depth_decay^(max_depth - 1) = |",
                     largest, "| is past float32 range for max_depth ", spec.max_depth));
  }
  return absl::OkStatus();
}

// Each node's depth (edges to its root), or INVALID_ARGUMENT naming a node on a cycle.
// REQUIRES: every parent in [-1, num_nodes).
absl::StatusOr<std::vector<int32_t>> Depths(absl::Span<const int64_t> parents) {
  const auto n = static_cast<int64_t>(parents.size());
  constexpr int32_t kUnknown = -1, kOnPath = -2;
  std::vector<int32_t> depth(static_cast<size_t>(n), kUnknown);
  std::vector<int32_t> path;
  for (int64_t start = 0; start < n; ++start) {
    if (depth[start] != kUnknown) continue;
    // Up from start until a root or a node whose depth is known.
    path.clear();
    int64_t v = start;
    int32_t base = -1;  // depth of the node above the path's top (-1 above a root)
    while (true) {
      if (depth[v] == kOnPath) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parents: node ", v, " is its own ancestor (a cycle); a tree's parents end at -1"));
      }
      if (depth[v] >= 0) {
        base = depth[v];
        break;
      }
      depth[v] = kOnPath;
      path.push_back(static_cast<int32_t>(v));
      if (parents[v] < 0) break;
      v = parents[v];
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) depth[*it] = ++base;
  }
  return depth;
}

// Every parent in [-1, num_nodes) and not the node itself.
absl::Status CheckParents(absl::Span<const int64_t> parents) {
  const auto n = static_cast<int64_t>(parents.size());
  for (int64_t v = 0; v < n; ++v) {
    const int64_t p = parents[v];
    if (p < -1 || p >= n) {
      return absl::InvalidArgumentError(absl::StrCat("parents[", v, "] is ", p, "; node ", v,
                                                     "'s parent must be -1 or in [0, ", n, ")"));
    }
    if (p == v) {
      return absl::InvalidArgumentError(
          absl::StrCat("parents[", v, "] is ", p, "; node ", v, " is its own parent (a cycle)"));
    }
  }
  return absl::OkStatus();
}

// Each node's child index: its rank among its parent's children in increasing node id (-1
// for a root), each below max_children.
absl::StatusOr<std::vector<int32_t>> ChildIndices(absl::Span<const int64_t> parents,
                                                  int32_t max_children) {
  const auto n = static_cast<int64_t>(parents.size());
  std::vector<int32_t> child(static_cast<size_t>(n), -1);
  std::vector<int32_t> children_seen(static_cast<size_t>(n), 0);
  for (int64_t v = 0; v < n; ++v) {
    const int64_t p = parents[v];
    if (p < 0) continue;
    child[v] = children_seen[p]++;
    if (child[v] >= max_children) {
      return absl::InvalidArgumentError(absl::StrCat("parents: node ", v, " is child ", child[v],
                                                     " (0-based, by increasing id) of node ", p,
                                                     "; max_children is ", max_children));
    }
  }
  return child;
}

}  // namespace

absl::StatusOr<std::vector<float>> ComputeTreeEncoding(const TreeSpec& spec,
                                                       const GraphLimits& limits) {
  RETURN_IF_ERROR(ValidateTreeFields(spec, limits));
  const int64_t n = spec.num_nodes;
  RETURN_IF_ERROR(CheckParents(spec.parents));
  ASSIGN_OR_RETURN(const std::vector<int32_t> depth, Depths(spec.parents));
  ASSIGN_OR_RETURN(const std::vector<int32_t> child, ChildIndices(spec.parents, spec.max_children));
  const int64_t dim = spec.table ? spec.table_dim : 1;
  int64_t steps = 0;
  for (int32_t d : depth) steps += std::min(d, spec.max_depth);
  if (steps > limits.max_work / dim) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the tree encoding would take ", steps, " steps of ", dim,
                     " features (the sum of min(depth, max_depth) over nodes); this server allows ",
                     limits.max_work, " in all"));
  }
  const int64_t width =
      spec.table ? spec.table_dim : int64_t{spec.max_depth} * int64_t{spec.max_children};
  std::vector<float> out(static_cast<size_t>(n * width), 0.0f);
  std::vector<double> sum(static_cast<size_t>(dim));
  for (int64_t v = 0; v < n; ++v) {  // node
    const int32_t kept = std::min(depth[v], spec.max_depth);
    float* row = out.data() + v * width;
    std::fill(sum.begin(), sum.end(), 0.0);
    int64_t u = v;
    double weight = 1.0;                  // depth_decay^l
    for (int32_t l = 0; l < kept; ++l) {  // step, the node's own first
      const int32_t c = child[u];
      if (spec.table == nullptr) {
        row[int64_t{l} * spec.max_children + c] = static_cast<float>(weight);
      } else {
        const float* t = spec.table + int64_t{c} * dim;
        for (int64_t f = 0; f < dim; ++f) sum[f] += weight * static_cast<double>(t[f]);
      }
      u = spec.parents[u];
      weight *= spec.depth_decay;
    }
    if (spec.table != nullptr) {
      for (int64_t f = 0; f < dim; ++f) row[f] = static_cast<float>(sum[f]);
    }
  }
  RETURN_IF_ERROR(CheckRowsFinite(out, "depth_decay and table"));
  return out;
}

}  // namespace posenc
