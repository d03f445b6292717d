#include "server/service/request_tensors.h"

#include "absl/strings/str_cat.h"
#include "server/service/proto_convert.h"

namespace posenc {
namespace {

// Bytes product(shape) * sizeof(dtype) after checking the shape.
absl::StatusOr<uint64_t> TensorBytes(absl::Span<const int64_t> shape, DType dtype,
                                     absl::string_view field) {
  absl::StatusOr<int64_t> count = CheckedNumElements(shape, field);
  if (!count.ok()) return count.status();
  return static_cast<uint64_t>(*count) * DTypeSize(dtype);
}

}  // namespace

absl::StatusOr<ShmLease> RequestTensors::Lease(const v1::SharedMemoryRef& ref, uint64_t need,
                                               absl::string_view field) {
  if (shm_ == nullptr || !shm_->enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field,
                     " is a shared-memory reference, but shared memory is off; start posenc-server "
                     "with --shm"));
  }
  if (ref.byte_size() != need) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size is ", ref.byte_size(),
                                                   "; the tensor needs exactly ", need, " bytes"));
  }
  return shm_->Lookup(ShmRef{ref.region(), ref.offset(), ref.byte_size()}, field,
                      shm_owner_.name());
}

absl::Status RequestTensors::CheckNoOverlap(const char* begin, uint64_t size, const void* same_as,
                                            absl::string_view field) const {
  for (const Slice& s : slices_) {
    // The tensor the output replaces may be its exact range (in place), never part of it.
    if (s.begin == same_as && begin == s.begin && size == s.size) continue;
    if (begin < s.begin + s.size && s.begin < begin + size) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " overlaps ", s.field, "; a written slice must be its own"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> RequestTensors::View(v1::Tensor* tensor, absl::string_view field) {
  if (!tensor->has_shm()) return ViewOfTensor(tensor, field);
  const std::string shm_field = absl::StrCat(field, ".shm");
  if (!tensor->data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has both data and shm; send the bytes one way"));
  }
  absl::StatusOr<DType> dtype = DTypeFromProto(tensor->dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<uint64_t> need = TensorBytes(tensor->shape(), *dtype, field);
  if (!need.ok()) return need.status();
  absl::StatusOr<ShmLease> lease = Lease(tensor->shm(), *need, shm_field);
  if (!lease.ok()) return lease.status();
  char* begin = reinterpret_cast<char*>(lease->data());
  if (absl::Status s = CheckNoOverlap(begin, *need, nullptr, shm_field); !s.ok()) return s;
  TensorView view;
  view.dtype = *dtype;
  view.shape.assign(tensor->shape().begin(), tensor->shape().end());
  view.data = begin;
  slices_.push_back({begin, *need, shm_field});
  leases_.push_back(std::move(*lease));
  shm_in_bytes_ += *need;
  return view;
}

absl::StatusOr<TensorView> RequestTensors::Output(const v1::SharedMemoryRef& ref,
                                                  const Shape& shape, DType dtype,
                                                  const void* same_as, absl::string_view field) {
  absl::StatusOr<uint64_t> need = TensorBytes(shape, dtype, field);
  if (!need.ok()) return need.status();
  absl::StatusOr<ShmLease> lease = Lease(ref, *need, field);
  if (!lease.ok()) return lease.status();
  char* begin = reinterpret_cast<char*>(lease->data());
  if (absl::Status s = CheckNoOverlap(begin, *need, same_as, field); !s.ok()) return s;
  slices_.push_back({begin, *need, std::string(field)});
  leases_.push_back(std::move(*lease));
  shm_out_bytes_ += *need;
  return TensorView{dtype, shape, begin};
}

absl::Status RequestTensors::CheckIntact() const {
  for (const ShmLease& lease : leases_) {
    if (absl::Status s = lease.CheckIntact(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace posenc
