// The request framing of http_core.h: the Beast parser a connection reads with, the body
// type that takes its bytes only as the UploadBudget grants them, the checks of a request's
// head before its body is read, and the answer to a request that could not be read. No
// sockets: tests/fuzz/http_request_fuzzer.cc drives it with raw bytes.
// Not thread-safe (one connection's).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "boost/asio/buffer.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/parser.hpp"
#include "server/http/http_core.h"

namespace posenc {

// The body bytes of the request being read on one connection and the grants that hold
// them. Its buffer grows in steps, each granted before it is allocated: a step is at most
// kMaxStep (and at most what the body already holds, below it), so an upload never holds
// more than what it has received plus one step.
class UploadAccount {
 public:
  static constexpr size_t kFirstStep = size_t{64} << 10;
  static constexpr size_t kMaxStep = size_t{4} << 20;

  // `budget` may be null (no grants needed). REQUIRES: it outlives the account.
  explicit UploadAccount(UploadBudget* budget) : budget_(budget) {}

  // Makes room in `data` for `total` bytes (a body read in two strings: `beside` bytes are
  // held in the other, and `data` never grows past `cap`): false (refusal() says why)
  // when refused.
  bool Reserve(std::string& data, size_t total, size_t beside = 0,
               size_t cap = std::numeric_limits<size_t>::max());
  // The grants held for the body just read; the account starts again empty.
  std::vector<std::unique_ptr<UploadBudget::Grant>> TakeGrants();
  const absl::Status& refusal() const { return refusal_; }
  bool retryable() const { return retryable_; }
  uint64_t granted() const { return granted_; }

 private:
  UploadBudget* const budget_;
  uint64_t granted_ = 0;
  std::vector<std::unique_ptr<UploadBudget::Grant>> grants_;
  absl::Status refusal_;
  bool retryable_ = false;
};

// A request body read into a string whose every byte its UploadAccount granted: all of it
// into `data`, or with a `split` its first `split` bytes into `data` and the rest into
// `tail` (HttpRequest::body_split).
struct UploadBody {
  struct value_type {
    std::string data;
    std::string tail;
    size_t split = std::numeric_limits<size_t>::max();
    UploadAccount* account = nullptr;
  };

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      const size_t n = boost::asio::buffer_size(buffers);
      std::string& data = body_.data;
      std::string& tail = body_.tail;
      size_t head = data.size() < body_.split ? std::min(n, body_.split - data.size()) : 0;
      if (!Room(data, head, tail.size(), body_.split) ||
          !Room(tail, n - head, data.size() + head, std::numeric_limits<size_t>::max())) {
        ec = boost::beast::http::error::body_limit;  // the account's refusal says why
        return 0;
      }
      // Appended within the capacity Room made: one copy, no zero-fill before it.
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        const boost::asio::const_buffer piece(*it);
        const char* bytes = static_cast<const char*>(piece.data());
        const size_t to_data = std::min(piece.size(), head);
        data.append(bytes, to_data);
        tail.append(bytes + to_data, piece.size() - to_data);
        head -= to_data;
      }
      ec = {};
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    // Capacity in `s` for `more` bytes (within what the account grants).
    bool Room(std::string& s, size_t more, size_t beside, size_t cap) {
      if (more == 0 || body_.account == nullptr) return true;
      return body_.account->Reserve(s, s.size() + more, beside, cap);
    }

    value_type& body_;
  };
};

using RequestParser = boost::beast::http::request_parser<UploadBody>;

// The limits a request is framed under, and the flags they come from (for the messages).
struct FramingLimits {
  size_t max_header_bytes = size_t{16} << 10;
  size_t max_body_bytes = size_t{64} << 20;
  UploadBudget* uploads = nullptr;
};

// Readies a fresh parser for a request: header limit, no body limit until CheckHead.
void ConfigureParser(RequestParser& parser, const FramingLimits& limits, UploadAccount& account);

// The request's head as the handler sees it (no body yet).
HttpRequest HeadOf(const RequestParser& parser);

// After the head: the refusal to send (413 for a declared length over the limits, 400 for
// a malformed length or an unsupported transfer coding), or nullopt and the parser set to
// refuse a chunked body past the limit.
std::optional<HttpResponse> CheckHead(RequestParser& parser, const FramingLimits& limits);

// The answer to a request that could not be read: `ec` from the parser or the stream,
// `account` the body's (a refused grant), `header_done` whether its head was read. Null
// for a connection that went away or idled out before a request began.
std::optional<HttpResponse> FailureOf(const boost::beast::error_code& ec,
                                      const UploadAccount& account, bool header_done,
                                      const FramingLimits& limits);

// An error answer: status, `{"error": message}`, Connection: close.
HttpResponse ErrorResponse(int status, absl::string_view message);

// Percent-decodes a target's path (without its query); nullopt for a bad escape.
std::optional<std::string> DecodePath(absl::string_view target);

}  // namespace posenc
