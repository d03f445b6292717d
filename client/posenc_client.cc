#include "client/posenc_client.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/tensor_proto.h"
#include "server/common/status_macros.h"

namespace posenc::client {
namespace {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string msg = absl::StrCat(flag, " ", path, ": ", std::strerror(errno));
    if (errno == ENOENT || errno == ENOTDIR) return absl::NotFoundError(msg);
    if (errno == EACCES || errno == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ClientOptions& options) {
  const bool tls = options.tls || !options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
                   !options.tls_key_file.empty();
  if (!tls) return grpc::InsecureChannelCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together (mutual TLS); give both or neither");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPemFile(options.tls_ca_file, "tls_ca_file"));
  }
  if (!options.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPemFile(options.tls_cert_file, "tls_cert_file"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPemFile(options.tls_key_file, "tls_key_file"));
  }
  return grpc::SslCredentials(ssl);
}

// One unary call on `stub` with a deadline `timeout` from now: the response, or the call's
// status.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(Stub& stub,
                                   grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                   const Request& request, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Response response;
  RETURN_IF_ERROR(FromGrpcStatus((stub.*rpc)(&context, request, &response)));
  return response;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<PosencClient>> PosencClient::Create(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("target is empty");
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout is ", absl::FormatDuration(options.timeout), "; it must be > 0"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds, MakeCredentials(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetMaxSendMessageSize(-1);  // the server enforces its own limit, with a clear code
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  if (!options.service_config_json.empty()) args.SetServiceConfigJSON(options.service_config_json);
  for (const auto& [name, value] : options.int_channel_args) args.SetInt(name, value);
  auto channel = grpc::CreateCustomChannel(options.target, creds, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create a channel to '", options.target, "'"));
  }
  return std::make_unique<PosencClient>(std::move(channel), options.timeout);
}

PosencClient::PosencClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
    : channel_(std::move(channel)), stub_(v1::PositionalEncoding::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)), timeout_(timeout) {}

void PosencClient::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
}

absl::StatusOr<v1::EncodeResponse> PosencClient::Encode(const v1::EncodeRequest& request) const {
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::Encode, request, timeout_);
}

absl::Status PosencClient::RegisterSharedMemory(
    const v1::RegisterSharedMemoryRequest& request) const {
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::RegisterSharedMemory, request, timeout_)
      .status();
}

absl::Status PosencClient::UnregisterSharedMemory(const std::string& name) const {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::UnregisterSharedMemory, request, timeout_)
      .status();
}

absl::StatusOr<v1::SharedMemoryStatusResponse> PosencClient::SharedMemoryStatus(
    const std::string& name) const {
  v1::SharedMemoryStatusRequest request;
  request.set_name(name);
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::SharedMemoryStatus, request, timeout_);
}

absl::Status PosencClient::EncodeStream(
    const std::function<const v1::EncodeRequest*()>& next_request,
    const std::function<absl::Status(v1::EncodeResponse&&)>& on_response) const {
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReaderWriter<v1::EncodeRequest, v1::EncodeResponse>> stream =
      stub_->EncodeStream(&context);

  // One reader and one writer may use a sync stream concurrently; the reader owns these two.
  absl::Status callback_status;
  size_t received = 0;
  std::thread reader([&] {
    v1::EncodeResponse response;
    while (stream->Read(&response)) {
      ++received;
      if (callback_status.ok()) {
        callback_status = on_response(std::move(response));
        if (!callback_status.ok()) context.TryCancel();
      }
      response.Clear();
    }
  });
  size_t sent = 0;
  while (const v1::EncodeRequest* request = next_request()) {
    // Write fails once the call has ended (error, cancel, deadline): Finish says why.
    if (!stream->Write(*request)) break;
    ++sent;
  }
  stream->WritesDone();
  reader.join();
  const grpc::Status status = stream->Finish();
  if (!callback_status.ok()) return callback_status;
  RETURN_IF_ERROR(FromGrpcStatus(status));
  if (received != sent) {
    return absl::InternalError(absl::StrCat("EncodeStream: the server sent ", received,
                                            " responses to ", sent, " requests"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::EncodeResponse>> PosencClient::EncodeStream(
    absl::Span<const v1::EncodeRequest> requests) const {
  size_t next = 0;
  std::vector<v1::EncodeResponse> responses;
  responses.reserve(requests.size());
  RETURN_IF_ERROR(EncodeStream(
      [&]() -> const v1::EncodeRequest* {
        return next < requests.size() ? &requests[next++] : nullptr;
      },
      [&](v1::EncodeResponse&& response) {
        responses.push_back(std::move(response));
        return absl::OkStatus();
      }));
  return responses;
}

absl::StatusOr<v1::BiasResponse> PosencClient::AttentionBias(const v1::BiasRequest& request) const {
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::AttentionBias, request, timeout_);
}

absl::StatusOr<std::vector<v1::TableChunk>> PosencClient::GetTable(
    const v1::TableRequest& request) const {
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReader<v1::TableChunk>> reader = stub_->GetTable(&context, request);
  std::vector<v1::TableChunk> chunks;
  v1::TableChunk chunk;
  while (reader->Read(&chunk)) {
    chunks.push_back(std::move(chunk));
    chunk.Clear();
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  return chunks;
}

absl::StatusOr<v1::Tensor> PosencClient::GetTableTensor(const v1::TableRequest& request) const {
  ASSIGN_OR_RETURN(std::vector<v1::TableChunk> chunks, GetTable(request));
  v1::Tensor joined;
  int64_t rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const v1::TableChunk& chunk = chunks[i];
    const std::string field = absl::StrCat("chunk[", i, "].rows");
    ASSIGN_OR_RETURN(const ConstTensorView view, ViewTensor(chunk.rows(), field));
    if (view.shape.empty()) return absl::InternalError(absl::StrCat(field, " is a scalar"));
    // Row r is position first_position + r * position_step, clamped (TableRequest).
    __int128 expected =
        static_cast<__int128>(request.first_position()) +
        static_cast<__int128>(rows) * (request.has_position_step() ? request.position_step() : 1);
    if (request.has_clamp_position()) {
      expected =
          std::clamp<__int128>(expected, -request.clamp_position(), request.clamp_position());
    }
    if (static_cast<__int128>(chunk.first_position()) != expected) {
      return absl::InternalError(absl::StrCat("chunk[", i, "].first_position is ",
                                              chunk.first_position(), "; expected ",
                                              static_cast<int64_t>(expected)));
    }
    if (i == 0) {
      joined.set_dtype(chunk.rows().dtype());
      joined.mutable_shape()->Add(chunk.rows().shape().begin(), chunk.rows().shape().end());
    } else if (chunk.rows().dtype() != joined.dtype() ||
               !std::equal(chunk.rows().shape().begin() + 1, chunk.rows().shape().end(),
                           joined.shape().begin() + 1, joined.shape().end())) {
      return absl::InternalError(
          absl::StrCat(field, " differs from chunk[0] in dtype or row shape"));
    }
    rows += view.shape[0];
    joined.mutable_data()->append(chunk.rows().data());
  }
  if (chunks.empty()) return absl::InternalError("GetTable returned no chunks");
  joined.set_shape(0, rows);
  return joined;
}

absl::StatusOr<v1::ListSchemesResponse> PosencClient::ListSchemes() const {
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::ListSchemes, v1::ListSchemesRequest(),
                   timeout_);
}

absl::StatusOr<v1::GraphResponse> PosencClient::GraphEncode(const v1::GraphRequest& request) const {
  return CallUnary(*stub_, &v1::PositionalEncoding::Stub::GraphEncode, request, timeout_);
}

absl::StatusOr<HealthStatus> PosencClient::Health(const std::string& service) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  ASSIGN_OR_RETURN(const grpc::health::v1::HealthCheckResponse response,
                   CallUnary(*health_stub_, &grpc::health::v1::Health::Stub::Check, request,
                             timeout_));
  return response.status();
}

absl::Status PosencClient::WaitForConnected(absl::Duration timeout) const {
  if (channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(
      absl::StrCat("channel not connected within ", absl::FormatDuration(timeout)));
}

}  // namespace posenc::client
