// The descriptors of the attention biases of bias_scheme.h: alibi and t5 (registered in
// scheme_registry.cc).
#include "server/common/status_macros.h"
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
  s.mutable_bias = [](v1::BiasRequest& r) -> google::protobuf::Message* {
    return r.mutable_alibi();
  };
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
  s.mutable_bias = [](v1::BiasRequest& r) -> google::protobuf::Message* {
    return r.mutable_t5();
  };
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

}  // namespace posenc
