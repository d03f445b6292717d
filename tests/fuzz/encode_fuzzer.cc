// Encode: the bytes are one EncodeRequest, run through RequestHandlers::Encode.
#include "tests/fuzz/fuzz_state.h"
#include "tests/fuzz/proto_mutator.h"

POSENC_FUZZ_PROTO_MUTATOR(posenc::v1::EncodeRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  posenc::v1::EncodeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;  // not in the corpus
  posenc::fuzz::RunEncode(request);
  return 0;
}
