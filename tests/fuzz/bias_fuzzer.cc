// AttentionBias: the bytes are one BiasRequest (ALiBi, T5, Shaw or DeBERTa, with or without
// scores and a query).
#include "tests/fuzz/fuzz_state.h"
#include "tests/fuzz/proto_mutator.h"

POSENC_FUZZ_PROTO_MUTATOR(posenc::v1::BiasRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  posenc::v1::BiasRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  const std::string id = request.request_id();
  posenc::v1::BiasResponse response;
  posenc::SchemeLabel scheme = posenc::kNoScheme;
  const auto ticket = posenc::fuzz::Admit(posenc::CostOf(request));
  if (!ticket) return 0;
  const absl::Status status = posenc::fuzz::Handlers().AttentionBias(request, response, &scheme);
  posenc::fuzz::CheckStatus(status, "AttentionBias");
  if (response.request_id() != id) __builtin_trap();
  if (status.ok()) posenc::fuzz::CheckTensor(response.output(), "AttentionBias output");
  return 0;
}
