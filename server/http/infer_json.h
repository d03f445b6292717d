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
#include <cstdint>
#include <functional>
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

// What a parse may hold besides the body. The caller charged `charged` bytes to its memory
// budget; past that the parser asks `grow` for more (in steps of at least 1 MiB), and a
// non-OK answer ends the parse with that status. Without a ParseBudget nothing is asked.
struct ParseBudget {
  uint64_t charged = 0;
  std::function<absl::Status(uint64_t more)> grow;
};

// What to charge per byte of JSON before parsing it: the parse holds no document, only what
// the request keeps (tensors, shapes, strings, parameters) and the lexer's token buffer. Its
// worst case per byte of JSON: 2 bytes for 4-byte tensors from "0," elements (FP32, INT32;
// 2-byte and 1-byte types less), and 2 for strings (a kept copy and the lexer's buffer, whose
// capacity is at most twice the longest string); elements of 8-byte types ("0," as 8 bytes,
// 4 per byte) and parameter text (a float such as 1e15 dumps as 18 characters) can take more,
// which the parser then asks for through ParseBudget::grow.
inline constexpr uint64_t kJsonParseBytesPerByte = 2;

// Parses an infer body for model `model_name` (version `model_version`, may be empty).
// `header_length` is the Inference-Header-Content-Length header: the JSON is that many
// leading bytes and each input with parameters.binary_data_size takes its bytes from what
// follows, in input order; without it the whole body is JSON. Every tensor goes into
// raw_input_contents (JSON "data" converted to little-endian bytes of its datatype),
// except inputs in shared memory. INVALID_ARGUMENT naming the field for malformed JSON, a
// header length past the body, binary sizes that do not add up to the body, or data that
// does not match its shape or datatype; `budget`'s refusal when the parse outgrows it. One
// pass over the JSON (nlohmann's SAX parser), nothing recursing per level of nesting; the
// body's arrays and objects nest at most 64 deep, "data" arrays at most 32.
absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out, const ParseBudget* budget = nullptr);
// The same for a body read in two parts (HttpRequest::body_split at `header_length`): `json`
// its first part (shorter than `header_length` only when the body was), `binary` the rest.
// An input whose binary data is all of `binary` takes its buffer without a copy, leaving
// `binary` empty; any other input copies its bytes out of it.
absl::Status ParseInferRequest(absl::string_view json, std::string& binary, size_t header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out, const ParseBudget* budget = nullptr);

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

// At least the bytes of WriteInferResponse's JSON text for `response` (its binary outputs
// excluded): each element at the longest text of its datatype (a float32 15 characters, a
// float64 24) and the rest at its escaped worst. The text is built whole before it is
// sent, so the HTTP front admits this much beside the call; the writer reserves it.
size_t InferResponseJsonBytes(const inference::ModelInferResponse& response,
                              const OutputEncoding& outputs);

// `{"error": "<message>"}`, the protocol's error body.
std::string ErrorJson(absl::string_view message);

}  // namespace posenc
