// The descriptors of the attention biases of bias_scheme.h: alibi, t5, shaw and deberta
// (registered in scheme_registry.cc).
#include <algorithm>

#include "server/common/status_macros.h"
#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {
namespace {

// Optional scores in, the bias (or scores + bias) out; the geometry as parameters.
OipModel BiasModel() {
  return OipModel{{{"scores", {"FP32", "FP16", "BF16"}, {-1, -1, -1, -1}, true}},
                  {{"output", {"FP32"}, {-1, -1, -1}, false}},
                  {"config", "query_length", "key_length", "query_offset"}};
}

}  // namespace

SchemeDescriptor AlibiScheme() {
  SchemeDescriptor s;
  s.name = "alibi";
  s.family = SchemeFamily::kBias;
  s.bias_case = v1::BiasRequest::kAlibi;
  s.bias_spec = [](const v1::BiasRequest& r, BiasSpec& spec) -> absl::Status {
    ASSIGN_OR_RETURN(spec.alibi, AlibiFromProto(r.alibi()));
    return absl::OkStatus();
  };
  s.bias_heads = [](const v1::BiasRequest& r) -> int64_t { return r.alibi().num_heads(); };
  s.model = BiasModel();
  return s;
}

SchemeDescriptor T5Scheme() {
  SchemeDescriptor s;
  s.name = "t5";
  s.family = SchemeFamily::kBias;
  s.bias_case = v1::BiasRequest::kT5;
  s.bias_spec = [](const v1::BiasRequest& r, BiasSpec& spec) {
    spec.t5 = T5FromProto(r.t5());
    spec.t5_table = r.t5().table();
    return absl::OkStatus();
  };
  // The head count comes from the table; 1024 heads bounds any sane table. Without a
  // table the output is one [q, k] plane of bucket ids.
  s.bias_heads = [](const v1::BiasRequest& r) -> int64_t {
    return r.t5().table().empty() ? 1 : 1024;
  };
  s.model = BiasModel();
  return s;
}

SchemeDescriptor ShawScheme() {
  SchemeDescriptor s;
  s.name = "shaw";
  s.family = SchemeFamily::kBias;
  s.bias_case = v1::BiasRequest::kShaw;
  s.bias_spec = [](const v1::BiasRequest& r, BiasSpec& spec) {
    spec.shaw = ShawSpec{r.shaw().max_relative_position()};
    spec.shaw_table = r.shaw().table();
    return absl::OkStatus();
  };
  // Without a table one [q, k] plane of indices; with one the embeddings [q, k, d], d
  // bounded like a T5 table's heads by 1024. (The query term's size comes from the query.)
  s.bias_heads = [](const v1::BiasRequest& r) -> int64_t {
    return r.shaw().table().empty() ? 1 : 1024;
  };
  // The query term: one dot product of d per (query row, table row it reaches), at most
  // min(2k + 1, key_length) per row, counted as 4 bytes per 16 multiply-adds.
  s.bias_work = [](const v1::BiasRequest& r) -> absl::StatusOr<SchemeCost> {
    if (!r.has_query()) return SchemeCost{};
    const int64_t reach = std::min<int64_t>(
        2 * int64_t{std::max(r.shaw().max_relative_position(), 0)} + 1, r.key_length());
    return CostBytes::Product({CostDim(r.query(), 0), CostDim(r.query(), 1), CostDim(r.query(), 2),
                               reach, CostDim(r.query(), 3) / 16 + 1, 4})
        .Cost("query.shape and shaw.max_relative_position");
  };
  // INT32 indices [q, k], FP32 embeddings [q, k, d], or the query term [b, h, q, k] in the
  // scores' (or the query's) dtype.
  s.model = OipModel{{{"scores", {"FP32", "FP16", "BF16"}, {-1, -1, -1, -1}, true},
                      {"query", {"FP32", "FP16", "BF16"}, {-1, -1, -1, -1}, true}},
                     {{"output", {"INT32", "FP32", "FP16", "BF16"}, {-1, -1, -1, -1}, false}},
                     {"config", "query_length", "key_length", "query_offset"}};
  return s;
}

SchemeDescriptor DebertaScheme() {
  SchemeDescriptor s;
  s.name = "deberta";
  s.family = SchemeFamily::kBias;
  s.bias_case = v1::BiasRequest::kDeberta;
  s.bias_spec = [](const v1::BiasRequest& r, BiasSpec& spec) {
    spec.deberta = DebertaFromProto(r.deberta());
    // HF's build_relative_position starts the queries at 0 whatever the lengths; the
    // decode convention (key_length - query_length) of the other biases does not apply.
    if (!r.has_query_offset()) spec.geom.query_offset = 0;
    return absl::OkStatus();
  };
  s.bias_heads = [](const v1::BiasRequest&) -> int64_t { return 1; };  // INT32 [q, k]
  // `scores` is listed as every bias model's is; DeBERTa's INT32 positions are not added to
  // scores, so sending them is INVALID_ARGUMENT.
  s.model = OipModel{{{"scores", {"FP32", "FP16", "BF16"}, {-1, -1, -1, -1}, true}},
                     {{"output", {"INT32"}, {-1, -1}, false}},
                     {"config", "query_length", "key_length", "query_offset"}};
  return s;
}

}  // namespace posenc
