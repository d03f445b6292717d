#include "server/schemes/graph_scheme.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

const char* EncodingName(GraphEncodingKind e) {
  switch (e) {
    case GraphEncodingKind::kLaplacian: return "LAPLACIAN";
    case GraphEncodingKind::kRandomWalk: return "RANDOM_WALK";
    case GraphEncodingKind::kShortestPath: return "SHORTEST_PATH";
    case GraphEncodingKind::kTree: return "TREE";
  }
  return "?";
}

// A field that belongs to another encoding is a mistake the client should hear about.
absl::Status CheckFieldsBelong(const GraphRequestSpec& s) {
  const GraphEncodingKind e = s.encoding;
  struct Field {
    const char* name;
    bool set;
    GraphEncodingKind owner;
  };
  const Field fields[] = {
      {"k", s.graph.k != 0, GraphEncodingKind::kLaplacian},
      {"normalized", s.graph.normalized, GraphEncodingKind::kLaplacian},
      {"walk_length", s.walk_length != 0, GraphEncodingKind::kRandomWalk},
      {"anchors", !s.anchors.empty(), GraphEncodingKind::kShortestPath},
      {"parents", !s.parents.empty(), GraphEncodingKind::kTree},
      {"max_depth", s.max_depth != 0, GraphEncodingKind::kTree},
      {"max_children", s.max_children != 0, GraphEncodingKind::kTree},
      {"table", !s.tree_table.empty(), GraphEncodingKind::kTree},
      {"depth_decay", s.depth_decay.has_value(), GraphEncodingKind::kTree},
  };
  for (const Field& f : fields) {
    if (f.set && f.owner != e) {
      return absl::InvalidArgumentError(absl::StrCat(f.name, " is set; only encoding ",
                                                     EncodingName(f.owner), " takes it (this is ",
                                                     EncodingName(e), ")"));
    }
  }
  if (e == GraphEncodingKind::kTree && !s.graph.edges.empty()) {
    return absl::InvalidArgumentError(
        "edges is set; encoding TREE takes the tree as parents and edges must be empty");
  }
  return absl::OkStatus();
}

absl::Status CheckInput(int64_t num_nodes, int64_t width, const ConstTensorView& input,
                        const SchemeLimits& limits) {
  if (!IsFloat(input.dtype) || input.shape.size() != 2 || input.shape[0] != num_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input is ", ShapeString(input.shape), " ", DTypeName(input.dtype),
        "; GraphEncode needs [num_nodes (", num_nodes, "), d] FLOAT32, FLOAT16 or BFLOAT16"));
  }
  // d <= 2^40 (a checked shape) and width < 2^40, so d + width cannot overflow.
  return SizeWithin({num_nodes, input.shape[1] + std::max<int64_t>(width, 0),
                     static_cast<int64_t>(DTypeSize(input.dtype))},
                    static_cast<int64_t>(limits.max_output_bytes), "the output",
                    "--max_message_bytes")
      .status();
}

// [n, d + w] in the input's dtype: each row is the input row, then the encoding's w values.
std::string Concatenate(const ConstTensorView& input, const float* encoding, int64_t w) {
  const int64_t n = input.shape[0], d = input.shape[1];
  const size_t elem = DTypeSize(input.dtype);
  std::string out(static_cast<size_t>(n * (d + w)) * elem, '\0');
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(out.data() + r * (d + w) * elem,
                static_cast<const char*>(input.data) + r * d * elem, d * elem);
    FromFloat32(encoding + r * w, input.dtype, out.data() + (r * (d + w) + d) * elem,
                static_cast<size_t>(w));
  }
  return out;
}

template <typename T>
void SetData(const std::vector<T>& values, GraphResult& result) {
  result.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// The encoding's width before anything is solved, for the input check (0 when a field is
// out of range: the solver's own check then names it).
int64_t WidthOf(const GraphRequestSpec& s, const Table* tree_table) {
  switch (s.encoding) {
    case GraphEncodingKind::kLaplacian: return s.graph.k;
    case GraphEncodingKind::kRandomWalk: return s.walk_length;
    case GraphEncodingKind::kShortestPath: return static_cast<int64_t>(s.anchors.size());
    case GraphEncodingKind::kTree:
      if (tree_table) return tree_table->cols;
      return s.max_depth > 0 && s.max_children > 0 ? int64_t{s.max_depth} * s.max_children : 0;
  }
  return 0;
}

absl::StatusOr<const Table*> FindTreeTable(const GraphRequestSpec& s, const NamedTables& tables) {
  if (s.encoding != GraphEncodingKind::kTree || s.tree_table.empty()) return nullptr;
  const NamedTable* named = tables.Find(s.tree_table);
  if (!named) {
    return absl::NotFoundError(
        absl::StrCat("table '", s.tree_table, "' is not loaded (see ListSchemes)"));
  }
  const Table* t = named->table.get();
  if (t->rows != s.max_children) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", s.tree_table, "' is [", t->rows, ", ", t->cols,
                     "]; a tree table must be [max_children (", s.max_children, "), d]"));
  }
  return t;
}

// The tree encoding of `spec`, summing rows of `tree_table` when it is set.
absl::StatusOr<std::vector<float>> TreeEncoding(const GraphRequestSpec& spec,
                                                const Table* tree_table,
                                                const GraphLimits& graph_limits) {
  TreeSpec tree{spec.graph.num_nodes, spec.parents, spec.max_depth, spec.max_children,
                spec.depth_decay.value_or(1.0)};
  if (tree_table) {
    tree.table = tree_table->data.data();
    tree.table_dim = tree_table->cols;
  }
  return ComputeTreeEncoding(tree, graph_limits);
}

}  // namespace

absl::StatusOr<GraphResult> ApplyGraph(const GraphRequestSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits, const NamedTables& tables,
                                       GraphLimits graph_limits, const CancelCheck& cancelled) {
  RETURN_IF_ERROR(CheckFieldsBelong(spec));
  ASSIGN_OR_RETURN(const Table* tree_table, FindTreeTable(spec, tables));
  const int64_t n = spec.graph.num_nodes;
  if (input) RETURN_IF_ERROR(CheckInput(n, WidthOf(spec, tree_table), *input, limits));
  graph_limits.max_output_elements = static_cast<int64_t>(limits.max_output_bytes / 4);

  GraphResult result;
  std::vector<float> encoding;  // [n, width] float32 (all but SHORTEST_PATH without input)
  int64_t width = 0;
  switch (spec.encoding) {
    case GraphEncodingKind::kLaplacian: {
      ASSIGN_OR_RETURN(GraphEncoding lap,
                       ComputeLaplacianEncoding(spec.graph, graph_limits, cancelled));
      result.eigenvalues = std::move(lap.eigenvalues);
      encoding = std::move(lap.vectors);
      width = lap.k;
      break;
    }
    case GraphEncodingKind::kRandomWalk: {
      const RandomWalkSpec walk{n, spec.graph.edges, spec.walk_length};
      ASSIGN_OR_RETURN(encoding, ComputeRandomWalkEncoding(walk, graph_limits, cancelled));
      width = spec.walk_length;
      break;
    }
    case GraphEncodingKind::kShortestPath: {
      const ShortestPathSpec paths{n, spec.graph.edges, spec.anchors};
      ASSIGN_OR_RETURN(const std::vector<int32_t> hops,
                       ComputeShortestPathEncoding(paths, graph_limits, cancelled));
      width = static_cast<int64_t>(spec.anchors.size());
      if (!input) {
        result.shape = {n, width};
        result.dtype = DType::kInt32;
        SetData(hops, result);
        return result;
      }
      encoding.assign(hops.begin(), hops.end());
      break;
    }
    case GraphEncodingKind::kTree: {
      ASSIGN_OR_RETURN(encoding, TreeEncoding(spec, tree_table, graph_limits));
      width = WidthOf(spec, tree_table);
      break;
    }
  }
  if (!input) {
    result.shape = {n, width};
    SetData(encoding, result);
    return result;
  }
  result.shape = {n, input->shape[1] + width};
  result.dtype = input->dtype;
  result.data = Concatenate(*input, encoding.data(), width);
  return result;
}

absl::StatusOr<GraphResult> ApplyGraph(const GraphSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits, GraphLimits graph_limits,
                                       const CancelCheck& cancelled) {
  GraphRequestSpec request;
  request.graph = spec;
  return ApplyGraph(request, input, limits, NamedTables(), graph_limits, cancelled);
}

}  // namespace posenc
