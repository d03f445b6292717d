#include "server/service/request_handlers.h"

#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"
#include "server/kernels/convert_kernel.h"
#include "server/service/proto_convert.h"
#include "server/service/request_tensors.h"
#include "server/schemes/bias_scheme.h"
#include "server/schemes/graph_scheme.h"
#include "server/schemes/rope_scheme.h"
#include "server/tables/sinusoidal_table.h"

namespace posenc {
namespace {

class KernelTimer {
 public:
  KernelTimer(ServiceMetrics* metrics, SchemeLabel scheme)
      : metrics_(metrics), scheme_(scheme), start_(std::chrono::steady_clock::now()) {}
  ~KernelTimer() {
    if (metrics_) {
      metrics_->RecordKernel(scheme_, std::chrono::duration<double>(
                                          std::chrono::steady_clock::now() - start_)
                                          .count());
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
absl::Status FillResponse(AbsoluteResult& result, const Placement& placed,
                          RequestTensors& tensors, v1::EncodeRequest& request,
                          v1::EncodeResponse& response) {
  if (!result.concat) {
    Answer(placed, request.mutable_input()->mutable_data(), response.mutable_output());
    return absl::OkStatus();
  }
  Placement out{TensorView{placed.view.dtype, result.shape, result.concat->data()}, nullptr};
  if (IsSet(request.output_shm())) {
    ASSIGN_OR_RETURN(out.view, tensors.Output(request.output_shm(), result.shape,
                                              placed.view.dtype, nullptr, "output_shm"));
    std::memcpy(out.view.data, result.concat->data(), result.concat->size());
    out.ref = &request.output_shm();
  }
  Answer(out, &*result.concat, response.mutable_output());
  return absl::OkStatus();
}

// CONCAT writes a new, wider buffer; every other absolute scheme and RoPE work in place.
bool WorksInPlace(const v1::EncodeRequest& r) {
  if (r.has_sinusoidal()) return r.sinusoidal().fusion() != v1::CONCAT;
  if (r.has_learned()) return r.learned().fusion() != v1::CONCAT;
  return true;
}

// RoPE rotates the query (and key) in place: the request's own buffers (or slices) become
// the response's.
absl::Status RotateRope(const ServiceState& state, v1::EncodeRequest& request,
                        v1::EncodeResponse& response, RequestTensors& tensors,
                        const TensorView& input, const PositionsSpec& positions) {
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
  ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(request.rope()));
  {
    KernelTimer timer(state.metrics, SchemeLabel::kRope);
    RETURN_IF_ERROR(ApplyRope(rope, placed.view, key_placed ? &key_placed->view : nullptr,
                              positions, *state.cache));
  }
  RETURN_IF_ERROR(tensors.CheckIntact());
  Answer(placed, request.mutable_input()->mutable_data(), response.mutable_output());
  if (key_placed) {
    Answer(*key_placed, request.mutable_key()->mutable_data(), response.mutable_key_output());
  }
  return absl::OkStatus();
}

absl::StatusOr<AbsoluteResult> ApplyLearnedScheme(const ServiceState& state,
                                                  const v1::Learned& l, const TensorView& input,
                                                  const PositionsSpec& positions) {
  ASSIGN_OR_RETURN(const Overflow overflow, OverflowFromProto(l.overflow()));
  ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromLearned(l));
  if (l.table().empty()) {
    return absl::InvalidArgumentError("learned.table is empty; name a --table");
  }
  const NamedTable* named = state.tables->Find(l.table());
  if (!named) {
    return absl::NotFoundError(
        absl::StrCat("learned.table '", l.table(), "' is not loaded (see ListSchemes)"));
  }
  return ApplyLearned(LearnedSpec{l.table(), named->table, overflow}, combine, input, positions,
                      state.limits);
}

// Every scheme but RoPE: the spec from the proto, then the scheme's plan.
absl::StatusOr<AbsoluteResult> ApplyAbsoluteScheme(const ServiceState& state,
                                                   const v1::EncodeRequest& request,
                                                   const TensorView& input,
                                                   const PositionsSpec& positions) {
  switch (request.scheme_case()) {
    case v1::EncodeRequest::kSinusoidal: {
      ASSIGN_OR_RETURN(const SinusoidalSpec spec, SinusoidalFromProto(request.sinusoidal()));
      ASSIGN_OR_RETURN(const CombineSpec combine, CombineFromSinusoidal(request.sinusoidal()));
      return ApplySinusoidal(spec, combine, input, positions, *state.cache, state.limits);
    }
    case v1::EncodeRequest::kLearned:
      return ApplyLearnedScheme(state, request.learned(), input, positions);
    case v1::EncodeRequest::kHierarchical:
      return ApplyHierarchical(HierarchicalFromProto(request.hierarchical()), input,
                               state.limits);
    case v1::EncodeRequest::kContinuous: {
      ASSIGN_OR_RETURN(const ContinuousSpec spec, ContinuousFromProto(request.continuous()));
      return ApplyContinuous(spec, input, positions, state.limits);
    }
    default:
      return absl::InvalidArgumentError("scheme is not a known scheme");
  }
}

}  // namespace

void RequestHandlers::CountBytes(uint64_t in_bytes, uint64_t out_bytes,
                                 const RequestTensors& tensors) const {
  if (!state_.metrics) return;
  state_.metrics->AddBytes(Transport::kInline, in_bytes, out_bytes);
  state_.metrics->AddBytes(Transport::kShm, tensors.shm_in_bytes(), tensors.shm_out_bytes());
}

SchemeLabel LabelOf(const v1::EncodeRequest& request) {
  switch (request.scheme_case()) {
    case v1::EncodeRequest::kSinusoidal: return SchemeLabel::kSinusoidal;
    case v1::EncodeRequest::kLearned: return SchemeLabel::kLearned;
    case v1::EncodeRequest::kRope: return SchemeLabel::kRope;
    case v1::EncodeRequest::kHierarchical: return SchemeLabel::kHierarchical;
    case v1::EncodeRequest::kContinuous: return SchemeLabel::kContinuous;
    default: return SchemeLabel::kNone;
  }
}

absl::Status RequestHandlers::Encode(v1::EncodeRequest& request, v1::EncodeResponse& response,
                                     SchemeLabel* scheme) const {
  *scheme = LabelOf(request);
  response.set_request_id(request.request_id());
  if (request.scheme_case() == v1::EncodeRequest::SCHEME_NOT_SET) {
    return absl::InvalidArgumentError(
        "scheme is not set; set one of sinusoidal, learned, rope, hierarchical, continuous");
  }
  if (!request.has_input()) return absl::InvalidArgumentError("input is not set");
  const uint64_t in_bytes = request.input().data().size() + request.key().data().size();
  RequestTensors tensors(state_.shm);
  ASSIGN_OR_RETURN(TensorView input, tensors.View(request.mutable_input(), "input"));
  if (request.has_key() && request.scheme_case() != v1::EncodeRequest::kRope) {
    return absl::InvalidArgumentError("key is set; only rope takes keys");
  }
  const PositionsSpec positions = PositionsFromProto(request.positions());
  if (!positions.values.empty() && request.scheme_case() != v1::EncodeRequest::kContinuous) {
    return absl::InvalidArgumentError("positions.values is set; only continuous takes it");
  }
  if (positions.has_axis_positions() && request.scheme_case() != v1::EncodeRequest::kRope) {
    return absl::InvalidArgumentError(absl::StrCat(
        positions.axis_ids.empty() ? "positions.mrope_segments" : "positions.axis_ids",
        " is set; only rope takes it"));
  }
  if (request.scheme_case() == v1::EncodeRequest::kRope) {
    RETURN_IF_ERROR(RotateRope(state_, request, response, tensors, input, positions));
    CountBytes(in_bytes, response.output().data().size() + response.key_output().data().size(),
               tensors);
    return absl::OkStatus();
  }
  Placement placed{input, request.input().has_shm() ? &request.input().shm() : nullptr};
  if (WorksInPlace(request)) {
    ASSIGN_OR_RETURN(placed, PlaceInPlace(tensors, request.input(), input, request.output_shm(),
                                          "output_shm"));
  }
  absl::StatusOr<AbsoluteResult> result;
  {
    KernelTimer timer(state_.metrics, *scheme);
    result = ApplyAbsoluteScheme(state_, request, placed.view, positions);
  }
  if (!result.ok()) return result.status();
  RETURN_IF_ERROR(FillResponse(*result, placed, tensors, request, response));
  RETURN_IF_ERROR(tensors.CheckIntact());
  CountBytes(in_bytes, response.output().data().size(), tensors);
  return absl::OkStatus();
}

absl::Status RequestHandlers::AttentionBias(v1::BiasRequest& request, v1::BiasResponse& response,
                                            SchemeLabel* scheme) const {
  *scheme = request.has_alibi() ? SchemeLabel::kAlibi
            : request.has_t5()  ? SchemeLabel::kT5
                                : SchemeLabel::kNone;
  response.set_request_id(request.request_id());
  ASSIGN_OR_RETURN(const BiasSpec spec, BiasFromProto(request));
  ASSIGN_OR_RETURN(const BiasPlan plan, PlanBias(spec, *state_.tables));
  const uint64_t in_bytes = request.scores().data().size();
  RequestTensors tensors(state_.shm);
  KernelTimer timer(state_.metrics, *scheme);
  if (spec.add_to_scores) {
    ASSIGN_OR_RETURN(const TensorView in, tensors.View(request.mutable_scores(), "scores"));
    ASSIGN_OR_RETURN(const Placement placed, PlaceInPlace(tensors, request.scores(), in,
                                                          request.output_shm(), "output_shm"));
    RETURN_IF_ERROR(AddBias(plan, placed.view));
    RETURN_IF_ERROR(tensors.CheckIntact());
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
    RETURN_IF_ERROR(BuildBias(plan, placed.view));
    RETURN_IF_ERROR(tensors.CheckIntact());
    Answer(placed, &out, response.mutable_output());
  }
  CountBytes(in_bytes, response.output().data().size(), tensors);
  return absl::OkStatus();
}

absl::Status RequestHandlers::GraphEncode(v1::GraphRequest& request,
                                          v1::GraphResponse& response,
                                          const CancelCheck& cancelled) const {
  response.set_request_id(request.request_id());
  std::optional<ConstTensorView> input;
  if (request.has_input()) {
    ASSIGN_OR_RETURN(input, ViewOfTensor(request.mutable_input(), "input"));
  }
  GraphResult result;
  {
    KernelTimer timer(state_.metrics, SchemeLabel::kGraphLaplacian);
    ASSIGN_OR_RETURN(result,
                     ApplyGraph(GraphFromProto(request), input, state_.limits,
                                state_.graph_limits, cancelled));
  }
  for (double e : result.eigenvalues) response.add_eigenvalues(e);
  MoveIntoTensor(&result.data, result.shape, result.dtype, response.mutable_output());
  return absl::OkStatus();
}

void RequestHandlers::ListSchemes(v1::ListSchemesResponse& response) const {
  for (const char* name : {"sinusoidal", "learned", "rope", "hierarchical", "continuous",
                           "alibi", "t5", "graph_laplacian"}) {
    response.add_schemes(name);
  }
  for (v1::DType t : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) response.add_dtypes(t);
  for (const auto& [name, named] : state_.tables->all()) {
    v1::NamedTable* t = response.add_tables();
    t->set_name(name);
    t->add_shape(named.table->rows);
    t->add_shape(named.table->cols);
    t->set_dtype(DTypeToProto(named.source_dtype));
  }
  response.set_version(state_.version);
}

absl::StatusOr<int64_t> RequestHandlers::PlanTable(const v1::TableRequest& request,
                                                   SchemeLabel* scheme) const {
  *scheme = request.has_sinusoidal() ? SchemeLabel::kSinusoidal
            : request.has_rope()     ? SchemeLabel::kRope
                                     : SchemeLabel::kNone;
  if (*scheme == SchemeLabel::kNone) {
    return absl::InvalidArgumentError("scheme is not set; set sinusoidal or rope");
  }
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
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype is ", DTypeName(dtype), "; tables are FLOAT32, FLOAT16 or BFLOAT16"));
    }
  }
  if (*scheme == SchemeLabel::kRope) {
    if (request.dim() % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim is ", request.dim(), "; the rotary dimension must be even"));
    }
    // Checks the spec (and computes the first row) before any chunk goes out.
    ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(request.rope()));
    RETURN_IF_ERROR(RopeTableRows(rope, request.dim(), 0, 1, request.length()).status());
  } else {
    ASSIGN_OR_RETURN(SinusoidalSpec spec, SinusoidalFromProto(request.sinusoidal()));
    spec.dim = request.dim();
    RETURN_IF_ERROR(ValidateSinusoidal(spec, "sinusoidal"));
  }
  const int64_t row_bytes = request.dim() * static_cast<int64_t>(DTypeSize(dtype));
  // Leave room for the chunk's framing inside the message limit.
  const int64_t budget = static_cast<int64_t>(state_.limits.max_output_bytes) - 4096;
  if (row_bytes > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "one row of dim ", request.dim(), " is ", row_bytes, " bytes, over the message limit"));
  }
  if (request.rows_per_chunk() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_chunk is ", request.rows_per_chunk(), "; it must be >= 0"));
  }
  if (request.rows_per_chunk() == 0) return budget / row_bytes;
  if (request.rows_per_chunk() > budget / row_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rows_per_chunk is ", request.rows_per_chunk(), "; at most ",
                     budget / row_bytes, " rows of ", row_bytes, " bytes fit a message"));
  }
  return request.rows_per_chunk();
}

absl::Status RequestHandlers::TableChunk(const v1::TableRequest& request, int64_t first,
                                         int64_t n, v1::TableChunk& chunk) const {
  DType dtype = DType::kFloat32;
  if (request.dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(dtype, DTypeFromProto(request.dtype(), "dtype"));
  }
  Table rows;
  v1::Tensor* t = chunk.mutable_rows();
  t->clear_shape();
  if (request.has_rope()) {
    // [n, dim] holding cos then sin per row is the same memory as [n, 2, dim/2].
    ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(request.rope()));
    ASSIGN_OR_RETURN(rows, RopeTableRows(rope, request.dim(), first, n, request.length()));
    t->add_shape(n);
    t->add_shape(2);
    t->add_shape(request.dim() / 2);
  } else {
    ASSIGN_OR_RETURN(SinusoidalSpec spec, SinusoidalFromProto(request.sinusoidal()));
    spec.dim = request.dim();
    rows = ComputeSinusoidalTable(spec, first, n);
    t->add_shape(n);
    t->add_shape(request.dim());
  }
  chunk.set_first_position(first);
  t->set_dtype(DTypeToProto(dtype));
  std::string* data = t->mutable_data();
  data->resize(rows.data.size() * DTypeSize(dtype));
  return ConvertFromFloat32(rows.data.data(), dtype, data->data(),
                            static_cast<int64_t>(rows.data.size()));
}

}  // namespace posenc
