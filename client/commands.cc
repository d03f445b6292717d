#include "client/commands.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/cli_call.h"
#include "client/request_builders.h"
#include "client/tensor_io.h"

namespace posenc::client {

int RunBias(const Flags& f) {
  absl::StatusOr<v1::BiasRequest> request = BuildBiasRequest(f);
  if (!request.ok()) return UsageError(request.status());
  return TimedCall(
      f, "AttentionBias", [&](PosencClient& client) { return client.AttentionBias(*request); },
      [&](const v1::BiasResponse& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        PrintElapsed(elapsed);
        return WriteIfAsked(f, "output", response.output());
      });
}

int RunGraph(const Flags& f) {
  absl::StatusOr<v1::GraphRequest> request = BuildGraphRequest(f);
  if (!request.ok()) return UsageError(request.status());
  return TimedCall(
      f, "GraphEncode", [&](PosencClient& client) { return client.GraphEncode(*request); },
      [&](const v1::GraphResponse& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        std::cout << "eigenvalues: " << absl::StrJoin(response.eigenvalues(), " ") << "\n";
        PrintElapsed(elapsed);
        return WriteIfAsked(f, "output", response.output());
      });
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
