#include "server/http/http_core.h"

#include <openssl/ssl.h>
#include <sys/resource.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/status.hpp"
#include "server/http/http_framing.h"

namespace posenc {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// What a connection reads into: the request line and headers, then the body in pieces on
// their way into the body's own buffer. Its size is the per-connection allowance.
constexpr size_t kReadBufferSlack = size_t{16} << 10;
// How many connections may wait in the kernel to be accepted (capped by somaxconn).
constexpr int kListenBacklog = 65535;
// How long to wait before accepting again when the process is out of descriptors.
constexpr std::chrono::milliseconds kAcceptRetry{50};
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

std::string PeerOf(const tcp::socket& socket) {
  beast::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  const std::string host = peer.address().to_string();
  return peer.address().is_v6() ? absl::StrCat("[", host, "]:", peer.port())
                                : absl::StrCat(host, ":", peer.port());
}

// The status line and headers of `r`, with Content-Length and, when closing, Connection.
std::string HeadText(const HttpResponse& r, bool close) {
  size_t length = r.body.size();
  for (absl::string_view piece : r.more) length += piece.size();
  std::string head = absl::StrCat("HTTP/1.1 ", r.status, " ", HttpReason(r.status), "\r\n");
  if (!r.content_type.empty()) absl::StrAppend(&head, "Content-Type: ", r.content_type, "\r\n");
  absl::StrAppend(&head, "Content-Length: ", length, "\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (close) absl::StrAppend(&head, "Connection: close\r\n");
  head += "\r\n";
  return head;
}

bool WantsContinue(const HttpRequest& request) {
  const std::string* expect = request.Header("expect");
  return expect != nullptr && absl::EqualsIgnoreCase(*expect, "100-continue");
}

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Each posts its work to the session's strand.
  virtual void Drain() = 0;
  virtual void Close() = 0;
};

}  // namespace

struct HttpCore::Impl {
  Impl(const HttpCoreOptions& o, HttpHandler& h)
      : options(o), handler(h), limits{o.max_header_bytes, o.max_body_bytes, o.uploads},
        ioc(std::max(1, o.io_threads)), acceptor(asio::make_strand(ioc)),
        accept_retry(acceptor.get_executor()) {}

  absl::Status SetUpTls();
  absl::Status Bind();
  void Accept();
  void OnAccept(const beast::error_code& ec, tcp::socket socket);
  void Register(const std::shared_ptr<SessionBase>& session);
  void Unregister(SessionBase* session);
  std::vector<std::shared_ptr<SessionBase>> Sessions() const;

  const HttpCoreOptions options;
  HttpHandler& handler;
  const FramingLimits limits;
  // Declared before the io_context: sessions its destructor releases unregister here.
  mutable std::mutex mu;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions;  // guarded by mu
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::optional<ssl::context> tls;
  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> threads;
  std::string address;
  int port = 0;
  std::once_flag stop_once;
};

namespace {

// One connection: reads a request, hands it to the handler, writes the answer, and reads
// the next only then. Lives while an operation of its own or the handler holds it; every
// member is used on its strand only.
template <class Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(HttpCore::Impl& core, tcp::socket socket)
      : core_(core), peer_(PeerOf(socket)), stream_(MakeStream(core, std::move(socket))),
        buffer_(core.options.max_header_bytes + kReadBufferSlack), account_(core.options.uploads),
        body_timer_(stream_.get_executor()) {}
  ~Session() override { core_.Unregister(this); }

  // Starts the connection on its strand.
  void Begin() {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Open(); });
  }

  void Drain() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->state_ == State::kIdle) self->Shutdown();
    });
  }
  void Close() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Shutdown(); });
  }

 private:
  enum class State { kIdle, kHead, kBody, kHandling, kWriting, kClosed };

  void Open() {
    if constexpr (kTls) {
      Lowest().expires_after(core_.options.header_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](const beast::error_code& ec) {
                                if (ec) return self->Shutdown();
                                self->WaitRequest(/*first=*/true);
                              });
    } else {
      WaitRequest(/*first=*/true);
    }
  }

  static Stream MakeStream(HttpCore::Impl& core, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *core.tls);
    } else {
      return Stream(std::move(socket));
    }
  }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Waits for the first byte of a request: header_timeout on a new connection, the
  // keep-alive idle limit between requests.
  void WaitRequest(bool first) {
    if (state_ == State::kClosed) return;
    state_ = State::kIdle;
    if (core_.stopped.load() || (!first && core_.draining.load())) return Shutdown();
    parser_.emplace();
    ConfigureParser(*parser_, core_.limits, account_);
    if (buffer_.size() > 0) return ReadHead();  // a pipelined request is here already
    buffer_.shrink_to_fit();
    Lowest().expires_after(first ? core_.options.header_timeout : core_.options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(512), [self = this->shared_from_this()](
                                                      const beast::error_code& ec, size_t n) {
      if (ec) return self->Shutdown();
      self->buffer_.commit(n);
      self->ReadHead();
    });
  }

  void ReadHead() {
    state_ = State::kHead;
    Lowest().expires_after(core_.options.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
                              self->OnHead(ec);
                            });
  }

  void OnHead(const beast::error_code& ec) {
    if (ec) return Fail(ec, /*header_done=*/false);
    head_time_ = Clock::now();
    request_ = HeadOf(*parser_);
    request_.peer = peer_;
    request_.tls = kTls;
    keep_alive_ = parser_->get().keep_alive();
    if (std::optional<HttpResponse> refused = CheckHead(*parser_, core_.limits)) {
      return Send(std::move(*refused));
    }
    if (std::optional<HttpResponse> answer = core_.handler.Screen(request_)) {
      answer->close = true;
      return Send(std::move(*answer));
    }
    state_kept_ = request_.state;
    parser_->get().body().split = request_.body_split;
    if (parser_->is_done()) return Dispatch();
    if (!WantsContinue(request_)) return ReadBody();
    Lowest().expires_after(core_.options.write_timeout);
    asio::async_write(stream_, asio::buffer(kContinue, sizeof(kContinue) - 1),
                      [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
                        if (ec) return self->Shutdown();
                        self->ReadBody();
                      });
  }

  // The body's deadline is a timer of its own that cancels the read, not the stream's
  // (whose expiry closes the socket), so the 408 can still be written.
  void ReadBody() {
    state_ = State::kBody;
    body_late_ = false;
    // Beast reads as much as the buffer has room for: the whole allowance, not the few
    // hundred bytes left after the head (750 reads a MiB instead of 32). Given back
    // (shrink_to_fit) while the connection waits for its next request.
    buffer_.reserve(buffer_.max_size());
    Lowest().expires_never();
    body_timer_.expires_at(head_time_ + core_.options.body_timeout);
    body_timer_.async_wait([self = this->shared_from_this()](const beast::error_code& ec) {
      if (ec || self->state_ != State::kBody) return;
      self->body_late_ = true;
      beast::error_code ignored;
      self->Lowest().socket().cancel(ignored);
    });
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
                       self->body_timer_.cancel();
                       if (self->body_late_) return self->Fail(beast::error::timeout, true);
                       if (ec) return self->Fail(ec, /*header_done=*/true);
                       self->Dispatch();
                     });
  }

  void Dispatch() {
    state_ = State::kHandling;
    Lowest().expires_never();  // the work's time is not the client's
    request_.body = std::move(parser_->get().body().data);
    request_.body_tail = std::move(parser_->get().body().tail);
    request_.grants = account_.TakeGrants();
    parser_.reset();
    HttpRespond respond = [self = this->shared_from_this()](HttpResponse r) mutable {
      auto executor = self->stream_.get_executor();
      asio::post(executor, [self = std::move(self), r = std::move(r)]() mutable {
        self->Send(std::move(r));
      });
    };
    core_.handler.Handle(std::move(request_), std::move(respond));
    request_ = HttpRequest();
  }

  void Fail(const beast::error_code& ec, bool header_done) {
    if (state_ == State::kClosed) return;
    std::optional<HttpResponse> answer = FailureOf(ec, account_, header_done, core_.limits);
    account_.TakeGrants();
    if (!answer) return Shutdown();
    Send(std::move(*answer));
  }

  void Send(HttpResponse r) {
    if (state_ == State::kClosed) return;
    state_ = State::kWriting;
    close_after_ = r.close || !keep_alive_ || core_.draining.load();
    head_ = HeadText(r, close_after_);
    response_ = std::move(r);
    std::vector<asio::const_buffer> buffers = {asio::buffer(head_), asio::buffer(response_.body)};
    for (absl::string_view piece : response_.more) {
      buffers.push_back(asio::buffer(piece.data(), piece.size()));
    }
    Lowest().expires_after(core_.options.write_timeout);
    asio::async_write(stream_, buffers,
                      [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(const beast::error_code& ec) {
    response_ = HttpResponse();
    std::string().swap(head_);
    state_kept_.reset();  // the call ends once its answer is written
    if (ec || close_after_) return Shutdown();
    WaitRequest(/*first=*/false);
  }

  // Closes without reading what the client may still send.
  void Shutdown() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    body_timer_.cancel();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
    parser_.reset();
    account_.TakeGrants();
    state_kept_.reset();
  }

  HttpCore::Impl& core_;
  const std::string peer_;
  Stream stream_;
  beast::flat_buffer buffer_;
  UploadAccount account_;
  std::optional<RequestParser> parser_;
  HttpRequest request_;
  std::shared_ptr<void> state_kept_;  // the Screen's state, until the answer is written
  HttpResponse response_;             // being written
  std::string head_;                  // its status line and headers
  Clock::time_point head_time_;
  asio::steady_timer body_timer_;
  bool body_late_ = false;
  State state_ = State::kIdle;
  bool keep_alive_ = true;
  bool close_after_ = false;
};

}  // namespace

const std::string* HttpRequest::Header(absl::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

absl::string_view HttpReason(int status) {
  const beast::string_view reason = http::obsolete_reason(http::int_to_status(status));
  return absl::string_view(reason.data(), reason.size());
}

uint64_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

absl::Status HttpCore::Impl::SetUpTls() {
  if (options.tls_cert.empty()) return absl::OkStatus();
  tls.emplace(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  beast::error_code ec;
  tls->use_certificate_chain_file(options.tls_cert, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert=", options.tls_cert, ": ", ec.message()));
  }
  tls->use_private_key_file(options.tls_key, ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", options.tls_key, ": ", ec.message()));
  }
  if (options.tls_client_ca.empty()) return absl::OkStatus();
  tls->load_verify_file(options.tls_client_ca, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_client_ca=", options.tls_client_ca, ": ", ec.message()));
  }
  SSL_CTX_set_client_CA_list(tls->native_handle(),
                             SSL_load_client_CA_file(options.tls_client_ca.c_str()));
  tls->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  return absl::OkStatus();
}

absl::Status HttpCore::Impl::Bind() {
  const std::string& listen = options.listen;
  const size_t colon = listen.rfind(':');
  int port_number = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port_number) ||
      port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.flag, "=", listen, ": expected host:port or [v6-address]:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  beast::error_code ec;
  asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(ioc);
    auto found = resolver.resolve(host, std::to_string(port_number), ec);
    if (ec || found.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.flag, "=", listen, ": cannot resolve ", host));
    }
    ip = found.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(ip, static_cast<uint16_t>(port_number));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use) {
    return absl::UnavailableError(
        absl::StrCat("port ", port_number, " on ", host, " is in use (", options.flag, ")"));
  }
  if (!ec) acceptor.listen(kListenBacklog, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.flag, "=", listen, ": ", ec.message()));
  }
  port = acceptor.local_endpoint().port();
  address = absl::StrCat(listen.substr(0, colon), ":", port);
  return absl::OkStatus();
}

void HttpCore::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(ioc),
                        [this](const beast::error_code& ec, tcp::socket socket) {
                          OnAccept(ec, std::move(socket));
                        });
}

void HttpCore::Impl::OnAccept(const beast::error_code& ec, tcp::socket socket) {
  if (stopped.load() || ec == asio::error::operation_aborted) return;
  if (ec) {  // out of descriptors, or the peer left before accept: try again shortly
    accept_retry.expires_after(kAcceptRetry);
    accept_retry.async_wait([this](const beast::error_code& wait) {
      if (!wait && !stopped.load()) Accept();
    });
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (tls) {
    auto session =
        std::make_shared<Session<ssl::stream<beast::tcp_stream>>>(*this, std::move(socket));
    Register(session);
    session->Begin();
  } else {
    auto session = std::make_shared<Session<beast::tcp_stream>>(*this, std::move(socket));
    Register(session);
    session->Begin();
  }
  Accept();
}

void HttpCore::Impl::Register(const std::shared_ptr<SessionBase>& session) {
  std::lock_guard<std::mutex> lock(mu);
  sessions.emplace(session.get(), session);
}

void HttpCore::Impl::Unregister(SessionBase* session) {
  std::lock_guard<std::mutex> lock(mu);
  sessions.erase(session);
}

std::vector<std::shared_ptr<SessionBase>> HttpCore::Impl::Sessions() const {
  std::vector<std::shared_ptr<SessionBase>> out;
  std::lock_guard<std::mutex> lock(mu);
  out.reserve(sessions.size());
  for (const auto& [raw, weak] : sessions) {
    if (auto session = weak.lock()) out.push_back(std::move(session));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpCore>> HttpCore::Start(const HttpCoreOptions& options,
                                                          HttpHandler& handler) {
  RaiseOpenFileLimit();
  auto impl = std::make_unique<Impl>(options, handler);
  if (absl::Status s = impl->SetUpTls(); !s.ok()) return s;
  if (absl::Status s = impl->Bind(); !s.ok()) return s;
  impl->Accept();
  impl->guard.emplace(asio::make_work_guard(impl->ioc));
  for (int i = 0; i < std::max(1, options.io_threads); ++i) {
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
  }
  return std::unique_ptr<HttpCore>(new HttpCore(std::move(impl)));
}

HttpCore::HttpCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpCore::~HttpCore() { Stop(); }

int HttpCore::port() const { return impl_->port; }
const std::string& HttpCore::address() const { return impl_->address; }

size_t HttpCore::connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sessions.size();
}

void HttpCore::StartDrain() {
  impl_->draining.store(true);
  for (const auto& session : impl_->Sessions()) session->Drain();
}

void HttpCore::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl& impl = *impl_;
    impl.draining.store(true);
    impl.stopped.store(true);
    asio::post(impl.acceptor.get_executor(), [&impl] {
      beast::error_code ignored;
      impl.acceptor.close(ignored);
      impl.accept_retry.cancel();
    });
    for (const auto& session : impl.Sessions()) session->Close();
    impl.guard.reset();
    for (std::thread& t : impl.threads) t.join();
    impl.threads.clear();
  });
}

}  // namespace posenc
