// An HTTP/1.1 server on Boost.Beast and Asio (OpenSSL for TLS and mutual TLS), the transport
// of the Open Inference Protocol's REST binding (http_server.h) and of /metrics. A
// connection is a small object driven by its own timers on one or two I/O threads, never a
// thread of its own, so idle and slow connections cost a few KiB each:
//
//   - a new connection must deliver a request's headers within header_timeout (the TLS
//     handshake included); between requests it may stay idle for idle_timeout, and then
//     the headers must again arrive within header_timeout of its first byte;
//   - a body must arrive within body_timeout of its headers, and an answer must be taken
//     by the client within write_timeout;
//   - one request per connection at a time: the next is not read before the answer is
//     written, so a client pipelining without reading holds one request, not many;
//   - a body is refused from its declared Content-Length alone (413) when over
//     max_body_bytes, and otherwise held only as its bytes arrive: every step of its
//     buffer is granted by the UploadBudget first (429 when busy, 413 when it can never
//     fit), so an upload that stalls holds what it sent and no call slot;
//   - every refusal is answered with `Connection: close` and the connection closed,
//     without reading what the client still sends.
//
// Thread-safe. The handler runs on the I/O threads and must not block: long work goes to
// other threads, which answer through the HttpRespond they were given.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace posenc {

// Grants the bytes of uploads in progress, step by step as they arrive. Thread-safe.
class UploadBudget {
 public:
  // Bytes granted to one upload, given back when destroyed.
  class Grant {
   public:
    virtual ~Grant() = default;
  };
  virtual ~UploadBudget() = default;
  // `bytes` more for an upload that already holds `held`: the grant, or RESOURCE_EXHAUSTED.
  virtual absl::StatusOr<std::unique_ptr<Grant>> Take(uint64_t bytes, uint64_t held) = 0;
  // Whether a refusal from Take may succeed later (429 with Retry-After) or never (413).
  virtual bool Retryable(const absl::Status& refusal) const = 0;
  // The most one upload can ever be granted (a larger declared body is refused at once).
  virtual uint64_t capacity() const = 0;
};

struct HttpCoreOptions {
  std::string listen;                  // host:port, [v6-address]:port; port 0 picks one
  std::string flag = "--http_listen";  // the flag `listen` came from, for errors
  std::string tls_cert, tls_key;       // PEM files; both set: every connection is TLS
  std::string tls_client_ca;           // PEM file: client certificates are required (mTLS)
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_header_bytes = size_t{16} << 10;  // request line and header fields
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  int io_threads = 2;
  // Grants body bytes; null: bodies up to max_body_bytes need no grant.
  UploadBudget* uploads = nullptr;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent
  std::string path;    // the target's path, percent-decoded, without its query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;
  // Set by HttpHandler::Screen to read the body in two buffers: its first body_split bytes
  // into `body`, the rest into `body_tail` (a buffer of its own, which the handler can then
  // take, e.g. as a tensor, without a copy). The default: all of it into `body`.
  size_t body_split = std::numeric_limits<size_t>::max();
  std::string body_tail;
  std::vector<std::unique_ptr<UploadBudget::Grant>> grants;  // what `body` and its tail hold
  std::string peer;                                          // "127.0.0.1:41234", "[::1]:41234"
  bool tls = false;
  // Set by HttpHandler::Screen; the core keeps a copy until the answer is written.
  std::shared_ptr<void> state;

  // The first value of header `lower_name`, or null.
  const std::string* Header(absl::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no Content-Type
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::vector<absl::string_view> more;  // written after `body`; views into `keep`
  std::shared_ptr<void> keep;           // held until the answer is written
  bool close = false;                   // close the connection after it
};

// Answers one request, exactly once, from any thread.
using HttpRespond = absl::AnyInvocable<void(HttpResponse) &&>;

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // At the request's head, before its body is read (request.body is empty): an answer
  // here is sent, the connection closes and Handle is not called. May set request.state.
  virtual std::optional<HttpResponse> Screen(HttpRequest& request) = 0;
  // The whole request. Runs on an I/O thread: must not block.
  virtual void Handle(HttpRequest request, HttpRespond respond) = 0;
};

class HttpCore {
 public:
  // Binds and starts serving. UNAVAILABLE "port N on ADDR is in use (--flag)" for a busy
  // port; INVALID_ARGUMENT naming the flag for a bad address or TLS file.
  // REQUIRES: `handler` outlives the core.
  static absl::StatusOr<std::unique_ptr<HttpCore>> Start(const HttpCoreOptions& options,
                                                         HttpHandler& handler);
  ~HttpCore();

  int port() const;
  // "0.0.0.0:8000", "[::1]:8000".
  const std::string& address() const;

  // Connections waiting for a next request close; every answer from now on closes its
  // connection. Requests already read go on.
  void StartDrain();
  // Closes every connection and joins the I/O threads. Answers given after it are dropped.
  void Stop();

  // Open connections now.
  size_t connections() const;

  struct Impl;  // the connections' shared state (http_core.cc)

 private:
  explicit HttpCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of an HTTP status ("Not Found").
absl::string_view HttpReason(int status);

// Raises RLIMIT_NOFILE's soft limit to its hard limit, so the number of open connections is
// bounded by what the system allows this process; returns the soft limit now.
uint64_t RaiseOpenFileLimit();

}  // namespace posenc
