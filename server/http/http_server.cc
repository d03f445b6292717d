#include "server/http/http_server.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/http/infer_json.h"
#include "server/http/oip_endpoints.h"
#include "server/http/oip_routes.h"
#include "server/service/admission.h"
#include "server/service/proto_convert.h"
#include "server/service/request_cost.h"
#include "server/shm/peer_identity.h"

namespace posenc {
namespace {

using Clock = std::chrono::steady_clock;

// Bodies up to this are parsed on the work pool's cheap lane, larger ones on the bulk lane.
constexpr size_t kCheapBodyBytes = size_t{1} << 20;
// An infer body of at most kInlineBodyBytes, with at most kInlineJsonBytes of it JSON, is
// parsed on the I/O thread it arrived on, and its work runs there too when small enough to
// run inline (request_cost.h): the rule of a streamed gRPC message (PlacementOf). The
// hand-off to the work pool and back costs more wake-ups than such a call's parse and
// kernel; text parses slower than the binary part moves, hence its own bound.
constexpr size_t kInlineBodyBytes = kInlineCallBytes / 3;
constexpr size_t kInlineJsonBytes = size_t{16} << 10;
// Marks an upload refused because the others in progress hold the budget now.
constexpr absl::string_view kUploadBusyPayload = "posenc.dev/http-upload-busy";

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

// The answer to a failed call. Refusals (413, 429, 503) close the connection; 429, and
// only 429, carries retry advice.
HttpResponse FailureResponse(const grpc::Status& status, bool retryable) {
  const int http = HttpStatusOf(status.error_code(), retryable);
  HttpResponse r = JsonResponse(http, ErrorJson(status.error_message()));
  if (http == 429) r.headers.emplace_back("Retry-After", "1");
  r.close = http == 413 || http == 429 || http == 503;
  return r;
}

grpc::Status Invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

// The parse's charges to --max_inflight_bytes: what was charged up front, and what the
// parse asked for as it grew (ParseBudget::grow), held until the parse is done.
struct ParseCharges {
  Admission& admission;
  uint64_t charged = 0;
  std::vector<Admission::Ticket> tickets;

  absl::Status Grow(uint64_t more) {
    absl::StatusOr<Admission::Ticket> t = admission.AdmitBytes(more);
    if (t.ok()) {
      charged += more;
      tickets.push_back(std::move(*t));
      return absl::OkStatus();
    }
    // More than the whole budget, in all, can never fit: not retryable.
    const uint64_t limit = admission.limits().max_inflight_bytes;
    if (charged + more > limit) {
      return absl::ResourceExhaustedError(absl::StrCat("this call needs ", charged + more,
                                                       " bytes of working memory, more than "
                                                       "--max_inflight_bytes (",
                                                       limit, "); send it in smaller parts"));
    }
    return t.status();
  }
};

struct ChargedParse {
  absl::Status parsed;     // the parser's: OK, or INVALID_ARGUMENT naming the field
  grpc::Status refused;    // the budget's refusal of the parse (OK when there was none)
  bool retryable = false;  // the refusal may succeed later (429, not 413)
};

// Parses `body` into `out` with what the parse holds beside the body (the request it
// builds, the lexer's buffer) charged to `admission`: kJsonParseBytesPerByte per byte of
// JSON up front, which covers 4-byte tensors from the densest JSON, and what the parse
// outgrows that by as it goes (8-byte tensors, long parameter text). The body is held (as an
// upload) while it is parsed: if both together exceed the whole budget, the call can never
// run, and the refusal is not retryable. (A header length past the body is the parser's
// 400, not a charge.) The charges go back when the parse is done: what it held is the
// request's then, charged again when the call runs.
// A body read in two parts (Screen's body_split at the header length) is parsed from its
// parts, the binary one taken by the request without a copy where it is one input's.
ChargedParse ParseCharged(Admission& admission, HttpRequest& request,
                          std::optional<size_t> header_length, const Route& route,
                          InferRequestBody& out) {
  const std::string& body = request.body;
  const bool split = request.body_split != std::numeric_limits<size_t>::max();
  const uint64_t body_bytes = body.size() + request.body_tail.size();
  const uint64_t json_bytes = std::min<uint64_t>(header_length.value_or(body.size()), body.size());
  const uint64_t limit = admission.limits().max_inflight_bytes;
  ParseCharges charges{admission, json_bytes * kJsonParseBytesPerByte, {}};
  absl::StatusOr<Admission::Ticket> first =
      charges.charged + body_bytes > limit
          ? absl::ResourceExhaustedError(absl::StrCat("with its ", body_bytes,
                                                      "-byte body that is more than "
                                                      "--max_inflight_bytes (",
                                                      limit, ")"))
          : admission.AdmitBytes(charges.charged);
  ChargedParse result;
  absl::Status refused = first.status();
  if (first.ok()) {
    charges.tickets.push_back(std::move(*first));
    const ParseBudget budget{charges.charged,
                             [&charges](uint64_t more) { return charges.Grow(more); }};
    result.parsed =
        split ? ParseInferRequest(body, request.body_tail, *header_length, route.model,
                                  route.version, out, &budget)
              : ParseInferRequest(body, header_length, route.model, route.version, out, &budget);
    if (!absl::IsInvalidArgument(result.parsed)) refused = result.parsed;
  }
  if (!refused.ok()) {
    result.refused = ToGrpcStatus(absl::Status(
        refused.code(), absl::StrCat("parsing a ", json_bytes, "-byte JSON request needs ",
                                     charges.charged, " bytes or more: ", refused.message())));
    result.retryable = IsRetryableRefusal(refused);
  }
  return result;
}

}  // namespace

// A tracked HTTP call: counted in flight from its head to its answer's last byte, then in
// posenc_requests_total and the failed-calls log under its Http* method. Refused
// (accepted() false) once the drain began.
class HttpServer::Call {
 public:
  Call(HttpServer& server, const std::string& peer, const Route& route)
      : route(route), server_(server), start_(Clock::now()), accepted_(server.Enter()) {
    record_.method = MethodOf(route.endpoint);
    record_.peer = peer;
    if (server_.metrics_) server_.metrics_->InflightAdd(1);
  }
  ~Call() {
    if (!finished_) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call ended early"));
    if (accepted_) server_.Leave();
  }
  bool accepted() const { return accepted_; }
  void set_scheme(SchemeLabel s) { record_.scheme.store(s); }
  void set_request_id(const std::string& id) { record_.request_id = id; }

  void Finish(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (server_.metrics_) {
      server_.metrics_->RecordRequest(record_.method, record_.scheme.load(),
                                      static_cast<int>(status.error_code()), seconds);
      server_.metrics_->InflightAdd(-1);
    }
    server_.tracker_.LogEnd(record_, status, seconds);
  }

  const Route route;

 private:
  HttpServer& server_;
  const Clock::time_point start_;
  const bool accepted_;
  bool finished_ = false;
  TrackedCall record_;
};

// The bytes of uploads in progress: at most `capacity` together (--http_max_upload_bytes),
// and each granted from --max_inflight_bytes too, so uploads and running calls share one
// memory budget. Thread-safe.
class HttpServer::Uploads final : public UploadBudget {
 public:
  Uploads(uint64_t capacity, Admission& admission) : capacity_(capacity), admission_(admission) {}

  absl::StatusOr<std::unique_ptr<Grant>> Take(uint64_t bytes, uint64_t held) override {
    if (held + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request body needs more than --http_max_upload_bytes (", capacity_, " bytes)"));
    }
    uint64_t used = used_.load();
    do {
      if (used + bytes > capacity_) {
        absl::Status busy = absl::ResourceExhaustedError(
            absl::StrCat("uploads in progress hold ", used, " bytes of --http_max_upload_bytes (",
                         capacity_, "); retry later"));
        busy.SetPayload(kUploadBusyPayload, absl::Cord("1"));
        return busy;
      }
    } while (!used_.compare_exchange_weak(used, used + bytes));
    absl::StatusOr<Admission::Ticket> ticket = admission_.AdmitBytes(bytes);
    if (!ticket.ok()) {
      used_.fetch_sub(bytes);
      return ticket.status();
    }
    return std::make_unique<Held>(used_, bytes, std::move(*ticket));
  }

  bool Retryable(const absl::Status& refusal) const override {
    return IsRetryableRefusal(refusal) || refusal.GetPayload(kUploadBusyPayload).has_value();
  }
  uint64_t capacity() const override { return capacity_; }

 private:
  class Held final : public Grant {
   public:
    Held(std::atomic<uint64_t>& used, uint64_t bytes, Admission::Ticket ticket)
        : used_(used), bytes_(bytes), ticket_(std::move(ticket)) {}
    ~Held() override { used_.fetch_sub(bytes_); }

   private:
    std::atomic<uint64_t>& used_;
    const uint64_t bytes_;
    Admission::Ticket ticket_;
  };

  const uint64_t capacity_;
  Admission& admission_;
  std::atomic<uint64_t> used_{0};
};

// One infer call on the work pool: its request, what it parsed into, its response and the
// admission that covers it, kept until the answer is written.
struct HttpServer::InferJob {
  std::shared_ptr<Call> call;
  HttpRequest request;
  HttpRespond respond;
  InferRequestBody parsed;
  inference::ModelInferResponse response;
  Admission::Ticket ticket;
  Admission::Ticket answer_ticket;  // the JSON text of the answer (AdmitJsonAnswer)
  InferResponseBody out;

  // Finishes the call with `status` and hands `answer` (which keeps this job) to the core.
  static void Reply(const std::shared_ptr<InferJob>& job, const grpc::Status& status,
                    HttpResponse answer) {
    job->call->Finish(status);
    HttpRespond respond = std::move(job->respond);
    answer.keep = job;
    std::move(respond)(std::move(answer));
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              const InferenceService& inference,
                                                              CallTracker& tracker,
                                                              ServiceMetrics* metrics) {
  std::unique_ptr<HttpServer> server(new HttpServer(options, inference, tracker, metrics));
  Admission& admission = *inference.runtime().admission;
  const uint64_t uploads = options.max_upload_bytes != 0
                               ? options.max_upload_bytes
                               : admission.limits().max_inflight_bytes / 2;
  server->uploads_ = std::make_unique<Uploads>(uploads, admission);
  HttpCoreOptions core;
  core.listen = options.listen;
  core.flag = "--http_listen";
  core.tls_cert = options.tls_cert;
  core.tls_key = options.tls_key;
  core.tls_client_ca = options.tls_client_ca;
  core.max_body_bytes = options.max_body_bytes;
  core.header_timeout = std::min(options.header_timeout, options.read_timeout);
  core.idle_timeout = options.read_timeout;
  core.body_timeout = options.read_timeout;
  core.write_timeout = options.read_timeout;
  core.io_threads = options.threads;
  core.uploads = server->uploads_.get();
  absl::StatusOr<std::unique_ptr<HttpCore>> started = HttpCore::Start(core, *server);
  if (!started.ok()) return started.status();
  server->core_ = std::move(*started);
  return server;
}

HttpServer::HttpServer(const HttpOptions& options, const InferenceService& inference,
                       CallTracker& tracker, ServiceMetrics* metrics)
    : options_(options), inference_(inference), tracker_(tracker), metrics_(metrics) {}

HttpServer::~HttpServer() {
  Stop();
  core_.reset();  // releases what the stopped core still held (calls, grants)
}

void HttpServer::StartDrain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  if (core_) core_->StartDrain();
}

bool HttpServer::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_until(lock, deadline, [&] { return inflight_ == 0 && jobs_ == 0; });
}

// Closes every connection (a writer whose client does not read is cut off here), then
// waits for the infer work on the pool, which polls stopping_ and ends early.
void HttpServer::Stop() {
  std::call_once(stop_once_, [&] {
    StartDrain();
    stopping_.store(true);
    if (core_) core_->Stop();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return jobs_ == 0; });
  });
}

bool HttpServer::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) return false;
  ++inflight_;
  return true;
}

void HttpServer::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--inflight_ == 0) idle_.notify_all();
}

void HttpServer::JobDone() {
  std::lock_guard<std::mutex> lock(mu_);
  --jobs_;
  idle_.notify_all();
}

bool HttpServer::Ready() const {
  if (!inference_.Ready() || stopping_.load()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return !draining_;
}

std::optional<HttpResponse> HttpServer::Screen(HttpRequest& request) {
  const Route route = RouteOf(request.path);
  if (route.endpoint == Endpoint::kNotFound) {
    return JsonResponse(404, ErrorJson(absl::StrCat("no endpoint at ", request.path,
                                                    "; the Open Inference Protocol's paths "
                                                    "start with /v2")));
  }
  if (!MethodAllowed(route, request.method)) {
    HttpResponse r =
        JsonResponse(405, ErrorJson(absl::StrCat(request.method, " is not allowed on ",
                                                 request.path, "; use ", route.method)));
    r.headers.emplace_back("Allow", route.method);
    return r;
  }
  // Probes: not tracked, as gRPC's health and ServerLive/ServerReady are not.
  if (route.endpoint == Endpoint::kLive || route.endpoint == Endpoint::kReady) return {};
  auto call = std::make_shared<Call>(*this, request.peer, route);
  grpc::Status refused;
  if (!call->accepted()) refused = kShuttingDown;
  const std::string* encoding = request.Header("content-encoding");
  if (refused.ok() && encoding != nullptr && !absl::EqualsIgnoreCase(*encoding, "identity")) {
    refused = Invalid(absl::StrCat("Content-Encoding '", *encoding,
                                   "' is not supported; send the body uncompressed"));
  }
  const std::string* header_length = request.Header("inference-header-content-length");
  if (refused.ok() && header_length != nullptr) {
    absl::StatusOr<size_t> n = ParseHeaderLength(*header_length);
    if (!n.ok()) refused = Invalid(std::string(n.status().message()));
    // The binary part in a buffer of its own, for the tensor to take (ParseCharged).
    if (n.ok() && route.endpoint == Endpoint::kInfer) request.body_split = *n;
  }
  if (!refused.ok()) {
    call->Finish(refused);
    return FailureResponse(refused, /*retryable=*/false);
  }
  if (route.endpoint == Endpoint::kInfer) {
    absl::StatusOr<const ModelInfo*> model = FindModel(route.model, "");
    if (model.ok()) call->set_scheme((*model)->label);
  }
  request.state = std::move(call);
  return std::nullopt;
}

void HttpServer::Handle(HttpRequest request, HttpRespond respond) {
  std::shared_ptr<Call> call = std::static_pointer_cast<Call>(request.state);
  if (call == nullptr) {  // a probe
    const bool live = RouteOf(request.path).endpoint == Endpoint::kLive;
    HttpResponse r;
    if (!live && !Ready()) r = JsonResponse(503, ErrorJson(kShuttingDown.error_message()));
    std::move(respond)(std::move(r));
    return;
  }
  if (call->route.endpoint == Endpoint::kInfer) {
    SubmitInfer(std::move(call), std::move(request), std::move(respond));
    return;
  }
  HttpResponse r = Answer(*call, request);
  std::move(respond)(std::move(r));
}

HttpResponse HttpServer::Answer(Call& call, const HttpRequest& request) {
  const Route& route = call.route;
  SharedMemoryRegistry& shm = *inference_.runtime().shm;
  const ShmOwner owner = ShmOwner::OfHttpPeer(request.peer);
  EndpointAnswer a;
  switch (route.endpoint) {
    case Endpoint::kServerMetadata: a = ServerMetadataAnswer(inference_); break;
    case Endpoint::kModelMetadata: a = ModelMetadataAnswer(route); break;
    case Endpoint::kModelConfig: a = ModelConfigAnswer(route); break;
    case Endpoint::kRepositoryIndex: a = RepositoryIndexAnswer(); break;
    case Endpoint::kShmStatus: a = ShmStatusAnswer(shm, route, owner.name()); break;
    case Endpoint::kShmRegister:
      a = ShmRegisterAnswer(shm, route, request.body, owner.name());
      break;
    case Endpoint::kShmUnregister: a = ShmUnregisterAnswer(shm, route, owner.name()); break;
    case Endpoint::kModelReady: {
      a = ModelMetadataAnswer(route);
      if (a.status.ok() && (!inference_.ModelIsReady(route.model, route.version) || !Ready())) {
        a.status = kShuttingDown;
      }
      a.json.clear();
      break;
    }
    default: a.status = grpc::Status(grpc::StatusCode::INTERNAL, "no handler"); break;
  }
  call.Finish(a.status);
  if (!a.status.ok()) return FailureResponse(a.status, /*retryable=*/false);
  HttpResponse r;
  if (!a.json.empty()) r = JsonResponse(200, std::move(a.json));
  return r;
}

void HttpServer::SubmitInfer(std::shared_ptr<Call> call, HttpRequest request, HttpRespond respond) {
  auto job = std::make_shared<InferJob>();
  job->call = std::move(call);
  job->request = std::move(request);
  job->respond = std::move(respond);
  const size_t json = job->request.body.size(), body = json + job->request.body_tail.size();
  const Lane lane = body > kCheapBodyBytes ? Lane::kBulk : Lane::kCheap;
  const bool run_inline = json <= kInlineJsonBytes && body <= kInlineBodyBytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++jobs_;
  }
  if (run_inline) return RunInfer(std::move(job), std::nullopt);
  inference_.runtime().pool->Submit(lane, [this, lane, job = std::move(job)]() mutable {
    RunInfer(std::move(job), lane);
  });
}

// On the pool's `lane`, or on the I/O thread for a small body (SubmitInfer): the body into a
// ModelInferRequest (then the body's bytes go back to the upload budget), then the gRPC
// ModelInfer's path from there on, its work right here when its cost places it on `lane`.
void HttpServer::RunInfer(std::shared_ptr<InferJob> job, std::optional<Lane> lane) {
  const Route& route = job->call->route;
  std::optional<size_t> header_length;
  if (const std::string* h = job->request.Header("inference-header-content-length")) {
    header_length = ParseHeaderLength(*h).value_or(0);  // Screen checked it
  }
  const ChargedParse charged = ParseCharged(*inference_.runtime().admission, job->request,
                                            header_length, route, job->parsed);
  if (!charged.refused.ok()) {
    InferJob::Reply(job, charged.refused, FailureResponse(charged.refused, charged.retryable));
    return JobDone();
  }
  const absl::Status& parsed = charged.parsed;
  const std::string& id = job->parsed.request.id();
  job->call->set_request_id(id);
  if (!parsed.ok()) {
    const grpc::Status status =
        Invalid(id.empty() ? std::string(parsed.message())
                           : absl::StrCat("request ", id, ": ", parsed.message()));
    InferJob::Reply(job, status, FailureResponse(status, /*retryable=*/false));
    return JobDone();
  }
  std::string().swap(job->request.body);
  std::string().swap(job->request.body_tail);
  job->request.grants.clear();
  InferJob* raw = job.get();
  inference_.InferAsync(
      raw->parsed.request, ShmOwner::OfHttpPeer(raw->request.peer),
      [this] { return stopping_.load(); }, raw->response,
      [this, job = std::move(job)](CallOutcome outcome) mutable {
        FinishInfer(std::move(job), std::move(outcome));
      },
      lane);
}

// Admits the JSON text of the job's answer (InferResponseJsonBytes) beside what the call
// holds, into job.answer_ticket; else RESOURCE_EXHAUSTED, `retryable` when the two may fit
// --max_inflight_bytes later (not when together they are more than all of it).
grpc::Status HttpServer::AdmitJsonAnswer(InferJob& job, bool& retryable) {
  Admission& admission = *inference_.runtime().admission;
  const uint64_t text = InferResponseJsonBytes(job.response, job.parsed.outputs);
  absl::StatusOr<Admission::Ticket> admitted = admission.AdmitBytes(text);
  if (admitted.ok()) {
    job.answer_ticket = std::move(*admitted);
    return grpc::Status::OK;
  }
  const uint64_t limit = admission.limits().max_inflight_bytes;
  const bool never = job.ticket.bytes() + text > limit;
  retryable = !never;
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("the JSON answer needs up to ", text, " bytes beside the call's ",
                   job.ticket.bytes(), never ? ", more than --max_inflight_bytes (" : " (",
                   never ? absl::StrCat(limit, ")") : "busy now, retry later)",
                   "; ask for the outputs as binary_data to receive them without the text"));
}

// On the thread that ran the work: the answer, written from the response's own bytes.
void HttpServer::FinishInfer(std::shared_ptr<InferJob> job, CallOutcome outcome) {
  if (!outcome.status.ok()) {
    InferJob::Reply(job, outcome.status, FailureResponse(outcome.status, outcome.retryable));
    return JobDone();
  }
  job->ticket = std::move(outcome.ticket);
  bool retryable = false;
  if (const grpc::Status refused = AdmitJsonAnswer(*job, retryable); !refused.ok()) {
    InferJob::Reply(job, refused, FailureResponse(refused, retryable));
    return JobDone();
  }
  job->out = WriteInferResponse(job->response, job->parsed.outputs);
  HttpResponse r;
  if (job->out.binary.empty()) {
    // The text holds every output: the tensors go back now, not after the last byte is sent.
    job->response.Clear();
    r.content_type = "application/json";
  } else {
    r.content_type = "application/octet-stream";
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(job->out.json.size()));
    r.more = job->out.binary;
  }
  r.body = std::move(job->out.json);
  InferJob::Reply(job, grpc::Status::OK, std::move(r));
  JobDone();
}

}  // namespace posenc
