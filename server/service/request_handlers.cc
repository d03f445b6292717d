#include "server/service/request_handlers.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/service/proto_convert.h"
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

// Puts an absolute scheme's result into the response: the input's own buffer (changed in
// place) for ADD, the new buffer for CONCAT.
void FillResponse(AbsoluteResult& result, const TensorView& input, v1::EncodeRequest& request,
                  v1::EncodeResponse& response) {
  std::string* data = result.concat ? &*result.concat : request.mutable_input()->mutable_data();
  MoveIntoTensor(data, result.shape, input.dtype, response.mutable_output());
}

}  // namespace

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
  ASSIGN_OR_RETURN(TensorView input, ViewOfTensor(request.mutable_input(), "input"));
  if (request.has_key() && request.scheme_case() != v1::EncodeRequest::kRope) {
    return absl::InvalidArgumentError("key is set; only rope takes keys");
  }
  const PositionsSpec positions = PositionsFromProto(request.positions());
  if (!positions.values.empty() && request.scheme_case() != v1::EncodeRequest::kContinuous) {
    return absl::InvalidArgumentError("positions.values is set; only continuous takes it");
  }
  if (request.scheme_case() == v1::EncodeRequest::kRope) {
    std::optional<TensorView> key;
    if (request.has_key()) {
      ASSIGN_OR_RETURN(key, ViewOfTensor(request.mutable_key(), "key"));
    }
    {
      KernelTimer timer(state_.metrics, *scheme);
      RETURN_IF_ERROR(ApplyRope(RopeFromProto(request.rope()), input, key ? &*key : nullptr,
                                positions, *state_.cache));
    }
    // Rotated in place: the request's own buffers become the response's.
    MoveIntoTensor(request.mutable_input()->mutable_data(), input.shape, input.dtype,
                   response.mutable_output());
    if (key) {
      MoveIntoTensor(request.mutable_key()->mutable_data(), key->shape, key->dtype,
                     response.mutable_key_output());
    }
    if (state_.metrics) {
      state_.metrics->AddBytes(in_bytes, response.output().data().size() +
                                             response.key_output().data().size());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<AbsoluteResult> result;
  {
    KernelTimer timer(state_.metrics, *scheme);
    switch (request.scheme_case()) {
      case v1::EncodeRequest::kSinusoidal:
        result = ApplySinusoidal(SinusoidalFromProto(request.sinusoidal()),
                                 CombineFromSinusoidal(request.sinusoidal()), input, positions,
                                 *state_.cache, state_.limits);
        break;
      case v1::EncodeRequest::kLearned: {
        const v1::Learned& l = request.learned();
        if (l.table().empty()) {
          return absl::InvalidArgumentError("learned.table is empty; name a --table");
        }
        const NamedTable* named = state_.tables->Find(l.table());
        if (!named) {
          return absl::NotFoundError(
              absl::StrCat("learned.table '", l.table(), "' is not loaded (see ListSchemes)"));
        }
        result = ApplyLearned(LearnedSpec{l.table(), named->table, OverflowFromProto(l.overflow())},
                              CombineFromLearned(l), input, positions, state_.limits);
        break;
      }
      case v1::EncodeRequest::kHierarchical: {
        std::vector<HierarchicalLevel> levels;
        for (const v1::Level& level : request.hierarchical().levels()) {
          HierarchicalLevel l;
          l.ids = absl::MakeConstSpan(level.ids().data(), level.ids_size());
          if (level.has_base()) l.base = level.base();
          if (level.has_scale()) l.scale = level.scale();
          levels.push_back(l);
        }
        result = ApplyHierarchical(levels, input, state_.limits);
        break;
      }
      case v1::EncodeRequest::kContinuous:
        result = ApplyContinuous(ContinuousFromProto(request.continuous()), input, positions,
                                 state_.limits);
        break;
      default:
        return absl::InvalidArgumentError("scheme is not a known scheme");
    }
  }
  if (!result.ok()) return result.status();
  FillResponse(*result, input, request, response);
  if (state_.metrics) {
    state_.metrics->AddBytes(in_bytes, response.output().data().size() +
                                           response.key_output().data().size());
  }
  return absl::OkStatus();
}

absl::Status RequestHandlers::AttentionBias(v1::BiasRequest& request, v1::BiasResponse& response,
                                            SchemeLabel* scheme) const {
  *scheme = request.has_alibi() ? SchemeLabel::kAlibi
            : request.has_t5()  ? SchemeLabel::kT5
                                : SchemeLabel::kNone;
  response.set_request_id(request.request_id());
  return absl::UnimplementedError("AttentionBias is not available in this build yet");
}

absl::Status RequestHandlers::GraphEncode(v1::GraphRequest& request,
                                          v1::GraphResponse& response) const {
  response.set_request_id(request.request_id());
  return absl::UnimplementedError("GraphEncode is not available in this build yet");
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
  if (request.length() < 1 || request.length() > kMaxPosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("length is ", request.length(), "; it must be in [1, 2^40]"));
  }
  if (request.dim() < 1 || request.dim() > (1 << 20)) {
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
    RETURN_IF_ERROR(RopeTableRows(RopeFromProto(request.rope()), request.dim(), 0, 1,
                                  request.length())
                        .status());
  } else {
    SinusoidalSpec spec = SinusoidalFromProto(request.sinusoidal());
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
    ASSIGN_OR_RETURN(rows, RopeTableRows(RopeFromProto(request.rope()), request.dim(), first, n,
                                         request.length()));
    t->add_shape(n);
    t->add_shape(2);
    t->add_shape(request.dim() / 2);
  } else {
    SinusoidalSpec spec = SinusoidalFromProto(request.sinusoidal());
    spec.dim = request.dim();
    rows = ComputeSinusoidalTable(spec, first, n);
    t->add_shape(n);
    t->add_shape(request.dim());
  }
  chunk.set_first_position(first);
  t->set_dtype(DTypeToProto(dtype));
  std::string* data = t->mutable_data();
  data->resize(rows.data.size() * DTypeSize(dtype));
  FromFloat32(rows.data.data(), dtype, data->data(), rows.data.size());
  return absl::OkStatus();
}

}  // namespace posenc
