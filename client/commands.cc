#include "client/commands.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/cli_call.h"
#include "client/request_builders.h"
#include "client/tensor_io.h"

namespace posenc::client {

namespace {

// One call of `rpc` whose response has an output tensor: its summary, then `more` (extra
// lines), the elapsed time, and --output written if asked.
template <typename Request, typename Response>
int OutputCall(const Flags& f, absl::string_view rpc, const absl::StatusOr<Request>& request,
               absl::StatusOr<Response> (PosencClient::*call)(const Request&) const,
               void (*more)(const Response&) = nullptr) {
  if (!request.ok()) return UsageError(request.status());
  return TimedCall(
      f, rpc, [&](PosencClient& client) { return (client.*call)(*request); },
      [&](const Response& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        if (more != nullptr) more(response);
        PrintElapsed(elapsed);
        return WriteIfAsked(f, "output", response.output());
      });
}

void PrintEigenvalues(const v1::GraphResponse& response) {
  if (response.eigenvalues_size() == 0) return;  // only the Laplacian has them
  std::cout << "eigenvalues: " << absl::StrJoin(response.eigenvalues(), " ") << "\n";
}

}  // namespace

int RunBias(const Flags& f) {
  return OutputCall(f, "AttentionBias", BuildBiasRequest(f), &PosencClient::AttentionBias);
}

int RunGraph(const Flags& f) {
  return OutputCall(f, "GraphEncode", BuildGraphRequest(f), &PosencClient::GraphEncode,
                    &PrintEigenvalues);
}

int RunTable(const Flags& f) {
  absl::StatusOr<v1::TableRequest> request = BuildTableRequest(f);
  if (!request.ok()) return UsageError(request.status());
  return TimedCall(
      f, "GetTable", [&](PosencClient& client) { return client.GetTableTensor(*request); },
      [&](const v1::Tensor& table, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("table", table, print);
        PrintElapsed(elapsed);
        if (int rc = WriteIfAsked(f, "output", table); rc != kExitOk) return rc;
        if (f.Has("output")) std::cout << "wrote " << f.Str("output") << "\n";
        return kExitOk;
      });
}

int RunList(const Flags& f) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto response = (*client)->ListSchemes();
  if (!response.ok()) return RpcError("ListSchemes", response.status());
  std::cout << "version: " << response->version() << "\n";
  std::cout << "schemes: " << absl::StrJoin(response->schemes(), " ") << "\n";
  std::vector<std::string> dtypes;
  for (int d : response->dtypes()) dtypes.push_back(v1::DType_Name(static_cast<v1::DType>(d)));
  std::cout << "dtypes: " << absl::StrJoin(dtypes, " ") << "\n";
  std::cout << "tables:" << (response->tables().empty() ? " (none)" : "") << "\n";
  for (const v1::NamedTable& t : response->tables()) {
    std::cout << "  " << t.name() << " [" << absl::StrJoin(t.shape(), ",") << "] "
              << v1::DType_Name(t.dtype()) << "\n";
  }
  return kExitOk;
}

int RunHealth(const Flags& f) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto status = (*client)->Health(f.Str("service"));
  if (!status.ok()) return RpcError("Health/Check", status.status());
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status) << "\n";
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitRpc;
}

}  // namespace posenc::client
