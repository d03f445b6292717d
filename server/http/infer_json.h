// The Open Inference Protocol's HTTP/REST inference body (KServe v2 REST, with Triton's
// binary tensor data extension) to and from the gRPC binding's messages: a POST
// /v2/models/{name}/infer body becomes the inference::ModelInferRequest the gRPC ModelInfer
// takes, and a ModelInferResponse becomes the HTTP answer. No scheme logic lives here: the
// request then takes the gRPC front's path (InferenceService::Infer).
// Stateless; thread-safe.
//
//   InferRequestBody parsed;
//   RETURN_IF_ERROR(ParseInferRequest(body, header_length, model_name, "", parsed));
//   ... service.Infer(parsed.request, ...) ...
//   InferResponseBody out = WriteInferResponse(response, parsed.outputs);
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"

namespace posenc {

// How each output goes back: as JSON "data" or as binary data after the JSON header.
struct OutputEncoding {
  bool binary_default = false;         // request parameter binary_data_output
  std::map<std::string, bool> binary;  // outputs[i].parameters.binary_data, by name
  bool Binary(const std::string& name) const {
    auto it = binary.find(name);
    return it == binary.end() ? binary_default : it->second;
  }
};

struct InferRequestBody {
  inference::ModelInferRequest request;
  OutputEncoding outputs;
};

// Parses an infer body for model `model_name` (version `model_version`, may be empty).
// `header_length` is the Inference-Header-Content-Length header: the JSON is that many
// leading bytes and each input with parameters.binary_data_size takes its bytes from what
// follows, in input order; without it the whole body is JSON. Every tensor goes into
// raw_input_contents (JSON "data" converted to little-endian bytes of its datatype),
// except inputs in shared memory. INVALID_ARGUMENT naming the field for malformed JSON, a
// header length past the body, binary sizes that do not add up to the body, or data that
// does not match its shape or datatype.
absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out);

// Parses an Inference-Header-Content-Length value: a decimal count of bytes.
absl::StatusOr<size_t> ParseHeaderLength(absl::string_view value);

// An HTTP infer answer: `json`, then the `binary` pieces in order (views into the
// response's raw_output_contents, which must outlive them). `header_length` is set when
// there are binary pieces (the Inference-Header-Content-Length to send).
struct InferResponseBody {
  std::string json;
  std::vector<absl::string_view> binary;
  size_t binary_bytes = 0;
};
InferResponseBody WriteInferResponse(const inference::ModelInferResponse& response,
                                     const OutputEncoding& outputs);

// `{"error": "<message>"}`, the protocol's error body.
std::string ErrorJson(absl::string_view message);

}  // namespace posenc
