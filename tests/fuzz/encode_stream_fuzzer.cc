// EncodeStream: the bytes are up to kMaxMessages EncodeRequests separated by kSeparator,
// each run through the same RequestHandlers in order (the stream shares its table cache).
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_state.h"
#include "tests/fuzz/proto_mutator.h"

namespace {
constexpr int kMaxMessages = 8;
// Four bytes that a seed's messages do not contain; make_seeds writes the same.
constexpr absl::string_view kSeparator("\xff\xfe\xfd\xfc", 4);
}  // namespace

// Mutates one message of the stream as the single-message targets do; now and then
// repeats one message at the end instead.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned seed) {
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data), size), kSeparator);
  const size_t i = seed % parts.size();
  if (seed % 8 == 0 && parts.size() < kMaxMessages) {
    parts.push_back(parts[i]);
  } else {
    const size_t room = max_size - (size - parts[i].size());
    if (room == 0) return LLVMFuzzerMutate(data, size, max_size);
    std::string part = parts[i];
    part.resize(room);
    part.resize(posenc::fuzz::MutateProto<posenc::v1::EncodeRequest>(
        reinterpret_cast<uint8_t*>(part.data()), parts[i].size(), room, seed));
    parts[i] = std::move(part);
  }
  const std::string joined = absl::StrJoin(parts, kSeparator);
  if (joined.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, joined.data(), joined.size());
  return joined.size();
}

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
