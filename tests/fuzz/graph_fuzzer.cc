// GraphEncode: the bytes are one GraphRequest (any encoding: edges or parents, its fields,
// optional node features).
#include "tests/fuzz/fuzz_state.h"
#include "tests/fuzz/proto_mutator.h"

POSENC_FUZZ_PROTO_MUTATOR(posenc::v1::GraphRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  posenc::v1::GraphRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  const std::string id = request.request_id();
  posenc::v1::GraphResponse response;
  const auto ticket = posenc::fuzz::Admit(posenc::CostOf(request));
  if (!ticket) return 0;
  const absl::Status status = posenc::fuzz::Handlers().GraphEncode(request, response);
  posenc::fuzz::CheckStatus(status, "GraphEncode");
  if (response.request_id() != id) __builtin_trap();
  if (status.ok()) posenc::fuzz::CheckTensor(response.output(), "GraphEncode output");
  return 0;
}
