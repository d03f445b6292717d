#include "server/http/infer_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/tensor/dtype.h"

namespace posenc {
namespace {

using nlohmann::json;

// Nested "data" arrays deeper than this are refused (tensors here have at most 5 axes).
constexpr int kMaxDataDepth = 32;
// Arrays and objects a request body may nest (the "data" arrays are bounded tighter above).
constexpr int kMaxJsonDepth = 64;

enum class Kind { kFloat, kSigned, kUnsigned, kBool };

struct Datatype {
  const char* name;
  size_t bytes;
  Kind kind;
};

constexpr Datatype kDatatypes[] = {{"BOOL", 1, Kind::kBool},       {"UINT8", 1, Kind::kUnsigned},
                                   {"UINT16", 2, Kind::kUnsigned}, {"UINT32", 4, Kind::kUnsigned},
                                   {"UINT64", 8, Kind::kUnsigned}, {"INT8", 1, Kind::kSigned},
                                   {"INT16", 2, Kind::kSigned},    {"INT32", 4, Kind::kSigned},
                                   {"INT64", 8, Kind::kSigned},    {"FP16", 2, Kind::kFloat},
                                   {"BF16", 2, Kind::kFloat},      {"FP32", 4, Kind::kFloat},
                                   {"FP64", 8, Kind::kFloat}};

const Datatype* FindDatatype(absl::string_view name) {
  for (const Datatype& d : kDatatypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is useful.
std::string ParseErrorText(const char* what) {
  absl::string_view text(what);
  if (!text.empty() && text[0] == '[') {
    const size_t end = text.find("] ");
    if (end != absl::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// One JSON parameter value as the gRPC binding's InferParameter. Objects and arrays (a
// "config" or "positions" written inline) become their JSON text, as the gRPC binding
// takes them in string parameters.
absl::Status ToParameter(const json& value, const std::string& what,
                         inference::InferParameter& out) {
  switch (value.type()) {
    case json::value_t::boolean: out.set_bool_param(value.get<bool>()); break;
    case json::value_t::number_integer: out.set_int64_param(value.get<int64_t>()); break;
    case json::value_t::number_unsigned: {
      const uint64_t v = value.get<uint64_t>();
      if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        out.set_int64_param(static_cast<int64_t>(v));
      } else {
        out.set_uint64_param(v);
      }
      break;
    }
    case json::value_t::number_float: out.set_double_param(value.get<double>()); break;
    case json::value_t::string: out.set_string_param(value.get<std::string>()); break;
    case json::value_t::object:
    case json::value_t::array: out.set_string_param(value.dump()); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(what, " is ", value.type_name(),
                                                     "; a parameter is a bool, number, "
                                                     "string or JSON object"));
  }
  return absl::OkStatus();
}

// Copies `params` into `out`, except the HTTP-only keys in `skip`.
absl::Status ToParameters(const json& params, const std::string& what,
                          std::initializer_list<absl::string_view> skip,
                          google::protobuf::Map<std::string, inference::InferParameter>& out) {
  if (!params.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a JSON object"));
  }
  for (const auto& [key, value] : params.items()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    RETURN_IF_ERROR(ToParameter(value, absl::StrCat(what, ".", key), out[key]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> StringField(const json& object, const char* key,
                                        const std::string& what, bool required) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(absl::StrCat(what, ".", key, " is missing"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".", key, " must be a string, not ", it->type_name()));
  }
  return it->get<std::string>();
}

// Whether the tensor parameter `key` is true; INVALID_ARGUMENT when it is not a bool.
absl::StatusOr<bool> BoolParam(const json& params, const char* key, const std::string& what) {
  if (!params.is_object()) return false;
  auto it = params.find(key);
  if (it == params.end()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".parameters.", key, " must be true or false"));
  }
  return it->get<bool>();
}

// The shape's element count, checked: every dimension >= 0, the product bounded by
// `limit` (no tensor of a body can hold more elements than the body has bytes, except
// the empty ones).
absl::StatusOr<int64_t> ParseShape(const json& tensor, const std::string& what,
                                   inference::ModelInferRequest::InferInputTensor& out) {
  auto it = tensor.find("shape");
  if (it == tensor.end())
    return absl::InvalidArgumentError(absl::StrCat(what, ".shape is missing"));
  if (!it->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".shape must be an array of integers"));
  }
  int64_t count = 1;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& dim = (*it)[i];
    if (!dim.is_number_integer() ||
        (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<int64_t>() < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".shape[", i, "] must be an integer >= 0"));
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d > (uint64_t{1} << 40) ||
        (count > 0 && d > 0 && static_cast<uint64_t>(count) > (uint64_t{1} << 48) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".shape has more elements than any request can carry"));
    }
    count *= static_cast<int64_t>(d);
    out.add_shape(static_cast<int64_t>(d));
  }
  return count;
}

absl::Status OutOfRange(const std::string& what, int64_t index, const char* type) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ".data[", index, "] is out of range for ", type));
}

// A JSON number as the little-endian bytes of a floating-point `type` in `buf`.
absl::Status FloatElement(const json& v, const Datatype& type, const std::string& what,
                          int64_t index, char* buf) {
  if (!v.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".data[", index, "] is ", v.type_name(), ", not a number"));
  }
  const double d = v.get<double>();
  const float f = static_cast<float>(d);
  if (!std::isfinite(d) || (type.bytes < 8 && !std::isfinite(f))) {
    return OutOfRange(what, index, type.name);
  }
  if (type.bytes == 8) {
    std::memcpy(buf, &d, 8);
  } else if (type.bytes == 4) {
    std::memcpy(buf, &f, 4);
  } else {
    const uint16_t h = std::string_view(type.name) == "BF16" ? FloatToBFloat16(f) : FloatToHalf(f);
    if (std::string_view(type.name) == "FP16" && !std::isfinite(HalfToFloat(h))) {
      return OutOfRange(what, index, "FP16");
    }
    std::memcpy(buf, &h, 2);
  }
  return absl::OkStatus();
}

// A JSON integer as the little-endian bytes of an integer `type` in `buf`.
absl::Status IntegerElement(const json& v, const Datatype& type, const std::string& what,
                            int64_t index, char* buf) {
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".data[", index, "] is ",
                                                   v.is_number() ? "not an integer" : v.type_name(),
                                                   "; ", type.name, " needs integers"));
  }
  const int bits = static_cast<int>(type.bytes) * 8;
  uint64_t raw = 0;
  if (type.kind == Kind::kUnsigned) {
    const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    const uint64_t u = negative ? 0 : v.get<uint64_t>();
    if (negative || (bits < 64 && u >> bits != 0)) return OutOfRange(what, index, type.name);
    raw = u;
  } else {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return OutOfRange(what, index, type.name);
    }
    const int64_t s = v.get<int64_t>();
    if (bits < 64 && (s < -(int64_t{1} << (bits - 1)) || s >= (int64_t{1} << (bits - 1)))) {
      return OutOfRange(what, index, type.name);
    }
    raw = static_cast<uint64_t>(s);
  }
  std::memcpy(buf, &raw, type.bytes);  // little-endian host
  return absl::OkStatus();
}

// Appends one JSON element as little-endian bytes of `type`.
absl::Status AppendElement(const json& v, const Datatype& type, const std::string& what,
                           int64_t index, std::string& bytes) {
  char buf[8];
  switch (type.kind) {
    case Kind::kBool:
      if (!v.is_boolean()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ".data[", index, "] must be true or false for BOOL"));
      }
      buf[0] = v.get<bool>() ? 1 : 0;
      break;
    case Kind::kFloat: RETURN_IF_ERROR(FloatElement(v, type, what, index, buf)); break;
    case Kind::kSigned:
    case Kind::kUnsigned: RETURN_IF_ERROR(IntegerElement(v, type, what, index, buf)); break;
  }
  bytes.append(buf, type.bytes);
  return absl::OkStatus();
}

// "data" (flat, or nested row-major as KServe allows) as bytes; exactly `count` elements.
absl::Status DataBytes(const json& data, const Datatype& type, int64_t count,
                       const std::string& what, size_t json_bytes, std::string& bytes) {
  if (!data.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".data must be an array"));
  }
  // Every element takes at least one character of the JSON, so this bounds the reserve.
  const uint64_t wanted = static_cast<uint64_t>(count) * type.bytes;
  bytes.reserve(static_cast<size_t>(std::min<uint64_t>(wanted, json_bytes * type.bytes)));
  std::vector<std::pair<const json*, size_t>> stack{{&data, 0}};
  int64_t n = 0;
  while (!stack.empty()) {
    auto& [array, next] = stack.back();
    if (next == array->size()) {
      stack.pop_back();
      continue;
    }
    const json& element = (*array)[next++];
    if (element.is_array()) {
      if (stack.size() >= kMaxDataDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ".data is nested deeper than ", kMaxDataDepth, " arrays"));
      }
      stack.emplace_back(&element, 0);
      continue;
    }
    if (n == count) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".data has more than the ", count, " elements its shape holds"));
    }
    RETURN_IF_ERROR(AppendElement(element, type, what, n, bytes));
    ++n;
  }
  if (n != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".data has ", n, " elements; its shape holds ", count));
  }
  return absl::OkStatus();
}

// An input's name, datatype, shape and parameters into `in`; `what` gains its name. Returns
// its datatype and element count.
absl::StatusOr<std::pair<const Datatype*, int64_t>> ParseInputHeader(
    const json& t, std::string& what, inference::ModelInferRequest::InferInputTensor& in) {
  if (!t.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " must be an object"));
  ASSIGN_OR_RETURN(*in.mutable_name(), StringField(t, "name", what, true));
  what = absl::StrCat(what, " ('", in.name(), "')");
  ASSIGN_OR_RETURN(*in.mutable_datatype(), StringField(t, "datatype", what, true));
  const Datatype* type = FindDatatype(in.datatype());
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".datatype '", in.datatype(),
                                                   "' is not one of BOOL, UINT8..UINT64, "
                                                   "INT8..INT64, FP16, BF16, FP32, FP64"));
  }
  ASSIGN_OR_RETURN(const int64_t count, ParseShape(t, what, in));
  auto params = t.find("parameters");
  if (params != t.end()) {
    RETURN_IF_ERROR(ToParameters(*params, what + ".parameters", {"binary_data_size"},
                                 *in.mutable_parameters()));
  }
  return std::make_pair(type, count);
}

// inputs[i]: its data from "data", from the binary part after the JSON (at `offset`, which
// advances), or from its shared-memory region (read later).
absl::Status ParseInput(const json& t, size_t i, absl::string_view binary, size_t json_bytes,
                        size_t& offset, inference::ModelInferRequest& request) {
  std::string what = absl::StrCat("inputs[", i, "]");
  auto* in = request.add_inputs();
  ASSIGN_OR_RETURN(const auto header, ParseInputHeader(t, what, *in));
  auto data = t.find("data");
  auto params = t.find("parameters");
  const auto size_it = params != t.end() ? params->find("binary_data_size") : t.end();
  if (params != t.end() && size_it != params->end()) {
    const json& size_value = *size_it;
    if (!size_value.is_number_unsigned()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".parameters.binary_data_size must be an integer >= 0"));
    }
    if (data != t.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has both data and parameters.binary_data_size"));
    }
    const uint64_t size = size_value.get<uint64_t>();
    if (size > binary.size() - offset) {
      return absl::InvalidArgumentError(absl::StrCat(what, ".parameters.binary_data_size is ", size,
                                                     " but only ", binary.size() - offset,
                                                     " bytes of binary data are left in the body"));
    }
    request.add_raw_input_contents()->assign(binary.data() + offset, size);
    offset += size;
    return absl::OkStatus();
  }
  if (in->parameters().count("shared_memory_region")) {
    if (data == t.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has both data and parameters.shared_memory_region"));
  }
  if (data == t.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has no data, parameters.binary_data_size or parameters.shared_memory_region"));
  }
  return DataBytes(*data, *header.first, header.second, what, json_bytes,
                   *request.add_raw_input_contents());
}

absl::Status ParseInputs(const json& inputs, absl::string_view binary, size_t json_bytes,
                         inference::ModelInferRequest& request) {
  if (!inputs.is_array()) {
    return absl::InvalidArgumentError("inputs must be an array of tensors");
  }
  size_t offset = 0;  // into `binary`
  for (size_t i = 0; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(ParseInput(inputs[i], i, binary, json_bytes, offset, request));
  }
  if (offset != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body has ", binary.size(),
        " bytes of binary data after the JSON header "
        "(Inference-Header-Content-Length), but the inputs' binary_data_size add up to ",
        offset));
  }
  return absl::OkStatus();
}

absl::Status ParseOutputs(const json& outputs, InferRequestBody& out) {
  if (!outputs.is_array()) {
    return absl::InvalidArgumentError("outputs must be an array");
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json& o = outputs[i];
    std::string what = absl::StrCat("outputs[", i, "]");
    if (!o.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " must be an object"));
    auto* requested = out.request.add_outputs();
    ASSIGN_OR_RETURN(*requested->mutable_name(), StringField(o, "name", what, true));
    what = absl::StrCat(what, " ('", requested->name(), "')");
    auto params = o.find("parameters");
    if (params == o.end()) continue;
    RETURN_IF_ERROR(ToParameters(*params, what + ".parameters", {"binary_data"},
                                 *requested->mutable_parameters()));
    if (params->contains("binary_data")) {
      ASSIGN_OR_RETURN(out.outputs.binary[requested->name()],
                       BoolParam(*params, "binary_data", what));
    }
  }
  return absl::OkStatus();
}

// A JSON string literal; bytes that are not UTF-8 become U+FFFD.
std::string Quote(absl::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Appends the elements of raw little-endian bytes of `type` as JSON numbers or bools.
// One floating-point element of `type` at `p` as text into buf; null when not finite.
char* FormatFloat(const char* p, const Datatype& type, char* buf, size_t size) {
  if (type.bytes == 8) {
    double d = 0;
    std::memcpy(&d, p, 8);
    return std::isfinite(d) ? std::to_chars(buf, buf + size, d).ptr : nullptr;
  }
  float f = 0;
  if (type.bytes == 4) {
    std::memcpy(&f, p, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    f = std::string_view(type.name) == "BF16" ? BFloat16ToFloat(h) : HalfToFloat(h);
  }
  return std::isfinite(f) ? std::to_chars(buf, buf + size, f).ptr : nullptr;
}

void AppendData(absl::string_view raw, const Datatype& type, std::string& out) {
  const size_t n = raw.size() / type.bytes;
  out.reserve(out.size() + n * 12 + 2);
  out.push_back('[');
  char buf[64];
  for (size_t i = 0; i < n; ++i) {
    if (i) out.push_back(',');
    const char* p = raw.data() + i * type.bytes;
    char* end = buf;
    switch (type.kind) {
      case Kind::kBool: {
        out.append(*p ? "true" : "false");
        continue;
      }
      case Kind::kFloat:
        end = FormatFloat(p, type, buf, sizeof(buf));
        if (end == nullptr) {  // JSON has no NaN or infinity (the engine never returns them)
          out.append("null");
          continue;
        }
        break;
      case Kind::kSigned: {
        int64_t v = 0;
        if (type.bytes == 1) v = *reinterpret_cast<const int8_t*>(p);
        if (type.bytes == 2) {
          int16_t x;
          std::memcpy(&x, p, 2);
          v = x;
        }
        if (type.bytes == 4) {
          int32_t x;
          std::memcpy(&x, p, 4);
          v = x;
        }
        if (type.bytes == 8) std::memcpy(&v, p, 8);
        end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
        break;
      }
      case Kind::kUnsigned: {
        uint64_t v = 0;
        std::memcpy(&v, p, type.bytes);
        end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
        break;
      }
    }
    out.append(buf, static_cast<size_t>(end - buf));
  }
  out.push_back(']');
}

void AppendParameter(const inference::InferParameter& p, std::string& out) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      out.append(p.bool_param() ? "true" : "false");
      break;
    case inference::InferParameter::kInt64Param: absl::StrAppend(&out, p.int64_param()); break;
    case inference::InferParameter::kUint64Param: absl::StrAppend(&out, p.uint64_param()); break;
    case inference::InferParameter::kDoubleParam: out.append(json(p.double_param()).dump()); break;
    case inference::InferParameter::kStringParam: out.append(Quote(p.string_param())); break;
    default: out.append("null"); break;
  }
}

// `"parameters":{...}` from `params` plus `extra` (already JSON), or nothing if both empty.
void AppendParameters(const google::protobuf::Map<std::string, inference::InferParameter>& params,
                      const std::string& extra, std::string& out) {
  if (params.empty() && extra.empty()) return;
  out.append(",\"parameters\":{");
  bool first = true;
  for (const auto& [key, value] : params) {
    if (!first) out.push_back(',');
    first = false;
    out.append(Quote(key));
    out.push_back(':');
    AppendParameter(value, out);
  }
  if (!extra.empty()) {
    if (!first) out.push_back(',');
    out.append(extra);
  }
  out.push_back('}');
}

}  // namespace

absl::StatusOr<size_t> ParseHeaderLength(absl::string_view value) {
  uint64_t n = 0;
  if (value.empty() || value.size() > 19 || !absl::SimpleAtoi(value, &n) ||
      value.find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length '", value, "' is not a byte count"));
  }
  return static_cast<size_t>(n);
}

absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out) {
  const size_t json_bytes = header_length.value_or(body.size());
  if (json_bytes > body.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length is ",
                                                   json_bytes, ", past the body's ", body.size(),
                                                   " bytes"));
  }
  json request;
  bool too_deep = false;
  // Nesting is bounded while parsing: every later step that walks a value (dump(), the
  // destructor of a deep array) recurses once per level, so an unbounded body could
  // exhaust the I/O thread's stack.
  const json::parser_callback_t bound_depth = [&too_deep](int depth, json::parse_event_t event,
                                                          json&) {
    if (depth > kMaxJsonDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start)) {
      too_deep = true;
      throw std::length_error("nesting");
    }
    return true;
  };
  try {
    request = json::parse(body.begin(), body.begin() + json_bytes, bound_depth);
  } catch (const std::length_error&) {
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", ParseErrorText(e.what())));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is nested deeper than ",
                                                   kMaxJsonDepth, " levels of arrays and objects"));
  }
  if (!request.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  out.request.set_model_name(model_name);
  out.request.set_model_version(model_version);
  ASSIGN_OR_RETURN(*out.request.mutable_id(), StringField(request, "id", "request", false));
  auto params = request.find("parameters");
  if (params != request.end()) {
    RETURN_IF_ERROR(ToParameters(*params, "parameters", {"binary_data_output"},
                                 *out.request.mutable_parameters()));
    ASSIGN_OR_RETURN(out.outputs.binary_default,
                     BoolParam(*params, "binary_data_output", "request"));
  }
  auto inputs = request.find("inputs");
  if (inputs == request.end()) return absl::InvalidArgumentError("inputs is missing");
  RETURN_IF_ERROR(ParseInputs(*inputs, body.substr(json_bytes), json_bytes, out.request));
  auto outputs = request.find("outputs");
  if (outputs != request.end()) RETURN_IF_ERROR(ParseOutputs(*outputs, out));
  return absl::OkStatus();
}

InferResponseBody WriteInferResponse(const inference::ModelInferResponse& response,
                                     const OutputEncoding& outputs) {
  InferResponseBody body;
  std::string& out = body.json;
  out.append("{\"model_name\":");
  out.append(Quote(response.model_name()));
  out.append(",\"model_version\":");
  out.append(Quote(response.model_version()));
  if (!response.id().empty()) {
    out.append(",\"id\":");
    out.append(Quote(response.id()));
  }
  AppendParameters(response.parameters(), "", out);
  out.append(",\"outputs\":[");
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    if (i) out.push_back(',');
    out.append("{\"name\":");
    out.append(Quote(o.name()));
    out.append(",\"datatype\":");
    out.append(Quote(o.datatype()));
    out.append(",\"shape\":[");
    out.append(absl::StrJoin(o.shape(), ","));
    out.push_back(']');
    const bool in_shm = o.parameters().count("shared_memory_region") != 0;
    const absl::string_view raw = i < response.raw_output_contents_size()
                                      ? absl::string_view(response.raw_output_contents(i))
                                      : absl::string_view();
    const Datatype* type = FindDatatype(o.datatype());
    const bool binary = !in_shm && (outputs.Binary(o.name()) || type == nullptr);
    AppendParameters(o.parameters(),
                     binary ? absl::StrCat("\"binary_data_size\":", raw.size()) : "", out);
    if (binary) {
      body.binary.push_back(raw);
      body.binary_bytes += raw.size();
    } else if (!in_shm) {
      out.append(",\"data\":");
      AppendData(raw, *type, out);
    }
    out.push_back('}');
  }
  out.append("]}");
  return body;
}

std::string ErrorJson(absl::string_view message) {
  return absl::StrCat("{\"error\":", Quote(message), "}");
}

}  // namespace posenc
