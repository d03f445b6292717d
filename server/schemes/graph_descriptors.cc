// The descriptor of the graph Laplacian encoding (graph_scheme.h), registered in
// scheme_registry.cc.
#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {

SchemeDescriptor GraphLaplacianScheme() {
  SchemeDescriptor s;
  s.name = "graph_laplacian";
  s.family = SchemeFamily::kGraph;
  s.graph_encoding = v1::LAPLACIAN;
  s.graph = [](const SchemeEnv& env, const v1::GraphRequest& r,
               const std::optional<ConstTensorView>& input, const CancelCheck& cancelled) {
    return ApplyGraph(GraphFromProto(r), input, env.limits, env.graph_limits, cancelled);
  };
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
  s.model = OipModel{{{"edges", {"INT64", "INT32"}, {-1, 2}, false},
                      {"input", {"FP32", "FP16", "BF16"}, {-1, -1}, true}},
                     {{"output", {"FP32"}, {-1, -1}, false},
                      {"eigenvalues", {"FP64"}, {-1}, false}},
                     {"num_nodes", "k", "normalized"}};
  return s;
}

}  // namespace posenc
