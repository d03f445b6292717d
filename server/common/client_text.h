// Bounds what a client wrote (a request id, a tensor or region name) before it is echoed into
// an error message or a log line: a 1 MiB request id must not become a 1 MiB grpc-message
// header (which clients then refuse as oversized metadata) or a 1 MiB log line.
// Header-only; pure functions.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace posenc {

// The most bytes of one client string an error message or log line repeats.
inline constexpr size_t kMaxEchoedBytes = 256;
// The most bytes of a whole error message sent to a client.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// `text` when it fits in `max` bytes; otherwise its start and end around
// "...[N bytes]..." so that the result has at most `max` + 24 bytes.
inline std::string Elide(absl::string_view text, size_t max = kMaxEchoedBytes) {
  if (text.size() <= max) return std::string(text);
  const size_t head = max * 3 / 4;
  const size_t tail = max - head;
  return absl::StrCat(text.substr(0, head), "...[", text.size(), " bytes]...",
                      text.substr(text.size() - tail));
}

}  // namespace posenc
