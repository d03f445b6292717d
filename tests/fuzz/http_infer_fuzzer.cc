// The HTTP/REST binding's infer body: the bytes are a body (JSON header, then binary tensor
// data), optionally with an Inference-Header-Content-Length; parsed by ParseInferRequest,
// converted as the gRPC ModelInfer converts (ToNativeRequest), and the parsed tensors written
// back as an answer by WriteInferResponse, in JSON and in binary.
//
// Layout: byte 0 selects the model (mod the model count) and, in its top bit, whether a
// header length is given; bytes 1-2 are that length (little-endian); the rest is the body.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/http/infer_json.h"
#include "server/service/inference_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return -1;
  const auto& models = posenc::Models();
  const std::string& model = models[(data[0] & 0x7f) % models.size()].name;
  std::optional<size_t> header_length;
  if (data[0] & 0x80) header_length = size_t{data[1]} | size_t{data[2]} << 8;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);

  // Charged the JSON's size up front (half what the server charges, so that the parse grows
  // more often); an odd-sized input is refused every step past that.
  const bool refuse = (size & 1) != 0;
  const posenc::ParseBudget budget{body.size(), [refuse](uint64_t) {
                                     return refuse ? absl::ResourceExhaustedError("no more")
                                                   : absl::OkStatus();
                                   }};
  posenc::InferRequestBody parsed;
  const bool ok = posenc::ParseInferRequest(body, header_length, model, "", parsed, &budget).ok();
  // The same body read in two parts (as the server reads one with a header length) parses
  // to the same request, its binary part taken without a copy where it is one input's.
  if (header_length && *header_length <= body.size()) {
    std::string binary(body.substr(*header_length));
    posenc::InferRequestBody split;
    const bool split_ok = posenc::ParseInferRequest(body.substr(0, *header_length), binary,
                                                    *header_length, model, "", split, &budget)
                              .ok();
    if (split_ok != ok) __builtin_trap();
    if (ok && split.request.SerializeAsString() != parsed.request.SerializeAsString()) {
      __builtin_trap();
    }
  }
  if (!ok) return 0;

  // The parsed tensors as if they were the answer, in both encodings.
  inference::ModelInferResponse response;
  response.set_model_name(model);
  response.set_id(parsed.request.id());
  for (int i = 0; i < parsed.request.inputs_size(); ++i) {
    const auto& in = parsed.request.inputs(i);
    auto* out = response.add_outputs();
    out->set_name(in.name());
    out->set_datatype(in.datatype());
    *out->mutable_shape() = in.shape();
    *out->mutable_parameters() = in.parameters();
    response.add_raw_output_contents(i < parsed.request.raw_input_contents_size()
                                         ? parsed.request.raw_input_contents(i)
                                         : std::string());
  }
  for (bool binary : {false, true}) {
    posenc::OutputEncoding encoding = parsed.outputs;
    encoding.binary_default = binary;
    const posenc::InferResponseBody answer = posenc::WriteInferResponse(response, encoding);
    if (answer.json.empty()) __builtin_trap();
    // The HTTP front admits this bound before writing: it must hold for any answer.
    if (answer.json.size() > posenc::InferResponseJsonBytes(response, encoding)) __builtin_trap();
  }

  // The gRPC binding's conversion of the same request (no scheme runs here).
  (void)posenc::ToNativeRequest(parsed.request, posenc::ConvertOptions{});
  return 0;
}
