// C++ client of posenc.v1.PositionalEncoding and grpc.health.v1.Health: one channel, a
// deadline on every call, grpc::Status mapped 1:1 onto absl::Status.
// Thread-safe: one PosencClient may serve concurrent calls from many threads.
//
//   ClientOptions options;
//   options.target = "unix:/run/posenc.sock";
//   ASSIGN_OR_RETURN(std::unique_ptr<PosencClient> client, PosencClient::Create(options));
//   v1::EncodeRequest request;
//   ASSIGN_OR_RETURN(*request.mutable_input(), MakeTensor(values, {1, 8, 16}));
//   request.mutable_sinusoidal();
//   ASSIGN_OR_RETURN(v1::EncodeResponse response, client->Encode(request));
#pragma once

#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "posenc/v1/posenc.grpc.pb.h"

namespace posenc::client {

namespace v1 = ::posenc::v1;
using HealthStatus = ::grpc::health::v1::HealthCheckResponse::ServingStatus;

struct ClientOptions {
  // Any gRPC target: "host:port", "dns:///host:port", "unix:/path", "unix:///abs/path".
  std::string target = "127.0.0.1:50051";
  // Deadline of each call; for a streaming call, of the whole stream.
  absl::Duration timeout = absl::Seconds(30);
  // TLS: on when `tls` is set or any file below is given. Without tls_ca_file the system's
  // roots verify the server. tls_cert_file and tls_key_file (PEM) go together: mutual TLS.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Name to expect in the server's certificate when it differs from the target's host.
  std::string tls_server_name;
  // Responses as large as the server may send (its --max_message_bytes) must fit.
  int max_receive_message_bytes = INT_MAX;
  // Service config JSON (load-balancing policy, retry policy); empty keeps the resolver's
  // (and then gRPC's default: pick_first, no retries). See README "Scale-out and failover".
  std::string service_config_json;
  // Further integer channel arguments, e.g. {GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, 8 << 20}.
  // Channels whose arguments differ do not share connections.
  std::vector<std::pair<std::string, int>> int_channel_args;
};

// grpc::Status -> absl::Status; the codes are numerically the same.
absl::Status FromGrpcStatus(const grpc::Status& status);

class PosencClient {
 public:
  // Builds the channel (it connects lazily, on the first call). INVALID_ARGUMENT for an
  // empty target or a cert without a key; NOT_FOUND for a TLS file that does not exist.
  static absl::StatusOr<std::unique_ptr<PosencClient>> Create(const ClientOptions& options);

  // Wraps an existing channel (e.g. an in-process one in tests).
  PosencClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);

  absl::StatusOr<v1::EncodeResponse> Encode(const v1::EncodeRequest& request) const;

  // Sends requests over one EncodeStream call while a second thread reads the responses, so
  // the server's bounded read-ahead never deadlocks us. `next_request` returns the next
  // request, or nullptr when done; the pointer must stay valid until the following call.
  // `on_response` runs on the reader thread, once per response, in order; an error from it
  // cancels the stream and is returned. A message the server refused comes as a response
  // with `error` set (the stream goes on). INTERNAL when the counts of requests and
  // responses differ.
  absl::Status EncodeStream(
      const std::function<const v1::EncodeRequest*()>& next_request,
      const std::function<absl::Status(v1::EncodeResponse&&)>& on_response) const;
  // Convenience form: all responses, in order.
  absl::StatusOr<std::vector<v1::EncodeResponse>> EncodeStream(
      absl::Span<const v1::EncodeRequest> requests) const;

  absl::StatusOr<v1::BiasResponse> AttentionBias(const v1::BiasRequest& request) const;

  // All chunks, in order.
  absl::StatusOr<std::vector<v1::TableChunk>> GetTable(const v1::TableRequest& request) const;
  // The chunks joined into one tensor ([length, dim] or [length, 2, dim/2]); INTERNAL when the
  // chunks are not contiguous from position 0 or disagree in dtype or row shape.
  absl::StatusOr<v1::Tensor> GetTableTensor(const v1::TableRequest& request) const;

  absl::StatusOr<v1::ListSchemesResponse> ListSchemes() const;

  absl::StatusOr<v1::GraphResponse> GraphEncode(const v1::GraphRequest& request) const;

  // Shared memory (a server started with --shm; client/shm_region.h creates the objects):
  // map a region under a name, forget it ("" = all), and list what is registered.
  absl::Status RegisterSharedMemory(const v1::RegisterSharedMemoryRequest& request) const;
  absl::Status UnregisterSharedMemory(const std::string& name) const;
  absl::StatusOr<v1::SharedMemoryStatusResponse> SharedMemoryStatus(
      const std::string& name = "") const;

  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  absl::StatusOr<HealthStatus> Health(const std::string& service = "") const;

  // Blocks until the channel is connected or `timeout` passes (DEADLINE_EXCEEDED).
  absl::Status WaitForConnected(absl::Duration timeout) const;

  void set_timeout(absl::Duration timeout) { timeout_ = timeout; }
  absl::Duration timeout() const { return timeout_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::PositionalEncoding::Stub* stub() const { return stub_.get(); }

 private:
  void SetDeadline(grpc::ClientContext* context) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PositionalEncoding::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  absl::Duration timeout_;
};

}  // namespace posenc::client
