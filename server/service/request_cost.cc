#include "server/service/request_cost.h"

#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_registry.h"
#include "server/service/inference_convert.h"

namespace posenc {
namespace {

bool IsSetRef(const v1::SharedMemoryRef& ref) { return !ref.region().empty(); }

absl::StatusOr<CallCost> ToCallCost(const absl::StatusOr<SchemeCost>& cost) {
  if (!cost.ok()) return cost.status();
  return CallCost{cost->bytes,
                  !cost->slow && cost->bytes <= kCheapCallBytes ? Lane::kCheap : Lane::kBulk};
}

// Tensors by shared-memory reference cost the server no memory, but their size is work:
// a large one goes to the bulk lane. An encode or bias whose bytes and shared-memory bytes
// are small runs inline.
absl::StatusOr<CallCost> WithShmWork(absl::StatusOr<CallCost> cost, uint64_t shm_bytes) {
  if (!cost.ok()) return cost;
  if (shm_bytes > kCheapCallBytes) cost->lane = Lane::kBulk;
  cost->run_inline = cost->lane == Lane::kCheap && shm_bytes <= kInlineCallBytes &&
                     cost->bytes <= kInlineCallBytes - shm_bytes;
  return cost;
}

}  // namespace

absl::StatusOr<CallCost> CostOf(const v1::EncodeRequest& r) {
  const SchemeDescriptor* scheme = SchemeOf(r);
  absl::StatusOr<SchemeCost> cost;
  if (scheme != nullptr && scheme->encode_cost != nullptr) {
    cost = scheme->encode_cost(r);
  } else {  // refused by the handler; what it holds until then
    const CostBytes in = EncodeInBytes(r);
    cost = (in + in + CostBytes::Product({CostRows(r.input()), CostDim(r.input(), -1), 4}))
               .Cost("input.shape");
  }
  return WithShmWork(ToCallCost(cost), r.input().shm().byte_size() + r.key().shm().byte_size());
}

absl::StatusOr<CallCost> CostOf(const v1::BiasRequest& r) {
  const SchemeDescriptor* scheme = SchemeOf(r);
  SchemeCost work;
  if (scheme != nullptr && scheme->bias_work != nullptr) {
    absl::StatusOr<SchemeCost> w = scheme->bias_work(r);
    if (!w.ok()) return w.status();
    work = *w;
  }
  // A query (Shaw's) is read where it lies; inline it came with the request.
  const CostBytes query = CostBytes(r.query().data().size()) + CostBytes(work.bytes);
  const uint64_t shm_in = r.scores().shm().byte_size() + r.query().shm().byte_size();
  if (r.has_scores()) {
    const CostBytes in(r.scores().data().size());
    return WithShmWork(ToCallCost((in + in + query).Cost("scores", work.slow)), shm_in);
  }
  const int64_t heads =
      scheme != nullptr && scheme->bias_heads != nullptr ? scheme->bias_heads(r) : 1;
  // With a query the output is [batch, heads, q, k] in its dtype.
  const CostBytes out =
      r.has_query()
          ? CostBytes::Product({CostDim(r.query(), 0), CostDim(r.query(), 1), r.query_length(),
                                r.key_length(), CostElementBytes(r.query().dtype())})
          : CostBytes::Product({heads, r.query_length(), r.key_length(), 4});
  if (IsSetRef(r.output_shm())) {  // built straight into the client's slice
    return WithShmWork(ToCallCost(query.Cost("the bias", work.slow)),
                       r.output_shm().byte_size() + shm_in);
  }
  return WithShmWork(
      ToCallCost((out + out + query).Cost("the bias [heads, query_length, key_length]", work.slow)),
      shm_in);
}

absl::StatusOr<CallCost> CostOf(const v1::GraphRequest& r) {
  const SchemeDescriptor* scheme = SchemeOf(r);
  if (scheme != nullptr && scheme->graph_cost != nullptr) return ToCallCost(scheme->graph_cost(r));
  return ToCallCost(CostBytes(r.input().data().size()).Cost("input"));  // refused later
}

absl::StatusOr<CallCost> CostOf(const v1::TableRequest& r, int64_t rows_per_chunk) {
  const int64_t elem = r.dtype() == v1::FLOAT16 || r.dtype() == v1::BFLOAT16 ? 2 : 4;
  const CostBytes rows = CostBytes::Product({rows_per_chunk, r.dim(), 4});  // float32 rows
  const CostBytes chunk = CostBytes::Product({rows_per_chunk, r.dim(), elem});
  return ToCallCost((rows + chunk + chunk).Cost("rows_per_chunk x dim"));
}

CallCost PlacementOf(const inference::ModelInferRequest& r) {
  const size_t size = r.ByteSizeLong();
  const SchemeDescriptor* scheme = FindScheme(r.model_name());
  CallCost placement;
  if (scheme != nullptr && scheme->family == SchemeFamily::kGraph) {
    // A parameter that does not parse fails in the conversion; its lane does not matter.
    absl::StatusOr<std::optional<int64_t>> nodes = IntParam(r.parameters(), "num_nodes");
    const bool big = nodes.ok() && nodes->value_or(0) > kCheapGraphNodes;
    placement.lane = big || size > kCheapCallBytes ? Lane::kBulk : Lane::kCheap;
    return placement;
  }
  placement.lane = size > kCheapCallBytes ? Lane::kBulk : Lane::kCheap;
  placement.run_inline = size <= kInlineCallBytes / 3;
  for (const auto& input : r.inputs()) {
    if (input.parameters().count("shared_memory_region") > 0) placement.run_inline = false;
  }
  return placement;
}

}  // namespace posenc
