#include "client/encode_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli_call.h"
#include "client/request_builders.h"
#include "client/shm_region.h"
#include "client/tensor_io.h"
#include "server/common/status_macros.h"

namespace posenc::client {
namespace {

// Moves `tensor`'s bytes into `region` at `offset` and makes it a reference to them.
void MoveIntoShm(ShmRegion& region, const std::string& name, uint64_t offset, v1::Tensor* tensor) {
  const uint64_t size = tensor->data().size();
  std::memcpy(region.bytes().data() + offset, tensor->data().data(), size);
  *tensor->mutable_shm() = ShmRegion::Ref(name, offset, size);
  tensor->clear_data();
}

// --shm: the tensors travel through a POSIX shared-memory object this command creates,
// registers, and removes again; the server rotates or adds them in place, and the answer
// is read back from the object (the server must run with --shm).
absl::StatusOr<v1::EncodeResponse> EncodeByReference(PosencClient& client,
                                                     v1::EncodeRequest request) {
  const uint64_t in = request.input().data().size(), key = request.key().data().size();
  const uint64_t key_at = (in + 63) / 64 * 64;
  const std::string name = absl::StrCat("cli_", getpid());
  ASSIGN_OR_RETURN(ShmRegion region, ShmRegion::Create(absl::StrCat("/posenc_cli_", getpid()),
                                                       std::max<uint64_t>(key_at + key, 64)));
  MoveIntoShm(region, name, 0, request.mutable_input());
  if (request.has_key()) MoveIntoShm(region, name, key_at, request.mutable_key());
  RETURN_IF_ERROR(client.RegisterSharedMemory(region.RegisterRequest(name)));
  absl::StatusOr<v1::EncodeResponse> response = client.Encode(request);
  const absl::Status unregistered = client.UnregisterSharedMemory(name);
  if (!response.ok()) return response.status();
  RETURN_IF_ERROR(unregistered);
  // mutable_key_output() would create an empty key_output where the scheme has no keys.
  std::vector<v1::Tensor*> outputs = {response->mutable_output()};
  if (response->has_key_output()) outputs.push_back(response->mutable_key_output());
  for (v1::Tensor* t : outputs) {
    if (!t->has_shm()) continue;  // e.g. CONCAT, answered inline
    ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes,
                     region.Slice(t->shm().offset(), t->shm().byte_size()));
    t->set_data(bytes.data(), bytes.size());
    t->clear_shm();
  }
  return response;
}

// EncodeStream: --count requests down one stream, then the rates.
int RunEncodeStream(const Flags& f, v1::EncodeRequest& request) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto print = f.Int("print", 8);
  if (!print.ok()) return UsageError(print.status());
  auto count = f.Int("count", 100);
  if (!count.ok()) return UsageError(count.status());
  if (*count < 1) return UsageError(absl::InvalidArgumentError("--count must be >= 1"));
  const std::string id_prefix = request.request_id().empty() ? "stream" : request.request_id();
  int64_t sent = 0;
  int64_t received = 0;
  size_t bytes_out = 0;
  v1::EncodeResponse last;
  const absl::Time start = absl::Now();
  absl::Status status = (*client)->EncodeStream(
      [&]() -> const v1::EncodeRequest* {
        if (sent == *count) return nullptr;
        request.set_request_id(absl::StrCat(id_prefix, "-", sent++));
        return &request;
      },
      [&](v1::EncodeResponse&& response) {
        if (response.has_error()) {  // every message is the same request: stop at the first
          return absl::Status(static_cast<absl::StatusCode>(response.error().code()),
                              response.error().message());
        }
        bytes_out += response.output().data().size() + response.key_output().data().size();
        ++received;
        if (received == *count) last = std::move(response);
        return absl::OkStatus();
      });
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) return RpcError("EncodeStream", status);
  const size_t bytes_in =
      static_cast<size_t>(*count) * (request.input().data().size() + request.key().data().size());
  PrintTensorSummary("last output", last.output(), *print);
  std::cout << absl::StrFormat(
      "%d responses in %.3f s: %.1f req/s, %.1f MiB/s sent, %.1f MiB/s received\n", received,
      seconds, received / seconds, bytes_in / seconds / (1 << 20), bytes_out / seconds / (1 << 20));
  return kExitOk;
}

int ReportEncode(const Flags& f, const v1::EncodeResponse& response, int64_t print,
                 absl::Duration elapsed) {
  PrintTensorSummary("output", response.output(), print);
  if (response.has_key_output()) PrintTensorSummary("key_output", response.key_output(), print);
  PrintElapsed(elapsed);
  if (int rc = WriteIfAsked(f, "output", response.output()); rc != kExitOk) return rc;
  if (!response.has_key_output()) return kExitOk;
  return WriteIfAsked(f, "key-output", response.key_output());
}

}  // namespace

int RunEncode(const Flags& f, bool stream) {
  auto request = BuildEncodeRequest(f);
  if (!request.ok()) return UsageError(request.status());
  if (stream) return RunEncodeStream(f, *request);
  auto by_reference = f.Bool("shm");
  if (!by_reference.ok()) return UsageError(by_reference.status());
  return TimedCall(
      f, "Encode",
      [&](PosencClient& client) {
        return *by_reference ? EncodeByReference(client, *request) : client.Encode(*request);
      },
      [&](const v1::EncodeResponse& response, int64_t print, absl::Duration elapsed) {
        return ReportEncode(f, response, print, elapsed);
      });
}

}  // namespace posenc::client
