// What posenc-client's commands share between their flags and their exit code: the usage
// and RPC error lines (exit 2 and 1), the client made from the connection flags, and one
// timed unary call whose response a command reports.
#pragma once

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_flags.h"
#include "client/posenc_client.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::client {

// Prints "<who>: <message>" and "(run <help>)" on stderr; returns kExitUsage.
int UsageError(const absl::Status& status, absl::string_view who = "posenc-client",
               absl::string_view help = "posenc-client --help for usage");

// Prints "posenc-client: <rpc> failed: <CODE>: <message>" on stderr; returns kExitRpc.
int RpcError(absl::string_view rpc, const absl::Status& status);

// "elapsed 1.234 ms" on stdout.
void PrintElapsed(absl::Duration elapsed);

absl::StatusOr<std::unique_ptr<PosencClient>> MakeClient(const Flags& flags);

// Writes `tensor` as .npy to the path --<flag> gives, if it gives one. kExitOk, or
// RpcError("writing --<flag>") when the write fails.
int WriteIfAsked(const Flags& f, const std::string& flag, const v1::Tensor& tensor);

// One unary call: connects, times call(client), and hands the response, --print and the
// elapsed time to report(), whose return is the exit code. Bad flags and RPC errors
// become their exit codes here.
template <typename Call, typename Report>
int TimedCall(const Flags& f, absl::string_view rpc, const Call& call, const Report& report) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto print = f.Int("print", 8);
  if (!print.ok()) return UsageError(print.status());
  const absl::Time start = absl::Now();
  auto response = call(**client);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) return RpcError(rpc, response.status());
  return report(*response, *print, elapsed);
}

}  // namespace posenc::client
