#include "server/service/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace posenc {

absl::StatusOr<TensorView> ViewOfTensor(v1::Tensor* tensor, absl::string_view field) {
  auto dtype = DTypeFromProto(tensor->dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  // Checked before anything proportional to the shape is touched.
  auto count = CheckedNumElements(tensor->shape(), field);
  if (!count.ok()) return count.status();
  const int64_t need = *count * static_cast<int64_t>(DTypeSize(*dtype));
  if (static_cast<int64_t>(tensor->data().size()) != need) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data has ", tensor->data().size(),
                                                   " bytes; shape ", ShapeString(tensor->shape()),
                                                   " ", DTypeName(*dtype), " needs ", need));
  }
  TensorView view;
  view.dtype = *dtype;
  view.shape.assign(tensor->shape().begin(), tensor->shape().end());
  view.data = tensor->mutable_data()->data();
  return view;
}

void MoveIntoTensor(std::string* data, absl::Span<const int64_t> shape, DType dtype,
                    v1::Tensor* out) {
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_dtype(DTypeToProto(dtype));
  out->mutable_data()->swap(*data);
}

PositionsSpec PositionsFromProto(const v1::Positions& positions) {
  PositionsSpec spec;
  spec.offsets = absl::MakeConstSpan(positions.offsets().data(), positions.offsets_size());
  spec.ids = absl::MakeConstSpan(positions.ids().data(), positions.ids_size());
  spec.values = absl::MakeConstSpan(positions.values().data(), positions.values_size());
  spec.axis_ids = absl::MakeConstSpan(positions.axis_ids().data(), positions.axis_ids_size());
  spec.mrope_segments.reserve(positions.mrope_segments_size());
  for (const v1::MropeSegment& s : positions.mrope_segments()) {
    MropeSegmentSpec segment;
    switch (s.kind()) {
      case v1::TEXT: segment.kind = MropeSegmentSpec::Kind::kText; break;
      case v1::IMAGE: segment.kind = MropeSegmentSpec::Kind::kImage; break;
      case v1::VIDEO: segment.kind = MropeSegmentSpec::Kind::kVideo; break;
      default: segment.kind = MropeSegmentSpec::Kind::kUnspecified; break;
    }
    segment.text_length = s.text_length();
    segment.grid_t = s.grid_t();
    segment.grid_h = s.grid_h();
    segment.grid_w = s.grid_w();
    if (s.has_temporal_scale()) segment.temporal_scale = s.temporal_scale();
    spec.mrope_segments.push_back(segment);
  }
  return spec;
}

grpc::Status ToGrpcStatus(const absl::Status& status, const std::string& request_id) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (!request_id.empty()) message = absl::StrCat("request ", Elide(request_id), ": ", message);
  // absl and gRPC share code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace posenc
