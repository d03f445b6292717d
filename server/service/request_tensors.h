// The tensors of one request, wherever their bytes are: inline in the message (viewed in
// place, nothing copied) or by reference in a registered shared-memory region (a lease on
// the slice, held until the request is done, so an Unregister meanwhile defers the unmap).
// Shape and dtype always come from the message; a slice must hold exactly
// product(shape) * sizeof(dtype) bytes. Slices written by the request must not overlap a
// different tensor of it. One per request; not thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "posenc/v1/posenc.pb.h"
#include "server/shm/peer_identity.h"
#include "server/shm/shared_memory_registry.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

class RequestTensors {
 public:
  // `shm` may be null (no shared memory: a tensor by reference is FAILED_PRECONDITION).
  // Regions are those `shm_owner` registered (the client's connection).
  explicit RequestTensors(const SharedMemoryRegistry* shm, ShmOwner shm_owner = {})
      : shm_(shm), shm_owner_(std::move(shm_owner)) {}

  // A writable view of `tensor`'s bytes: `data` or `shm`, never both. Errors name `field`.
  absl::StatusOr<TensorView> View(v1::Tensor* tensor, absl::string_view field);

  // A writable slice `ref` for an output of `shape` and `dtype`; it must not overlap any
  // tensor viewed so far, except that it may be exactly the range of `same_as` (the input it
  // replaces, in place; or null).
  absl::StatusOr<TensorView> Output(const v1::SharedMemoryRef& ref, const Shape& shape, DType dtype,
                                    const void* same_as, absl::string_view field);

  // DATA_LOSS when a client truncated a region while this request used it: whatever was
  // read or written there is lost. Call after the work, before answering.
  absl::Status CheckIntact() const;

  // Bytes of the tensors read from, and of the outputs placed in, shared memory (the
  // transport="shm" metrics).
  uint64_t shm_in_bytes() const { return shm_in_bytes_; }
  uint64_t shm_out_bytes() const { return shm_out_bytes_; }
  // An output written over its input's own slice.
  void CountInPlaceOutput(uint64_t bytes) { shm_out_bytes_ += bytes; }

 private:
  struct Slice {
    const char* begin;
    uint64_t size;
    std::string field;
  };
  absl::StatusOr<ShmLease> Lease(const v1::SharedMemoryRef& ref, uint64_t need,
                                 absl::string_view field);
  absl::Status CheckNoOverlap(const char* begin, uint64_t size, const void* same_as,
                              absl::string_view field) const;

  const SharedMemoryRegistry* const shm_;
  const ShmOwner shm_owner_;
  std::vector<ShmLease> leases_;
  std::vector<Slice> slices_;
  uint64_t shm_in_bytes_ = 0;
  uint64_t shm_out_bytes_ = 0;
};

// Whether `ref` names a slice (a set SharedMemoryRef has a region).
inline bool IsSet(const v1::SharedMemoryRef& ref) { return !ref.region().empty(); }

}  // namespace posenc
