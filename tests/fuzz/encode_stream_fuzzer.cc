// EncodeStream: the bytes are up to kMaxMessages EncodeRequests separated by kSeparator,
// each run through the same RequestHandlers in order (the stream shares its table cache).
#include <cstring>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_state.h"

namespace {
constexpr int kMaxMessages = 8;
// Four bytes that a seed's messages do not contain; make_seeds writes the same.
constexpr absl::string_view kSeparator("\xff\xfe\xfd\xfc", 4);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  int count = 0;
  for (absl::string_view message : absl::StrSplit(bytes, kSeparator)) {
    if (++count > kMaxMessages) break;
    posenc::v1::EncodeRequest request;
    // An unparseable message ends the stream, as gRPC would.
    if (!request.ParseFromArray(message.data(), static_cast<int>(message.size()))) break;
    posenc::fuzz::RunEncode(request);
  }
  return 0;
}
