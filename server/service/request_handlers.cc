#include "server/service/request_handlers.h"

#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_results.h"
#include "server/service/proto_convert.h"
#include "server/service/request_tensors.h"

namespace posenc {
namespace {

class KernelTimer {
 public:
  KernelTimer(ServiceMetrics* metrics, SchemeLabel scheme)
      : metrics_(metrics), scheme_(scheme), start_(std::chrono::steady_clock::now()) {}
  ~KernelTimer() {
    if (metrics_) {
      metrics_->RecordKernel(
          scheme_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
  }

 private:
  ServiceMetrics* metrics_;
  SchemeLabel scheme_;
  std::chrono::steady_clock::time_point start_;
};

// Where a scheme that works in place writes: over its tensor's own bytes (inline, or its
// shared-memory slice), or over the slice `out_ref` names after copying the tensor there.
struct Placement {
  TensorView view;
  const v1::SharedMemoryRef* ref = nullptr;  // null: the result goes back inline
};

absl::StatusOr<Placement> PlaceInPlace(RequestTensors& tensors, const v1::Tensor& in_msg,
                                       const TensorView& in, const v1::SharedMemoryRef& out_ref,
                                       absl::string_view field) {
  if (!IsSet(out_ref)) {
    if (!in_msg.has_shm()) return Placement{in, nullptr};
    tensors.CountInPlaceOutput(in.NumBytes());
    return Placement{in, &in_msg.shm()};
  }
  ASSIGN_OR_RETURN(TensorView out, tensors.Output(out_ref, in.shape, in.dtype, in.data, field));
  if (out.data != in.data) std::memcpy(out.data, in.data, in.NumBytes());
  return Placement{out, &out_ref};
}

// The response tensor for a placed result: the reference, or the inline bytes (moved from
// `inline_data`, no copy).
void Answer(const Placement& placed, std::string* inline_data, v1::Tensor* out) {
  if (placed.ref == nullptr) {
    MoveIntoTensor(inline_data, placed.view.shape, placed.view.dtype, out);
    return;
  }
  out->mutable_shape()->Assign(placed.view.shape.begin(), placed.view.shape.end());
  out->set_dtype(DTypeToProto(placed.view.dtype));
  *out->mutable_shm() = *placed.ref;
}

// Puts an absolute scheme's result into the response: where the input was changed in place
// for ADD; for CONCAT the new buffer, inline or copied into output_shm.
absl::Status FillResponse(AbsoluteResult& result, const Placement& placed, RequestTensors& tensors,
                          v1::EncodeRequest& request, v1::EncodeResponse& response) {
  if (!result.concat) {
    Answer(placed, request.mutable_input()->mutable_data(), response.mutable_output());
    return absl::OkStatus();
  }
  Placement out{TensorView{placed.view.dtype, result.shape, result.concat->data()}, nullptr};
  if (IsSet(request.output_shm())) {
    ASSIGN_OR_RETURN(out.view, tensors.Output(request.output_shm(), result.shape, placed.view.dtype,
                                              nullptr, "output_shm"));
    std::memcpy(out.view.data, result.concat->data(), result.concat->size());
    out.ref = &request.output_shm();
  }
  Answer(out, &*result.concat, response.mutable_output());
  return absl::OkStatus();
}

// Whether the scheme overwrites the input (every rotary scheme does), or writes a new
// buffer (an additive scheme's CONCAT).
bool WorksInPlace(const SchemeDescriptor& scheme, const v1::EncodeRequest& r) {
  return scheme.rotate != nullptr || scheme.in_place == nullptr || scheme.in_place(r);
}

// "rope takes" / "rope, mrope take": the schemes `pred` accepts as a sentence's subject.
template <typename Pred>
std::string Takers(Pred pred) {
  const std::string names = SchemeNames(pred);
  return absl::StrCat(names, names.find(',') == std::string::npos ? " takes" : " take");
}

// A rotary scheme rotates the query (and key) in place: the request's own buffers (or
// slices) become the response's.
absl::Status Rotate(const ServiceState& state, const SchemeDescriptor& scheme,
                    v1::EncodeRequest& request, v1::EncodeResponse& response,
                    RequestTensors& tensors, const TensorView& input,
                    const PositionsSpec& positions) {
  std::optional<TensorView> key;
  std::optional<Placement> key_placed;
  if (request.has_key()) {
    ASSIGN_OR_RETURN(key, tensors.View(request.mutable_key(), "key"));
  }
  ASSIGN_OR_RETURN(const Placement placed, PlaceInPlace(tensors, request.input(), input,
                                                        request.output_shm(), "output_shm"));
  if (key) {
    ASSIGN_OR_RETURN(key_placed, PlaceInPlace(tensors, request.key(), *key,
                                              request.key_output_shm(), "key_output_shm"));
  }
  {
    KernelTimer timer(state.metrics, scheme.label);
    RETURN_IF_ERROR(scheme.rotate(state.Env(), request, placed.view,
                                  key_placed ? &key_placed->view : nullptr, positions));
  }
  RETURN_IF_ERROR(tensors.CheckIntact());
  RETURN_IF_ERROR(CheckResult(placed.view, "input", Allowed::kFiniteOnly));
  if (key_placed) RETURN_IF_ERROR(CheckResult(key_placed->view, "key", Allowed::kFiniteOnly));
  Answer(placed, request.mutable_input()->mutable_data(), response.mutable_output());
  if (key_placed) {
    Answer(*key_placed, request.mutable_key()->mutable_data(), response.mutable_key_output());
  }
  return absl::OkStatus();
}

// A query longer than the key with the default offset: say which default and what to set,
// rather than name a query_offset the caller never gave.
absl::Status DefaultOffsetError(const std::string& scheme, const BiasGeometry& geom) {
  return absl::InvalidArgumentError(absl::StrCat(
      "query_length (", geom.query_length, ") is more than key_length (", geom.key_length, "); ",
      scheme,
      " places the queries at the end of the keys by default (query_offset = "
      "key_length - query_length, the decode convention): set query_offset >= 0, or give "
      "key_length >= query_length"));
}

// The key and positions fields are only set for schemes that take them.
absl::Status CheckEncodeFieldsTaken(const SchemeDescriptor& scheme,
                                    const v1::EncodeRequest& request,
                                    const PositionsSpec& positions) {
  if (request.has_key() && !scheme.takes_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("key is set; only ",
                     Takers([](const SchemeDescriptor& s) { return s.takes_key; }), " keys"));
  }
  if (!positions.values.empty() && !scheme.takes_position_values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.values is set; only ",
        Takers([](const SchemeDescriptor& s) { return s.takes_position_values; }), " it"));
  }
  if (positions.has_axis_positions() && !scheme.takes_axis_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        positions.axis_ids.empty() ? "positions.mrope_segments" : "positions.axis_ids",
        " is set; only ", Takers([](const SchemeDescriptor& s) { return s.takes_axis_positions; }),
        " it"));
  }
  return absl::OkStatus();
}

// An additive scheme's result is finite: where the kernel looked as it wrote, its finding;
// else a scan of the result (the concatenation, or the input written in place).
absl::Status CheckAddResult(const AbsoluteResult& result, const Placement& placed) {
  if (result.first_non_finite.has_value()) {
    return ResultError(placed.view, *result.first_non_finite, "input", Allowed::kFiniteOnly);
  }
  const ConstTensorView written =
      result.concat ? ConstTensorView{placed.view.dtype, result.shape, result.concat->data()}
                    : ConstTensorView(placed.view);
  return CheckResult(written, "input", Allowed::kFiniteOnly);
}

// The request's bias geometry, query and scheme fields as a BiasSpec.
absl::StatusOr<BiasSpec> BiasSpecOf(const SchemeDescriptor& scheme,
                                    const v1::BiasRequest& request) {
  BiasSpec spec;
  spec.geom = MakeBiasGeometry(request.query_length(), request.key_length());
  if (request.has_query_offset()) spec.geom.query_offset = request.query_offset();
  spec.add_to_scores = request.has_scores();
  if (request.has_query()) {  // Shaw's query term; PlanBias refuses it for other schemes
    const v1::Tensor& q = request.query();
    spec.query_shape = Shape(q.shape().begin(), q.shape().end());
    ASSIGN_OR_RETURN(spec.query_dtype, DTypeFromProto(q.dtype(), "query.dtype"));
  }
  RETURN_IF_ERROR(scheme.bias_spec(request, spec));
  if (!request.has_query_offset() && spec.geom.query_offset < 0) {
    return DefaultOffsetError(scheme.name, spec.geom);
  }
  return spec;
}

}  // namespace

void RequestHandlers::CountBytes(uint64_t in_bytes, uint64_t out_bytes,
                                 const RequestTensors& tensors) const {
  if (!state_.metrics) return;
  state_.metrics->AddBytes(Transport::kInline, in_bytes, out_bytes);
  state_.metrics->AddBytes(Transport::kShm, tensors.shm_in_bytes(), tensors.shm_out_bytes());
}

std::vector<MetricsScheme> MetricsSchemes() {
  std::vector<MetricsScheme> out;
  for (const SchemeDescriptor& s : Schemes()) {
    MetricsScheme m{s.name, {Method::kModelInfer, Method::kModelStreamInfer, Method::kHttpInfer}};
    if (s.encode_case != 0) {
      m.methods.push_back(Method::kEncode);
      m.methods.push_back(Method::kEncodeStream);
    }
    if (s.bias_case != 0) m.methods.push_back(Method::kAttentionBias);
    if (s.table_case != 0) m.methods.push_back(Method::kGetTable);
    if (s.family == SchemeFamily::kGraph) m.methods.push_back(Method::kGraphEncode);
    out.push_back(std::move(m));
  }
  return out;
}

absl::Status RequestHandlers::Encode(v1::EncodeRequest& request, v1::EncodeResponse& response,
                                     SchemeLabel* label, const ShmOwner& shm_owner) const {
  const SchemeDescriptor* scheme = SchemeOf(request);
  *label = scheme ? scheme->label : kNoScheme;
  response.set_request_id(request.request_id());
  if (scheme == nullptr) return UnknownScheme(request);
  if (!request.has_input()) return absl::InvalidArgumentError("input is not set");
  const uint64_t in_bytes = request.input().data().size() + request.key().data().size();
  RequestTensors tensors(state_.shm, shm_owner);
  ASSIGN_OR_RETURN(TensorView input, tensors.View(request.mutable_input(), "input"));
  const PositionsSpec positions = PositionsFromProto(request.positions());
  RETURN_IF_ERROR(CheckEncodeFieldsTaken(*scheme, request, positions));
  if (scheme->rotate != nullptr) {
    RETURN_IF_ERROR(Rotate(state_, *scheme, request, response, tensors, input, positions));
    CountBytes(in_bytes, response.output().data().size() + response.key_output().data().size(),
               tensors);
    return absl::OkStatus();
  }
  if (scheme->add == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(scheme->name, " is not served by Encode"));
  }
  Placement placed{input, request.input().has_shm() ? &request.input().shm() : nullptr};
  if (WorksInPlace(*scheme, request)) {
    ASSIGN_OR_RETURN(placed, PlaceInPlace(tensors, request.input(), input, request.output_shm(),
                                          "output_shm"));
  }
  absl::StatusOr<AbsoluteResult> result;
  {
    KernelTimer timer(state_.metrics, scheme->label);
    result = scheme->add(state_.Env(), request, placed.view, positions);
  }
  if (!result.ok()) return result.status();
  RETURN_IF_ERROR(CheckAddResult(*result, placed));
  RETURN_IF_ERROR(FillResponse(*result, placed, tensors, request, response));
  RETURN_IF_ERROR(tensors.CheckIntact());
  CountBytes(in_bytes, response.output().data().size(), tensors);
  return absl::OkStatus();
}

absl::Status RequestHandlers::AttentionBias(v1::BiasRequest& request, v1::BiasResponse& response,
                                            SchemeLabel* label, const ShmOwner& shm_owner) const {
  const SchemeDescriptor* scheme = SchemeOf(request);
  *label = scheme ? scheme->label : kNoScheme;
  response.set_request_id(request.request_id());
  if (scheme == nullptr || scheme->bias_spec == nullptr) return UnknownScheme(request);
  ASSIGN_OR_RETURN(const BiasSpec spec, BiasSpecOf(*scheme, request));
  ASSIGN_OR_RETURN(const BiasPlan plan, PlanBias(spec, *state_.tables));
  const uint64_t in_bytes = request.scores().data().size() + request.query().data().size();
  RequestTensors tensors(state_.shm, shm_owner);
  // The query, read where it lies (inline or its shared-memory slice), viewed before any
  // output slice is placed so that an output overlapping it is refused.
  std::optional<ConstTensorView> query;
  if (request.has_query()) {
    ASSIGN_OR_RETURN(query, tensors.View(request.mutable_query(), "query"));
  }
  const ConstTensorView* query_ptr = query ? &*query : nullptr;
  KernelTimer timer(state_.metrics, scheme->label);
  if (spec.add_to_scores) {
    ASSIGN_OR_RETURN(const TensorView in, tensors.View(request.mutable_scores(), "scores"));
    ASSIGN_OR_RETURN(const Placement placed, PlaceInPlace(tensors, request.scores(), in,
                                                          request.output_shm(), "output_shm"));
    RETURN_IF_ERROR(AddBias(plan, placed.view, query_ptr));
    RETURN_IF_ERROR(tensors.CheckIntact());
    RETURN_IF_ERROR(
        CheckResult(placed.view, query ? "scores or query" : "scores", Allowed::kInfinities));
    // Added in place: the scores' own buffer (or slice) becomes the output.
    Answer(placed, request.mutable_scores()->mutable_data(), response.mutable_output());
  } else {
    std::string out;
    Placement placed{TensorView{plan.output_dtype, plan.output_shape, nullptr}, nullptr};
    if (IsSet(request.output_shm())) {  // built straight into the client's slice
      ASSIGN_OR_RETURN(placed.view, tensors.Output(request.output_shm(), plan.output_shape,
                                                   plan.output_dtype, nullptr, "output_shm"));
      placed.ref = &request.output_shm();
    } else {
      ASSIGN_OR_RETURN(const int64_t bytes, BiasOutputBytes(plan, state_.limits));
      out.assign(static_cast<size_t>(bytes), '\0');
      placed.view.data = out.data();
    }
    RETURN_IF_ERROR(BuildBias(plan, placed.view, query_ptr));
    RETURN_IF_ERROR(tensors.CheckIntact());
    if (query) RETURN_IF_ERROR(CheckResult(placed.view, "query", Allowed::kInfinities));
    Answer(placed, &out, response.mutable_output());
  }
  CountBytes(in_bytes, response.output().data().size(), tensors);
  return absl::OkStatus();
}

absl::Status RequestHandlers::GraphEncode(v1::GraphRequest& request, v1::GraphResponse& response,
                                          const CancelCheck& cancelled) const {
  response.set_request_id(request.request_id());
  const SchemeDescriptor* scheme = SchemeOf(request);
  if (scheme == nullptr || scheme->graph == nullptr) return UnknownScheme(request);
  std::optional<ConstTensorView> input;
  if (request.input().has_shm()) {
    return absl::InvalidArgumentError(
        "input.shm is set; GraphEncode takes input inline only: send its bytes in input.data");
  }
  if (request.has_input()) {
    ASSIGN_OR_RETURN(input, ViewOfTensor(request.mutable_input(), "input"));
  }
  GraphResult result;
  {
    KernelTimer timer(state_.metrics, scheme->label);
    ASSIGN_OR_RETURN(result, scheme->graph(state_.Env(), request, input, cancelled));
  }
  // The encodings are finite by construction (graph_common.h); an input with inf or NaN
  // would carry them into the concatenated result.
  if (input) {
    RETURN_IF_ERROR(CheckResult(TensorView{result.dtype, result.shape, result.data.data()}, "input",
                                Allowed::kFiniteOnly));
  }
  for (double e : result.eigenvalues) response.add_eigenvalues(e);
  MoveIntoTensor(&result.data, result.shape, result.dtype, response.mutable_output());
  return absl::OkStatus();
}

void RequestHandlers::ListSchemes(v1::ListSchemesResponse& response) const {
  for (const SchemeDescriptor& s : Schemes()) response.add_schemes(s.name);
  for (v1::DType t : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) response.add_dtypes(t);
  for (const auto& [name, named] : state_.tables->all()) {
    v1::NamedTable* t = response.add_tables();
    t->set_name(name);
    t->add_shape(named.table->rows);
    t->add_shape(named.table->cols);
    // A float64 file's table is served as float32 (its float64 values only feed Fourier
    // frequencies); the wire has no float64 dtype.
    t->set_dtype(named.source_dtype == DType::kFloat64 ? v1::FLOAT32
                                                       : DTypeToProto(named.source_dtype));
  }
  response.set_version(state_.version);
}

absl::StatusOr<int64_t> RequestHandlers::PlanTable(const v1::TableRequest& request,
                                                   SchemeLabel* label) const {
  const SchemeDescriptor* scheme = SchemeOf(request);
  *label = scheme ? scheme->label : kNoScheme;
  if (scheme == nullptr || scheme->check_table == nullptr) return UnknownScheme(request);
  if (request.length() < 1 || request.length() > kMaxTableLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("length is ", request.length(), "; it must be in [1, 2^40]"));
  }
  if (request.dim() < 1 || request.dim() > kMaxTableDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim is ", request.dim(), "; it must be in [1, 2^20]"));
  }
  DType dtype = DType::kFloat32;
  if (request.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(dtype, DTypeFromProto(request.dtype(), "dtype"));
    if (!IsFloat(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dtype is ", DTypeName(dtype), "; tables are FLOAT32, FLOAT16 or BFLOAT16"));
    }
  }
  RETURN_IF_ERROR(scheme->check_table(request));
  const int64_t row_bytes = request.dim() * static_cast<int64_t>(DTypeSize(dtype));
  // A chunk's rows are its tensor: max_output_bytes already leaves the message limit room
  // for the chunk's other fields.
  const int64_t budget = static_cast<int64_t>(state_.limits.max_output_bytes);
  if (row_bytes > budget) {
    return absl::ResourceExhaustedError(absl::StrCat("one row of dim ", request.dim(), " is ",
                                                     row_bytes, " bytes, over the message limit"));
  }
  if (request.rows_per_chunk() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_chunk is ", request.rows_per_chunk(), "; it must be >= 0"));
  }
  if (request.rows_per_chunk() == 0) return budget / row_bytes;
  if (request.rows_per_chunk() > budget / row_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rows_per_chunk is ", request.rows_per_chunk(),
                                                     "; at most ", budget / row_bytes, " rows of ",
                                                     row_bytes, " bytes fit a message"));
  }
  return request.rows_per_chunk();
}

absl::Status RequestHandlers::TableChunk(const v1::TableRequest& request, int64_t first, int64_t n,
                                         v1::TableChunk& chunk) const {
  DType dtype = DType::kFloat32;
  if (request.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(dtype, DTypeFromProto(request.dtype(), "dtype"));
  }
  const SchemeDescriptor* scheme = SchemeOf(request);
  if (scheme == nullptr || scheme->table_rows == nullptr) return UnknownScheme(request);
  ASSIGN_OR_RETURN(const TableRows rows, scheme->table_rows(request, first, n));
  v1::Tensor* t = chunk.mutable_rows();
  t->mutable_shape()->Assign(rows.shape.begin(), rows.shape.end());
  // The position of the chunk's first row (row `first` of the table).
  chunk.set_first_position(TablePositionsFromProto(request).At(first));
  t->set_dtype(DTypeToProto(dtype));
  return WriteTableRows(rows, dtype, *t->mutable_data());
}

}  // namespace posenc
