// A POSIX shared-memory object that a same-host client creates to pass tensors to a
// posenc-server started with --shm: created (mode 0600, so only this uid can use it),
// sized, mapped MAP_SHARED, and unmapped and unlinked when the ShmRegion goes. The server
// keeps its own mapping of a registered region, so unlinking early is safe.
// Move-only. Not synchronised: writers and readers of the bytes coordinate themselves.
//
//   ASSIGN_OR_RETURN(ShmRegion region, ShmRegion::Create("/posenc_app0", 1 << 20));
//   RETURN_IF_ERROR(FromGrpcStatus(stub->RegisterSharedMemory(&ctx,
//       region.RegisterRequest("in0"), &reply)));
//   ASSIGN_OR_RETURN(absl::Span<float> x, region.SliceAs<float>(0, 8 * 16));
//   *request.mutable_input()->mutable_shm() = region.Ref("in0", 0, 8 * 16 * sizeof(float));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::client {

namespace v1 = ::posenc::v1;

class ShmRegion {
 public:
  // Creates the object `key` (as shm_open names it, e.g. "/posenc_app0"; it must start
  // with the server's --shm_key_prefix) with `byte_size` zero bytes and maps it.
  // ALREADY_EXISTS when an object has the key; INVALID_ARGUMENT for byte_size 0 or a key
  // that is empty or has a '/' after the first character.
  static absl::StatusOr<ShmRegion> Create(std::string key, uint64_t byte_size);

  ShmRegion(ShmRegion&& other) noexcept;
  ShmRegion& operator=(ShmRegion&& other) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  ~ShmRegion();  // munmap + shm_unlink

  const std::string& key() const { return key_; }
  uint64_t byte_size() const { return byte_size_; }
  absl::Span<uint8_t> bytes() const { return {data_, static_cast<size_t>(byte_size_)}; }

  // Bytes [offset, offset + byte_size); OUT_OF_RANGE past the end (overflow-safe).
  absl::StatusOr<absl::Span<uint8_t>> Slice(uint64_t offset, uint64_t byte_size) const;

  // `count` elements of T from byte `offset`; INVALID_ARGUMENT when `offset` is not a
  // multiple of alignof(T).
  template <typename T>
  absl::StatusOr<absl::Span<T>> SliceAs(uint64_t offset, uint64_t count) const {
    if (offset % alignof(T) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("offset ", offset, " is not a multiple of ", alignof(T)));
    }
    if (count > UINT64_MAX / sizeof(T)) return absl::OutOfRangeError("count is too large");
    auto bytes = Slice(offset, count * sizeof(T));
    if (!bytes.ok()) return bytes.status();
    return absl::Span<T>(reinterpret_cast<T*>(bytes->data()), static_cast<size_t>(count));
  }

  // The request that registers bytes [offset, offset + byte_size) of this object
  // (default: all of it) under `name`.
  v1::RegisterSharedMemoryRequest RegisterRequest(const std::string& name, uint64_t offset = 0,
                                                  uint64_t byte_size = UINT64_MAX) const;

  // A reference to a slice of the region registered as `region` (offsets relative to it).
  static v1::SharedMemoryRef Ref(const std::string& region, uint64_t offset, uint64_t byte_size);

 private:
  ShmRegion(std::string key, uint8_t* data, uint64_t byte_size);
  void Reset();

  std::string key_;
  uint8_t* data_ = nullptr;
  uint64_t byte_size_ = 0;
};

}  // namespace posenc::client
