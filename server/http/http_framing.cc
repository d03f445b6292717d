#include "server/http/http_framing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/http/error.hpp"

namespace posenc {
namespace {

namespace http = boost::beast::http;

// `message` as a JSON string's contents.
std::string JsonEscaped(absl::string_view message) {
  std::string out;
  out.reserve(message.size() + 8);
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      absl::StrAppend(&out, "\\u00", std::string(1, kHex[u >> 4]), std::string(1, kHex[u & 15]));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool UploadAccount::Reserve(std::string& data, size_t total, size_t beside, size_t cap) {
  if (total <= data.capacity() && total + beside <= granted_) return true;
  if (budget_ == nullptr) {
    if (total > data.capacity()) {
      data.reserve(std::min(
          cap, std::max(total, std::min(2 * data.capacity(), data.capacity() + kMaxStep))));
    }
    return true;
  }
  // One step past `total`: what is held already (doubling), between the first and last step;
  // granted for the body as a whole, reserved in `data` up to its cap.
  const size_t held = data.size() + beside;
  const size_t step = std::clamp<size_t>(held, kFirstStep, kMaxStep);
  const size_t want = std::max<size_t>(total + beside, held + step);
  const uint64_t more = want > granted_ ? want - granted_ : 0;
  if (more > 0) {
    absl::StatusOr<std::unique_ptr<UploadBudget::Grant>> grant = budget_->Take(more, granted_);
    if (!grant.ok()) {
      refusal_ = grant.status();
      retryable_ = budget_->Retryable(refusal_);
      return false;
    }
    grants_.push_back(std::move(*grant));
    granted_ += more;
  }
  data.reserve(std::max(total, std::min(cap, want - beside)));
  return true;
}

std::vector<std::unique_ptr<UploadBudget::Grant>> UploadAccount::TakeGrants() {
  std::vector<std::unique_ptr<UploadBudget::Grant>> out = std::move(grants_);
  grants_.clear();
  granted_ = 0;
  refusal_ = absl::OkStatus();
  retryable_ = false;
  return out;
}

void ConfigureParser(RequestParser& parser, const FramingLimits& limits, UploadAccount& account) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(boost::none);  // CheckHead sets it once the head is known
  parser.get().body().account = &account;
}

std::optional<std::string> DecodePath(absl::string_view target) {
  const absl::string_view path = target.substr(0, target.find('?'));
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out.push_back(path[i]);
      continue;
    }
    const int hi = i + 2 < path.size() ? HexValue(path[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(path[i + 2]) : -1;
    if (lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

HttpRequest HeadOf(const RequestParser& parser) {
  const auto& message = parser.get();
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = DecodePath(request.target).value_or(std::string());
  for (const auto& field : message) {
    request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                 std::string(field.value()));
  }
  return request;
}

HttpResponse ErrorResponse(int status, absl::string_view message) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = absl::StrCat("{\"error\":\"", JsonEscaped(message), "\"}");
  response.close = true;
  return response;
}

std::optional<HttpResponse> CheckHead(RequestParser& parser, const FramingLimits& limits) {
  const auto target = parser.get().target();
  if (!DecodePath(absl::string_view(target.data(), target.size())).has_value()) {
    return ErrorResponse(400, "the request target has a malformed percent escape");
  }
  const boost::optional<std::uint64_t> declared = parser.content_length();
  if (declared.has_value() && *declared > limits.max_body_bytes) {
    return ErrorResponse(413, absl::StrCat("the request body is ", *declared,
                                           " bytes; --max_message_bytes allows ",
                                           limits.max_body_bytes));
  }
  if (declared.has_value() && limits.uploads != nullptr && *declared > limits.uploads->capacity()) {
    return ErrorResponse(413, absl::StrCat("the request body is ", *declared,
                                           " bytes; --http_max_upload_bytes allows ",
                                           limits.uploads->capacity()));
  }
  parser.body_limit(limits.max_body_bytes);
  return std::nullopt;
}

std::optional<HttpResponse> FailureOf(const boost::beast::error_code& ec,
                                      const UploadAccount& account, bool header_done,
                                      const FramingLimits& limits) {
  if (!account.refusal().ok()) {
    HttpResponse r = ErrorResponse(account.retryable() ? 429 : 413, account.refusal().message());
    if (account.retryable()) r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  if (ec == http::error::body_limit) {
    return ErrorResponse(413, absl::StrCat("the request body is over --max_message_bytes (",
                                           limits.max_body_bytes, " bytes)"));
  }
  if (ec == http::error::header_limit) {
    return ErrorResponse(431, absl::StrCat("the request line and headers are over ",
                                           limits.max_header_bytes, " bytes"));
  }
  if (ec == boost::beast::error::timeout) {
    if (!header_done) return std::nullopt;  // an idle or slow client: closed, not answered
    return ErrorResponse(
        408, "the request body did not arrive within the read timeout (--http_read_timeout)");
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset ||
      ec == boost::asio::error::operation_aborted) {
    return std::nullopt;  // the client went away
  }
  if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
    return ErrorResponse(400, absl::StrCat("malformed HTTP request: ", ec.message()));
  }
  return std::nullopt;  // a transport error (TLS, reset): nobody to answer
}

}  // namespace posenc
