// The descriptors of the graph encodings of graph_scheme.h: Laplacian eigenvectors, random
// walks, hop distances to anchors and tree positions (registered in scheme_registry.cc).
#include "server/common/status_macros.h"
#include "server/kernels/threads.h"
#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {
namespace {

const std::vector<std::string> kFloats = {"FP32", "FP16", "BF16"};

// Every graph encoding converts the whole request (so that a field of another encoding is
// refused) and runs the one ApplyGraph.
absl::StatusOr<GraphResult> ApplyGraphRequest(const SchemeEnv& env, const v1::GraphRequest& r,
                                              const std::optional<ConstTensorView>& input,
                                              const CancelCheck& cancelled) {
  static const NamedTables* const kNoTables = new NamedTables;
  return ApplyGraph(GraphFromProto(r), input, env.limits, env.tables ? *env.tables : *kNoTables,
                    env.graph_limits, cancelled);
}

// Scratch each kernel thread of a structural solver holds, per node and per edge-list entry.
struct ThreadScratch {
  int64_t node_bytes = 0;
  int64_t edge_entry_bytes = 0;
};

// The cost of a structural encoding of `width` columns: the float32 encoding, the output (a
// copy when concatenated after `input`) and the response, the adjacency (pairs sorted, then
// CSR) and per-node work arrays (BFS queues, tree depths and child indices), and the
// scratch of every kernel thread the solver may split its work across (KernelThreads(): a
// call's lease may hand it all of them).
absl::StatusOr<SchemeCost> StructuralCost(const v1::GraphRequest& r, int64_t width,
                                          ThreadScratch scratch = {}) {
  const int64_t n = r.num_nodes();
  const int64_t d = r.has_input() ? CostDim(r.input(), -1) : 0;
  const int64_t elem = r.has_input() ? CostElementBytes(r.input().dtype()) : 4;
  const auto entries = static_cast<int64_t>(r.edges_size());
  const CostBytes in(r.input().data().size());
  const CostBytes encoding = CostBytes::Product({n, width, 4});
  const CostBytes out = CostBytes::Product({n, CostSizeSum(d, width), elem});
  const CostBytes per_thread = CostBytes::Product({n, scratch.node_bytes}) +
                               CostBytes::Product({entries, scratch.edge_entry_bytes});
  const CostBytes work = CostBytes::Product({entries, 24}) + CostBytes::Product({n, 64}) +
                         CostBytes::Product({static_cast<int64_t>(r.parents_size()), 8}) +
                         per_thread * CostBytes(static_cast<uint64_t>(KernelThreads()));
  return (in + encoding + out + out + work)
      .Cost("num_nodes, the encoding's width and the input width", /*slow=*/n > kCheapGraphNodes);
}

SchemeDescriptor GraphScheme(const char* name, int encoding) {
  SchemeDescriptor s;
  s.name = name;
  s.family = SchemeFamily::kGraph;
  s.graph_encoding = encoding;
  s.graph = ApplyGraphRequest;
  return s;
}

}  // namespace

SchemeDescriptor GraphLaplacianScheme() {
  SchemeDescriptor s = GraphScheme("graph_laplacian", v1::LAPLACIAN);
  s.graph_cost = [](const v1::GraphRequest& r) {
    const int64_t n = r.num_nodes(), k = std::max(r.k(), 0);
    const int64_t d = r.has_input() ? CostDim(r.input(), -1) : 0;
    const int64_t elem = r.has_input() ? CostElementBytes(r.input().dtype()) : 4;
    const CostBytes in(r.input().data().size());
    const CostBytes out = CostBytes::Product({n, CostSizeSum(d, k), elem});
    // The Lanczos basis (about n * (2k + 34) doubles), the sparse Laplacian and its factor,
    // and the dense solver's n^2 blocks for components of up to 500 nodes.
    const CostBytes solver = CostBytes::Product({n, 2 * k + 34, 8}) +
                             CostBytes::Product({static_cast<int64_t>(r.edges_size()), 48}) +
                             CostBytes::Product({std::min<int64_t>(n, 500), 500, 24});
    return (in + out + out + solver)
        .Cost("num_nodes, k and the input width", /*slow=*/n > kCheapGraphNodes);
  };
  s.model =
      OipModel{{{"edges", {"INT64", "INT32"}, {-1, 2}, false}, {"input", kFloats, {-1, -1}, true}},
               {{"output", {"FP32"}, {-1, -1}, false}, {"eigenvalues", {"FP64"}, {-1}, false}},
               {"num_nodes", "k", "normalized"}};
  return s;
}

SchemeDescriptor GraphRandomWalkScheme() {
  SchemeDescriptor s = GraphScheme("graph_random_walk", v1::RANDOM_WALK);
  // Each kernel thread builds one root's ball at a time, up to the whole graph: its nodes,
  // hops, offsets, 1 / degree, the global-to-local map and two float64 walk vectors (about
  // 44 bytes a node, vectors grown by doubling), and its internal edges (4 bytes an entry).
  s.graph_cost = [](const v1::GraphRequest& r) {
    return StructuralCost(r, std::max(r.walk_length(), 0), {88, 8});
  };
  s.model =
      OipModel{{{"edges", {"INT64", "INT32"}, {-1, 2}, false}, {"input", kFloats, {-1, -1}, true}},
               {{"output", kFloats, {-1, -1}, false}},
               {"num_nodes", "walk_length"}};
  return s;
}

SchemeDescriptor GraphShortestPathScheme() {
  SchemeDescriptor s = GraphScheme("graph_shortest_path", v1::SHORTEST_PATH);
  // Each kernel thread searches blocks of up to 16 anchors into its own [block, n] int32
  // scratch, with a BFS queue of n.
  s.graph_cost = [](const v1::GraphRequest& r) {
    return StructuralCost(r, r.anchors_size(), {4 * (16 + 1), 0});
  };
  // INT32 hop distances; after `input`, numbers in its dtype.
  s.model =
      OipModel{{{"edges", {"INT64", "INT32"}, {-1, 2}, false}, {"input", kFloats, {-1, -1}, true}},
               {{"output", {"INT32", "FP32", "FP16", "BF16"}, {-1, -1}, false}},
               {"num_nodes", "anchors"}};
  return s;
}

SchemeDescriptor TreeScheme() {
  SchemeDescriptor s = GraphScheme("tree", v1::TREE);
  // The one-hot stack is max_depth * max_children wide; a table's width is bounded like a
  // T5 table's heads, by 1024.
  s.graph_cost = [](const v1::GraphRequest& r) {
    const int64_t width = r.table().empty()
                              ? int64_t{std::max(r.max_depth(), 0)} * std::max(r.max_children(), 0)
                              : 1024;
    return StructuralCost(r, width);
  };
  s.model =
      OipModel{{{"parents", {"INT64", "INT32"}, {-1}, false}, {"input", kFloats, {-1, -1}, true}},
               {{"output", kFloats, {-1, -1}, false}},
               {"num_nodes", "max_depth", "max_children", "depth_decay", "config"}};
  return s;
}

}  // namespace posenc
