#include "server/service/inference_convert.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/service/arena_block.h"
#include "server/service/positions_json.h"

namespace posenc {

absl::StatusOr<std::optional<int64_t>> IntParam(
    const google::protobuf::Map<std::string, oip::InferParameter>& params, absl::string_view name) {
  auto it = params.find(std::string_view(name.data(), name.size()));
  if (it == params.end()) return std::optional<int64_t>();
  const oip::InferParameter& p = it->second;
  if (p.has_int64_param()) return std::optional<int64_t>(p.int64_param());
  if (p.has_uint64_param() &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::optional<int64_t>(static_cast<int64_t>(p.uint64_param()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", name, "' must be an int64 (int64_param)"));
}

namespace {

using InferInput = oip::ModelInferRequest::InferInputTensor;
using Parameters = google::protobuf::Map<std::string, oip::InferParameter>;

// Request parameters Triton's clients may send that mean nothing to posenc.
bool IsReservedParameter(absl::string_view name) {
  for (const char* r : {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
                        "binary_data_output", "headers", "triton_enable_empty_final_response"}) {
    if (name == r) return true;
  }
  return false;
}

int64_t ElementBytes(absl::string_view datatype) {
  if (datatype == "FP16" || datatype == "BF16") return 2;
  if (datatype == "INT64" || datatype == "FP64") return 8;
  return 4;  // FP32, INT32 (others were refused before)
}

absl::StatusOr<v1::DType> NativeDType(absl::string_view datatype) {
  if (datatype == "FP32") return v1::FLOAT32;
  if (datatype == "FP16") return v1::FLOAT16;
  if (datatype == "BF16") return v1::BFLOAT16;
  if (datatype == "INT32") return v1::INT32;
  if (datatype == "INT64") return v1::INT64;
  return absl::InvalidArgumentError(absl::StrCat("datatype ", datatype, " has no native dtype"));
}

// ---------------------------------------------------------------------------------------
// Parameters.

// The parameter's text, pointing into `params`; null when it is not given.
absl::StatusOr<const std::string*> StringParam(const Parameters& params, absl::string_view name) {
  auto it = params.find(std::string_view(name.data(), name.size()));
  if (it == params.end()) return nullptr;
  if (!it->second.has_string_param()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be a string (string_param)"));
  }
  return &it->second.string_param();
}

// JSON parameters are parsed before admission (their cost is not known until then), so
// their size is bounded first. Larger positions go as a position_ids input tensor.
constexpr size_t kMaxConfigJsonBytes = size_t{64} << 10;
constexpr size_t kMaxPositionsJsonBytes = size_t{1} << 20;

absl::Status CheckJsonSize(const std::string& json, absl::string_view name, size_t max) {
  if (json.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", name, "' is ", json.size(), " bytes of JSON, over ", max,
                   name == "positions" ? "; send positions as a position_ids input tensor" : ""));
}

absl::Status CheckParameters(const ModelInfo& model, const Parameters& params) {
  for (const auto& [name, value] : params) {
    if (IsReservedParameter(name)) continue;
    const std::vector<std::string>& known = model.model.parameters;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is not one of model '", model.name,
                       "''s parameters: ", absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

// The `config` parameter (protobuf JSON) into the scheme message.
absl::Status ParseConfig(const Parameters& params, const std::string& model,
                         google::protobuf::Message* message) {
  ASSIGN_OR_RETURN(const std::string* json, StringParam(params, "config"));
  if (json == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CheckJsonSize(*json, "config", kMaxConfigJsonBytes));
  google::protobuf::util::JsonParseOptions options;  // unknown fields are errors
  const auto status = google::protobuf::util::JsonStringToMessage(*json, message, options);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "parameter 'config' is not a ", message->GetDescriptor()->full_name(),
      " message in protobuf JSON (model '", model, "'): ", std::string(status.message())));
}

// ---------------------------------------------------------------------------------------
// Input tensors.

// An input with its bytes taken from the request (raw or typed contents), or its region.
struct Input {
  const InferInput* tensor = nullptr;
  std::string bytes;
  std::optional<v1::SharedMemoryRef> shm;
};

absl::StatusOr<int64_t> ElementCount(const InferInput& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name(), "' has shape [", absl::StrJoin(t.shape(), ","),
                       "]; every dimension must be >= 0 and the product must fit memory"));
    }
  }
  return n;
}

// Typed contents as little-endian bytes (FP16 and BF16 have no typed field).
absl::StatusOr<std::string> ContentBytes(const InferInput& t, int64_t count) {
  const oip::InferTensorContents& c = t.contents();
  const void* data = nullptr;
  int64_t size = 0;
  const std::string& type = t.datatype();
  if (type == "FP32") data = c.fp32_contents().data(), size = c.fp32_contents_size();
  if (type == "INT32") data = c.int_contents().data(), size = c.int_contents_size();
  if (type == "INT64") data = c.int64_contents().data(), size = c.int64_contents_size();
  if (type == "FP64") data = c.fp64_contents().data(), size = c.fp64_contents_size();
  if (type == "FP16" || type == "BF16") {
    return absl::InvalidArgumentError(absl::StrCat("input '", t.name(), "' is ", type,
                                                   ", which has no typed contents; send it in "
                                                   "raw_input_contents"));
  }
  if (size != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected number of elements for input '", t.name(), "': shape [",
                     absl::StrJoin(t.shape(), ","), "] has ", count, ", its contents hold ", size));
  }
  return std::string(static_cast<const char*>(data),
                     static_cast<size_t>(count * ElementBytes(type)));
}

// The Triton tensor parameters shared_memory_region/_byte_size/_offset, if present.
// `kind` ("input" or "output") and `name` name the tensor in errors.
absl::StatusOr<std::optional<v1::SharedMemoryRef>> ShmRefOf(const Parameters& params,
                                                            absl::string_view kind,
                                                            absl::string_view name,
                                                            const ConvertOptions& options) {
  ASSIGN_OR_RETURN(const std::string* region, StringParam(params, "shared_memory_region"));
  if (region == nullptr) return std::optional<v1::SharedMemoryRef>();
  if (!options.shm_enabled) {
    return absl::FailedPreconditionError(
        absl::StrCat(kind, " '", name, "' names shared_memory_region '", *region,
                     "', but shared memory is off; start posenc-server with --shm"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> size, IntParam(params, "shared_memory_byte_size"));
  ASSIGN_OR_RETURN(std::optional<int64_t> offset, IntParam(params, "shared_memory_offset"));
  if (!size || *size < 0 || offset.value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", name, "' needs shared_memory_byte_size >= 0 (and shared_memory_offset >= 0)"));
  }
  v1::SharedMemoryRef ref;
  ref.set_region(*region);
  ref.set_byte_size(static_cast<uint64_t>(*size));
  ref.set_offset(static_cast<uint64_t>(offset.value_or(0)));
  return std::optional<v1::SharedMemoryRef>(ref);
}

const ModelTensor* FindTensor(const std::vector<ModelTensor>& tensors, absl::string_view name) {
  for (const ModelTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Checks one input against the model and takes its bytes. `raw` is the next unread
// raw_input_contents entry, or null when the request uses typed contents.
absl::StatusOr<Input> TakeInput(const ModelInfo& model, InferInput& t, std::string* raw,
                                const ConvertOptions& options) {
  const ModelTensor* spec = FindTensor(model.model.inputs, t.name());
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected inference input '", t.name(), "' for model '", model.name, "'"));
  }
  if (std::find(spec->datatypes.begin(), spec->datatypes.end(), t.datatype()) ==
      spec->datatypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inference input '", t.name(), "' data-type is '", t.datatype(), "', but model '",
        model.name, "' expects ", absl::StrJoin(spec->datatypes, ", ")));
  }
  ASSIGN_OR_RETURN(const int64_t count, ElementCount(t));
  const int64_t expected = count * ElementBytes(t.datatype());
  Input in;
  in.tensor = &t;
  ASSIGN_OR_RETURN(in.shm, ShmRefOf(t.parameters(), "input", t.name(), options));
  if (in.shm) {
    if (static_cast<int64_t>(in.shm->byte_size()) != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name(), "': shared_memory_byte_size is ", in.shm->byte_size(),
                       "; shape and datatype need ", expected));
    }
    return in;
  }
  if (raw == nullptr) {
    ASSIGN_OR_RETURN(in.bytes, ContentBytes(t, count));
    return in;
  }
  if (t.has_contents()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", t.name(), "' has contents; they must be empty when raw_input_contents is used"));
  }
  if (static_cast<int64_t>(raw->size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("input byte size mismatch for input '", t.name(),
                                                   "' for model '", model.name, "'. Expected ",
                                                   expected, ", got ", raw->size()));
  }
  in.bytes.swap(*raw);
  return in;
}

// Every input of the request, checked, by name; required ones present, none twice.
absl::StatusOr<std::vector<Input>> TakeInputs(const ModelInfo& model,
                                              oip::ModelInferRequest& request,
                                              const ConvertOptions& options) {
  std::vector<Input> inputs;
  int raw_used = 0;
  const bool use_raw = request.raw_input_contents_size() > 0;
  for (InferInput& t : *request.mutable_inputs()) {
    for (const Input& seen : inputs) {
      if (seen.tensor->name() == t.name()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", t.name(), "' is given more than once"));
      }
    }
    const bool in_shm = t.parameters().count("shared_memory_region") != 0;
    std::string* raw = nullptr;
    if (use_raw && !in_shm) {
      if (raw_used >= request.raw_input_contents_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                         " entries; input '", t.name(), "' has none"));
      }
      raw = request.mutable_raw_input_contents(raw_used++);
    }
    ASSIGN_OR_RETURN(Input in, TakeInput(model, t, raw, options));
    inputs.push_back(std::move(in));
  }
  if (use_raw && raw_used != request.raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents has ",
                                                   request.raw_input_contents_size(),
                                                   " entries for ", raw_used, " inputs"));
  }
  for (const ModelTensor& spec : model.model.inputs) {
    const bool given = std::any_of(inputs.begin(), inputs.end(),
                                   [&](const Input& in) { return in.tensor->name() == spec.name; });
    if (!spec.optional && !given) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model.name, "' needs input '", spec.name, "'"));
    }
  }
  return inputs;
}

const Input* Named(const std::vector<Input>& inputs, absl::string_view name) {
  for (const Input& in : inputs) {
    if (in.tensor->name() == name) return &in;
  }
  return nullptr;
}

// A float input as a native Tensor (its bytes moved, or its region referenced).
absl::Status ToNativeTensor(Input& in, v1::Tensor* out) {
  ASSIGN_OR_RETURN(const v1::DType dtype, NativeDType(in.tensor->datatype()));
  out->set_dtype(dtype);
  out->mutable_shape()->Add(in.tensor->shape().begin(), in.tensor->shape().end());
  if (in.shm) {
    *out->mutable_shm() = *in.shm;
  } else {
    out->mutable_data()->swap(in.bytes);
  }
  return absl::OkStatus();
}

// An INT64/INT32 (or FP64/FP32) input's values, which go into repeated native fields.
template <typename T>
absl::StatusOr<std::vector<T>> Values(const Input& in) {
  if (in.shm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", in.tensor->name(), "' cannot come through shared memory; send it inline"));
  }
  const std::string& type = in.tensor->datatype();
  const size_t n = in.bytes.size() / static_cast<size_t>(ElementBytes(type));
  std::vector<T> out(n);
  auto widen = [&](auto tag) {
    using S = decltype(tag);
    for (size_t i = 0; i < n; ++i) {
      S v;
      std::memcpy(&v, in.bytes.data() + i * sizeof(S), sizeof(S));
      out[i] = static_cast<T>(v);
    }
  };
  if (type == "INT64") widen(int64_t{});
  if (type == "INT32") widen(int32_t{});
  if (type == "FP64") widen(double{});
  if (type == "FP32") widen(float{});
  return out;
}

// ---------------------------------------------------------------------------------------
// Per kind.

// The `config` parameter into the model's scheme message (which selects the scheme).
absl::Status SchemeMessageOf(const ModelInfo& model, const Parameters& params,
                             v1::EncodeRequest& r) {
  google::protobuf::Message* scheme = MutableSchemeMessage(r, model.encode_case);
  if (scheme == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.name, "' is not served by Encode"));
  }
  return ParseConfig(params, model.name, scheme);
}

absl::Status PositionsOf(const Parameters& params, std::vector<Input>& inputs,
                         v1::Positions& positions) {
  ASSIGN_OR_RETURN(const std::string* json, StringParam(params, "positions"));
  if (json != nullptr) {
    RETURN_IF_ERROR(CheckJsonSize(*json, "positions", kMaxPositionsJsonBytes));
    if (absl::Status status = ParsePositionsJson(*json, positions); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter 'positions' is not a Positions message in protobuf JSON: ", status.message()));
    }
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> offset, IntParam(params, "position_offset"));
  if (offset) {
    if (positions.offsets_size() > 0) {
      return absl::InvalidArgumentError("give positions.offsets or position_offset, not both");
    }
    positions.add_offsets(*offset);
  }
  if (const Input* ids = Named(inputs, "position_ids")) {
    if (positions.ids_size() > 0) {
      return absl::InvalidArgumentError("give positions.ids or input 'position_ids', not both");
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> v, Values<int64_t>(*ids));
    positions.mutable_ids()->Add(v.begin(), v.end());
  }
  if (const Input* axis_ids = Named(inputs, "axis_ids")) {
    // [num_axes, seq] or [num_axes, batch, seq]: row-major, as Positions.axis_ids.
    const size_t rank = static_cast<size_t>(axis_ids->tensor->shape_size());
    if (rank != 2 && rank != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'axis_ids' has shape [", absl::StrJoin(axis_ids->tensor->shape(), ","),
          "]; it must be [num_axes, seq] or [num_axes, batch, seq]"));
    }
    if (positions.axis_ids_size() > 0) {
      return absl::InvalidArgumentError("give positions.axis_ids or input 'axis_ids', not both");
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> v, Values<int64_t>(*axis_ids));
    positions.mutable_axis_ids()->Add(v.begin(), v.end());
  }
  if (const Input* values = Named(inputs, "position_values")) {
    if (positions.values_size() > 0) {
      return absl::InvalidArgumentError(
          "give positions.values or input 'position_values', not both");
    }
    ASSIGN_OR_RETURN(std::vector<double> v, Values<double>(*values));
    positions.mutable_values()->Add(v.begin(), v.end());
  }
  return absl::OkStatus();
}

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The tokens `input` holds, as the scheme reads them: [batch, seq] (batch 1 for a rank-2
// additive input or a THD rope input). nullopt when the rank is not one the scheme takes;
// its own checks then name the input.
struct TokenGrid {
  int64_t batch = 0;
  int64_t seq = 0;
};
std::optional<TokenGrid> TokenGridOf(const v1::EncodeRequest& r, const Input& input) {
  const auto& in = input.tensor->shape();
  if (r.has_rope()) {
    const v1::RopeLayout layout = r.rope().layout();
    if (layout == v1::THD && in.size() == 3) return TokenGrid{1, in[0]};
    if (layout != v1::THD && in.size() == 4) {
      return TokenGrid{in[0], in[layout == v1::BHSD ? 2 : 1]};
    }
    return std::nullopt;
  }
  if (in.size() == 3) return TokenGrid{in[0], in[1]};
  if (in.size() == 2) return TokenGrid{1, in[0]};
  return std::nullopt;
}

// `lead` followed by `tail`, as a shape.
std::vector<int64_t> Joined(std::initializer_list<int64_t> lead, const std::vector<int64_t>& tail) {
  std::vector<int64_t> out(lead);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

// A per-token input of `name`: [seq] + tail or [batch, seq] + tail for each tail in
// `tails`, with the batch and seq of `input`. Refused otherwise, naming both shapes.
absl::Status CheckPerToken(const std::vector<Input>& inputs, absl::string_view name,
                           const std::vector<std::vector<int64_t>>& tails,
                           const v1::EncodeRequest& r) {
  const Input* given = Named(inputs, name);
  const Input* input = Named(inputs, "input");
  if (given == nullptr || input == nullptr) return absl::OkStatus();
  const std::optional<TokenGrid> grid = TokenGridOf(r, *input);
  if (!grid) return absl::OkStatus();
  const auto& shape = given->tensor->shape();
  std::vector<std::string> allowed;
  for (const std::vector<int64_t>& tail : tails) {
    for (const std::vector<int64_t>& want :
         {Joined({grid->seq}, tail), Joined({grid->batch, grid->seq}, tail)}) {
      if (std::equal(shape.begin(), shape.end(), want.begin(), want.end())) {
        return absl::OkStatus();
      }
      allowed.push_back(absl::StrCat("[", absl::StrJoin(want, ", "), "]"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has shape ", ShapeText(shape),
                                                 "; with input ", ShapeText(input->tensor->shape()),
                                                 " (batch ", grid->batch, ", seq ", grid->seq,
                                                 ") it must be ", absl::StrJoin(allowed, " or ")));
}

// position_ids is [seq] or [batch, seq]; position_values the same, or [seq, m] or
// [batch, seq, m] when the scheme reads m values per token (its position_value_axes; both
// when m is 1). A count that merely fits is refused: it would be read in another order.
absl::Status CheckPositionShapes(const v1::EncodeRequest& r, const SchemeDescriptor& scheme,
                                 const std::vector<Input>& inputs) {
  using Tails = std::vector<std::vector<int64_t>>;
  const std::vector<int64_t> none;
  RETURN_IF_ERROR(CheckPerToken(inputs, "position_ids", Tails{none}, r));
  if (scheme.position_value_axes == nullptr) {
    return CheckPerToken(inputs, "position_values", Tails{none}, r);
  }
  const int64_t m = scheme.position_value_axes(r);
  const std::vector<int64_t> axes = {m};
  return CheckPerToken(inputs, "position_values", m == 1 ? Tails{axes, none} : Tails{axes}, r);
}

// The input 'axis_ids' is [num_axes, seq] or [num_axes, batch (or 1), seq] of the scheme's
// position axes and the input's tokens; Positions.axis_ids, flat, can only be checked by
// its size. Left to the scheme's own checks when it has no axes or the input's rank is off.
absl::Status CheckAxisIdsShape(const v1::EncodeRequest& r, const SchemeDescriptor& scheme,
                               const std::vector<Input>& inputs) {
  const Input* axis_ids = Named(inputs, "axis_ids");
  const Input* input = Named(inputs, "input");
  const int64_t axes = scheme.position_axes ? scheme.position_axes(r) : 0;
  if (axis_ids == nullptr || input == nullptr || axes <= 0) return absl::OkStatus();
  const std::optional<TokenGrid> grid = TokenGridOf(r, *input);
  if (!grid) return absl::OkStatus();
  const auto& shape = axis_ids->tensor->shape();
  if (shape.size() != 2 && shape.size() != 3) return absl::OkStatus();  // PositionsOf names it
  const bool fits = shape[0] == axes && shape[shape.size() - 1] == grid->seq &&
                    (shape.size() == 2 || shape[1] == grid->batch || shape[1] == 1);
  if (fits) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("input 'axis_ids' has shape ", ShapeText(shape), "; with ", axes,
                   " position axes and input ", ShapeText(input->tensor->shape()), " it must be [",
                   axes, ", ", grid->seq, "] or [", axes, ", ", grid->batch, ", ", grid->seq, "]"));
}

absl::Status ToEncode(const Parameters& params, std::vector<Input>& inputs, NativeRequest& n) {
  v1::EncodeRequest& r = n.encode;
  r.set_request_id(n.id);
  RETURN_IF_ERROR(SchemeMessageOf(*n.model, params, r));
  const SchemeDescriptor* scheme = SchemeOf(r);
  if (scheme != nullptr) {
    RETURN_IF_ERROR(CheckPositionShapes(r, *scheme, inputs));
    RETURN_IF_ERROR(CheckAxisIdsShape(r, *scheme, inputs));
  }
  RETURN_IF_ERROR(PositionsOf(params, inputs, *r.mutable_positions()));
  for (Input& in : inputs) {
    if (in.tensor->name() == "input") RETURN_IF_ERROR(ToNativeTensor(in, r.mutable_input()));
    if (in.tensor->name() == "key") RETURN_IF_ERROR(ToNativeTensor(in, r.mutable_key()));
  }
  return absl::OkStatus();
}

absl::Status ToBias(const Parameters& params, std::vector<Input>& inputs, NativeRequest& n) {
  v1::BiasRequest& r = n.bias;
  r.set_request_id(n.id);
  google::protobuf::Message* scheme = MutableSchemeMessage(r, n.model->bias_case);
  if (scheme == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", n.model->name, "' is not served by AttentionBias"));
  }
  RETURN_IF_ERROR(ParseConfig(params, n.model->name, scheme));
  ASSIGN_OR_RETURN(std::optional<int64_t> q, IntParam(params, "query_length"));
  ASSIGN_OR_RETURN(std::optional<int64_t> k, IntParam(params, "key_length"));
  ASSIGN_OR_RETURN(std::optional<int64_t> offset, IntParam(params, "query_offset"));
  r.set_query_length(q.value_or(0));
  r.set_key_length(k.value_or(0));
  if (offset) r.set_query_offset(*offset);
  for (Input& in : inputs) {
    RETURN_IF_ERROR(
        ToNativeTensor(in, in.tensor->name() == "query" ? r.mutable_query() : r.mutable_scores()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int32_t>> Int32Param(const Parameters& params,
                                                  absl::string_view name) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, IntParam(params, name));
  if (!v) return std::optional<int32_t>();
  if (*v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' is ", *v, "; it must fit int32"));
  }
  return std::optional<int32_t>(static_cast<int32_t>(*v));
}

// `anchors`: a JSON list of node ids, e.g. "[0, 5, 9]".
absl::Status AnchorsOf(const Parameters& params, v1::GraphRequest& r) {
  ASSIGN_OR_RETURN(const std::string* json, StringParam(params, "anchors"));
  if (json == nullptr) return absl::OkStatus();
  v1::GraphRequest parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(
      absl::StrCat("{\"anchors\":", *json, "}"), &parsed);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'anchors' is not a JSON list of node ids (e.g. \"[0, 5]\"): ",
                     std::string(status.message())));
  }
  *r.mutable_anchors() = parsed.anchors();
  return absl::OkStatus();
}

// The parameters of the encodings beyond the Laplacian; each model's parameter list (checked
// before) says which it takes. `config` (a tree's) is GraphRequest JSON, e.g.
// {"table": "kids"}, read first so that the parameters override it.
// A tree's `config` (GraphRequest JSON) may set the fields the tree encoding reads and no
// parameter or input carries; any other (num_nodes, parents, edges, encoding, ...) would be
// overwritten, so it is refused, naming where that value comes from.
absl::Status TreeConfigOf(const ModelInfo& model, const Parameters& params, v1::GraphRequest& r) {
  v1::GraphRequest config;
  RETURN_IF_ERROR(ParseConfig(params, model.name, &config));
  std::vector<const google::protobuf::FieldDescriptor*> set;
  config.GetReflection()->ListFields(config, &set);
  static constexpr std::string_view kApplies[] = {"table", "max_depth", "max_children",
                                                  "depth_decay"};
  for (const google::protobuf::FieldDescriptor* field : set) {
    if (std::find(std::begin(kApplies), std::end(kApplies), field->name()) != std::end(kApplies)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter 'config' sets '", field->name(), "', which model '", model.name,
        "' does not take from config (num_nodes is a parameter, parents an input); config may "
        "set table, max_depth, max_children and depth_decay"));
  }
  r.MergeFrom(config);
  return absl::OkStatus();
}

absl::Status EncodingParamsOf(const ModelInfo& model, const Parameters& params,
                              v1::GraphRequest& r) {
  if (params.count("config") != 0) RETURN_IF_ERROR(TreeConfigOf(model, params, r));
  ASSIGN_OR_RETURN(std::optional<int32_t> steps, Int32Param(params, "walk_length"));
  if (steps) r.set_walk_length(*steps);
  RETURN_IF_ERROR(AnchorsOf(params, r));
  ASSIGN_OR_RETURN(std::optional<int32_t> depth, Int32Param(params, "max_depth"));
  if (depth) r.set_max_depth(*depth);
  ASSIGN_OR_RETURN(std::optional<int32_t> children, Int32Param(params, "max_children"));
  if (children) r.set_max_children(*children);
  if (auto it = params.find("depth_decay"); it != params.end()) {
    if (!it->second.has_double_param()) {
      return absl::InvalidArgumentError("parameter 'depth_decay' must be a double (double_param)");
    }
    r.set_depth_decay(it->second.double_param());
  }
  return absl::OkStatus();
}

absl::Status ToGraph(const Parameters& params, std::vector<Input>& inputs, NativeRequest& n) {
  v1::GraphRequest& r = n.graph;
  RETURN_IF_ERROR(EncodingParamsOf(*n.model, params, r));
  r.set_request_id(n.id);
  SetGraphEncoding(n.model->graph_encoding, r);
  ASSIGN_OR_RETURN(std::optional<int64_t> nodes, IntParam(params, "num_nodes"));
  ASSIGN_OR_RETURN(std::optional<int64_t> k, IntParam(params, "k"));
  r.set_num_nodes(nodes.value_or(0));
  if (k && (*k < std::numeric_limits<int32_t>::min() || *k > std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("parameter 'k' is ", *k, "; it must fit int32"));
  }
  r.set_k(static_cast<int32_t>(k.value_or(0)));
  if (auto it = params.find("normalized"); it != params.end()) {
    if (!it->second.has_bool_param()) {
      return absl::InvalidArgumentError("parameter 'normalized' must be a bool (bool_param)");
    }
    r.set_normalized(it->second.bool_param());
  }
  for (Input& in : inputs) {
    const std::string& name = in.tensor->name();
    if (name == "input") RETURN_IF_ERROR(ToNativeTensor(in, r.mutable_input()));
    const auto& shape = in.tensor->shape();
    if (name == "edges") {
      if (shape.size() != 2 || shape[1] != 2) {
        return absl::InvalidArgumentError(absl::StrCat("input 'edges' has shape ", ShapeText(shape),
                                                       "; model '", n.model->name,
                                                       "' needs [num_edges, 2]"));
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> edges, Values<int64_t>(in));
      r.mutable_edges()->Add(edges.begin(), edges.end());
    } else if (name == "parents") {
      if (shape.size() != 1 || shape[0] != r.num_nodes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input 'parents' has shape ", ShapeText(shape), "; model '", n.model->name,
                         "' needs [num_nodes] = [", r.num_nodes(), "]"));
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> parents, Values<int64_t>(in));
      r.mutable_parents()->Add(parents.begin(), parents.end());
    }
  }
  return absl::OkStatus();
}

// The outputs to return, in order: those requested, else all the model has.
absl::Status ChooseOutputs(const oip::ModelInferRequest& request, const std::vector<Input>& inputs,
                           NativeRequest& n, const ConvertOptions& options) {
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& wanted = request.outputs(i);
    if (FindTensor(n.model->model.outputs, wanted.name()) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected inference output '",
                                                     Elide(wanted.name()), "' for model '",
                                                     n.model->name, "'"));
    }
    for (int j = 0; j < i; ++j) {
      if (request.outputs(j).name() == wanted.name()) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", wanted.name(), "' is requested more than once"));
      }
    }
    if (wanted.name() == "key_output" && Named(inputs, "key") == nullptr) {
      return absl::InvalidArgumentError("output 'key_output' needs input 'key'");
    }
    ASSIGN_OR_RETURN(std::optional<v1::SharedMemoryRef> shm,
                     ShmRefOf(wanted.parameters(), "output", wanted.name(), options));
    if (shm) {
      const ModelKind kind = KindOf(*n.model);
      if (kind == ModelKind::kGraph) {
        return absl::InvalidArgumentError(
            absl::StrCat(n.model->name, "'s outputs cannot go to shared memory"));
      }
      v1::SharedMemoryRef* to = kind == ModelKind::kBias        ? n.bias.mutable_output_shm()
                                : wanted.name() == "key_output" ? n.encode.mutable_key_output_shm()
                                                                : n.encode.mutable_output_shm();
      *to = *shm;
    }
    n.outputs.push_back(wanted.name());
  }
  if (!n.outputs.empty()) return absl::OkStatus();
  for (const ModelTensor& out : n.model->model.outputs) {
    if (out.name == "key_output" && Named(inputs, "key") == nullptr) continue;
    n.outputs.push_back(out.name);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Responses.

void StartResponse(const NativeRequest& n, oip::ModelInferResponse& out) {
  out.set_model_name(n.model->name);
  out.set_model_version(kModelVersion);
  out.set_id(n.id);
}

// One output the native response holds; it points into the native response and lives
// only while the answer is built.
struct Output {
  absl::string_view name;
  const char* datatype;
  const google::protobuf::RepeatedField<int64_t>* shape;
  std::string* data;                         // taken
  const v1::SharedMemoryRef* shm = nullptr;  // set: written in place, no bytes travel
};

Output OutputOf(absl::string_view name, v1::Tensor* t) {
  return Output{name, DatatypeOf(t->dtype()), &t->shape(), t->mutable_data(),
                t->has_shm() ? &t->shm() : nullptr};
}

// The outputs go out in n.outputs' order, one raw_output_contents entry each (empty for an
// output in shared memory, whose region the client reads).
void AddOutputs(const NativeRequest& n, std::initializer_list<Output> outputs,
                oip::ModelInferResponse& out) {
  StartResponse(n, out);
  for (const std::string& name : n.outputs) {
    for (const Output& source : outputs) {
      if (source.name != name) continue;
      auto* o = out.add_outputs();
      o->set_name(name);
      o->set_datatype(source.datatype);
      *o->mutable_shape() = *source.shape;
      std::string* raw = out.add_raw_output_contents();
      if (source.shm == nullptr) {
        raw->swap(*source.data);
        continue;
      }
      auto& params = *o->mutable_parameters();
      params["shared_memory_region"].set_string_param(source.shm->region());
      params["shared_memory_byte_size"].set_int64_param(
          static_cast<int64_t>(source.shm->byte_size()));
      params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(source.shm->offset()));
    }
  }
}

// Which inputs by reference the run must see inline: the in-place result of `input`
// (`key`, `scores`) stays in its region only when its output names a region (the same
// range: in place; another: copied there); otherwise the result goes back inline.
void MarkShmCopies(NativeRequest& n) {
  // `has` first: a mutable_ accessor would create the field.
  auto mark = [&n](bool has, v1::Tensor* (*field)(NativeRequest&), const v1::SharedMemoryRef& out) {
    if (!has || !out.region().empty()) return;
    v1::Tensor* t = field(n);
    if (t->has_shm()) n.copy_from_shm.push_back(t);
  };
  switch (KindOf(*n.model)) {
    case ModelKind::kEncode:
      mark(
          n.encode.has_input(), [](NativeRequest& r) { return r.encode.mutable_input(); },
          n.encode.output_shm());
      mark(
          n.encode.has_key(), [](NativeRequest& r) { return r.encode.mutable_key(); },
          n.encode.key_output_shm());
      break;
    case ModelKind::kBias:
      mark(
          n.bias.has_scores(), [](NativeRequest& r) { return r.bias.mutable_scores(); },
          n.bias.output_shm());
      break;
    case ModelKind::kGraph:
      mark(
          n.graph.has_input(), [](NativeRequest& r) { return r.graph.mutable_input(); },
          v1::SharedMemoryRef::default_instance());
      break;
  }
}

}  // namespace

absl::Status CopyShmInputsInline(NativeRequest& native, const SharedMemoryRegistry* shm) {
  for (v1::Tensor* t : native.copy_from_shm) {
    if (shm == nullptr || !shm->enabled()) {
      return absl::FailedPreconditionError(
          "an input names a shared-memory region, but shared memory is off; start "
          "posenc-server with --shm");
    }
    const v1::SharedMemoryRef ref = t->shm();
    ASSIGN_OR_RETURN(const ShmLease lease,
                     shm->Lookup(ShmRef{ref.region(), ref.offset(), ref.byte_size()},
                                 "shared_memory_region", native.shm_owner.name()));
    t->clear_shm();
    t->mutable_data()->assign(reinterpret_cast<const char*>(lease.data()),
                              static_cast<size_t>(lease.size()));
    RETURN_IF_ERROR(lease.CheckIntact());
  }
  native.copy_from_shm.clear();
  return absl::OkStatus();
}

NativeRequest::NativeRequest()
    : arena(FirstBlockOptions(first_block_, kFirstBlockBytes)),
      encode(*google::protobuf::Arena::CreateMessage<v1::EncodeRequest>(&arena)),
      bias(*google::protobuf::Arena::CreateMessage<v1::BiasRequest>(&arena)),
      graph(*google::protobuf::Arena::CreateMessage<v1::GraphRequest>(&arena)) {}

ModelKind KindOf(const SchemeDescriptor& scheme) {
  switch (scheme.family) {
    case SchemeFamily::kBias: return ModelKind::kBias;
    case SchemeFamily::kGraph: return ModelKind::kGraph;
    case SchemeFamily::kAdditive:
    case SchemeFamily::kTable:
    case SchemeFamily::kRotary: return ModelKind::kEncode;
  }
  return ModelKind::kEncode;
}

const std::vector<ModelInfo>& Models() { return Schemes(); }

absl::StatusOr<const ModelInfo*> FindModel(absl::string_view name, absl::string_view version) {
  if (const ModelInfo* m = FindScheme(name)) {
    if (!version.empty() && version != kModelVersion) {
      return absl::NotFoundError(absl::StrCat("Request for unknown model: '", name, "' version ",
                                              version, " is not found"));
    }
    return m;
  }
  return absl::NotFoundError(absl::StrCat("Request for unknown model: '", name, "' is not found"));
}

absl::StatusOr<std::unique_ptr<NativeRequest>> ToNativeRequest(oip::ModelInferRequest& request,
                                                               const ConvertOptions& options) {
  auto n = std::make_unique<NativeRequest>();
  ASSIGN_OR_RETURN(n->model, FindModel(request.model_name(), request.model_version()));
  n->id = request.id();
  RETURN_IF_ERROR(CheckParameters(*n->model, request.parameters()));
  ASSIGN_OR_RETURN(std::vector<Input> inputs, TakeInputs(*n->model, request, options));
  RETURN_IF_ERROR(ChooseOutputs(request, inputs, *n, options));
  switch (KindOf(*n->model)) {
    case ModelKind::kEncode: RETURN_IF_ERROR(ToEncode(request.parameters(), inputs, *n)); break;
    case ModelKind::kBias: RETURN_IF_ERROR(ToBias(request.parameters(), inputs, *n)); break;
    case ModelKind::kGraph: RETURN_IF_ERROR(ToGraph(request.parameters(), inputs, *n)); break;
  }
  MarkShmCopies(*n);
  return n;
}

void ToInferResponse(const NativeRequest& n, v1::EncodeResponse& response,
                     oip::ModelInferResponse& out) {
  AddOutputs(n,
             {OutputOf("output", response.mutable_output()),
              OutputOf("key_output", response.mutable_key_output())},
             out);
}

void ToInferResponse(const NativeRequest& n, v1::BiasResponse& response,
                     oip::ModelInferResponse& out) {
  AddOutputs(n, {OutputOf("output", response.mutable_output())}, out);
}

void ToInferResponse(const NativeRequest& n, v1::GraphResponse& response,
                     oip::ModelInferResponse& out) {
  std::string eigenvalues(reinterpret_cast<const char*>(response.eigenvalues().data()),
                          response.eigenvalues_size() * sizeof(double));
  google::protobuf::RepeatedField<int64_t> eigenvalues_shape;
  eigenvalues_shape.Add(response.eigenvalues_size());
  AddOutputs(n,
             {OutputOf("output", response.mutable_output()),
              Output{"eigenvalues", "FP64", &eigenvalues_shape, &eigenvalues}},
             out);
}

const char* DatatypeOf(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT16: return "FP16";
    case v1::BFLOAT16: return "BF16";
    case v1::INT32: return "INT32";
    case v1::INT64: return "INT64";
    default: return "FP32";
  }
}

}  // namespace posenc
