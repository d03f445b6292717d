#include "client/cli_call.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/tensor_io.h"
#include "server/common/status_macros.h"

namespace posenc::client {

int UsageError(const absl::Status& status, absl::string_view who, absl::string_view help) {
  std::cerr << who << ": " << status.message() << "\n(run " << help << ")\n";
  return kExitUsage;
}

int RpcError(absl::string_view rpc, const absl::Status& status) {
  std::cerr << "posenc-client: " << rpc << " failed: " << absl::StatusCodeToString(status.code())
            << ": " << status.message() << "\n";
  return kExitRpc;
}

void PrintElapsed(absl::Duration elapsed) {
  std::cout << absl::StrFormat("elapsed %.3f ms\n", absl::ToDoubleMilliseconds(elapsed));
}

absl::StatusOr<std::unique_ptr<PosencClient>> MakeClient(const Flags& flags) {
  ASSIGN_OR_RETURN(const ClientOptions options, ClientOptionsFromFlags(flags));
  return PosencClient::Create(options);
}

int WriteIfAsked(const Flags& f, const std::string& flag, const v1::Tensor& tensor) {
  if (!f.Has(flag)) return kExitOk;
  if (absl::Status s = WriteTensorNpy(f.Str(flag), tensor); !s.ok()) {
    return RpcError(absl::StrCat("writing --", flag), s);
  }
  return kExitOk;
}

}  // namespace posenc::client
