// The HTTP/1.1 request framing (server/http/http_framing.h) over raw bytes, the way a
// connection of http_core.cc reads: a fresh parser per request, the head checked before its
// body is read, the body granted by an UploadBudget as its bytes arrive, and a failure turned
// into its answer. Pipelined requests follow one another in the same input.
//
// Layout: byte 0 sets the size of the pieces the bytes arrive in (1 to 128); byte 1 the
// budget's capacity in KiB (0: no budget) and, in its top bit, whether its refusals are
// retryable; the rest is what the client sends.
//
// Checked: the budget never grants more than its capacity, a body (in one part or, read
// apart at a split, in two) never holds more than its grants plus one step and never more
// than the body limit, and every answer to a request that could not be read is a 4xx that
// closes the connection.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "boost/asio/buffer.hpp"
#include "boost/beast/http/error.hpp"
#include "server/http/http_framing.h"

namespace {

// A budget of `capacity` bytes in all, refusing (retryably or not) what does not fit.
class FuzzBudget : public posenc::UploadBudget {
 public:
  FuzzBudget(uint64_t capacity, bool retryable) : capacity_(capacity), retryable_(retryable) {}

  absl::StatusOr<std::unique_ptr<Grant>> Take(uint64_t bytes, uint64_t) override {
    if (bytes > capacity_ - taken_) return absl::ResourceExhaustedError("upload budget is spent");
    taken_ += bytes;
    return std::unique_ptr<Grant>(new Held(*this, bytes));
  }
  bool Retryable(const absl::Status&) const override { return retryable_; }
  uint64_t capacity() const override { return capacity_; }
  uint64_t taken() const { return taken_; }

 private:
  class Held : public Grant {
   public:
    Held(FuzzBudget& budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    ~Held() override { budget_.taken_ -= bytes_; }

   private:
    FuzzBudget& budget_;
    const uint64_t bytes_;
  };

  const uint64_t capacity_;
  const bool retryable_;
  uint64_t taken_ = 0;
};

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Reads one request from `input` (consumed as it is parsed): false when the connection ends
// (an error answered or not, or the input ran out).
bool ReadOneRequest(std::string& input, size_t piece, const posenc::FramingLimits& limits,
                    const FuzzBudget* budget) {
  posenc::UploadAccount account(limits.uploads);
  posenc::RequestParser parser;
  posenc::ConfigureParser(parser, limits, account);
  bool header_done = false;
  boost::beast::error_code ec;
  size_t window = piece;  // the bytes offered next: what is unconsumed plus one more piece
  for (int step = 0; !parser.is_done(); ++step) {
    if (step == 1 << 16) return false;  // each step takes a byte or more: not reached
    const size_t n = std::min(window, input.size());
    if (n == 0) return false;  // the client stopped sending
    const size_t used = parser.put(boost::asio::buffer(input.data(), n), ec);
    input.erase(0, used);
    if (ec == boost::beast::http::error::need_more) {
      ec = {};
      if (used == 0 && n == input.size()) return false;  // all of it offered, none taken
    }
    window = n - used + piece;
    if (ec) break;
    if (parser.is_header_done() && !header_done) {
      header_done = true;
      (void)posenc::HeadOf(parser);
      if (std::optional<posenc::HttpResponse> refused = posenc::CheckHead(parser, limits)) {
        Check(refused->status >= 400 && refused->status < 500 && refused->close);
        return false;
      }
      // Every other piece size reads the body in two parts (HttpRequest::body_split).
      if (piece % 2 == 1) parser.get().body().split = piece * 7;
    }
    const posenc::UploadBody::value_type& body = parser.get().body();
    const size_t received = body.data.size() + body.tail.size();
    Check(received <= limits.max_body_bytes);
    Check(body.data.size() <= body.split && (body.tail.empty() || body.data.size() == body.split));
    if (budget != nullptr) {
      Check(budget->taken() <= budget->capacity());
      Check(received <= account.granted());
    }
  }
  if (ec) {
    if (std::optional<posenc::HttpResponse> answer =
            posenc::FailureOf(ec, account, header_done, limits)) {
      Check(answer->status >= 400 && answer->status < 500 && answer->close);
    }
    return false;
  }
  return parser.keep_alive();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return -1;
  const size_t piece = 1 + data[0] % 128;
  const uint64_t capacity_kib = data[1] & 0x7f;
  std::optional<FuzzBudget> budget;
  if (capacity_kib != 0) budget.emplace(capacity_kib << 10, (data[1] & 0x80) != 0);

  posenc::FramingLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 4 << 10;
  limits.uploads = budget ? &*budget : nullptr;
  std::string input(reinterpret_cast<const char*>(data) + 2, size - 2);
  for (int request = 0; request < 64 && !input.empty(); ++request) {
    if (!ReadOneRequest(input, piece, limits, budget ? &*budget : nullptr)) break;
  }
  if (budget) Check(budget->taken() == 0);  // every grant given back with its request
  return 0;
}
