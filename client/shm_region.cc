#include "client/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace posenc::client {
namespace {

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case EEXIST: return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE: return absl::ResourceExhaustedError(message);
    case EINVAL:
    case ENAMETOOLONG: return absl::InvalidArgumentError(message);
    default: return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<ShmRegion> ShmRegion::Create(std::string key, uint64_t byte_size) {
  const size_t first = key.empty() || key[0] != '/' ? 0 : 1;
  if (key.size() == first || key.find('/', first) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory key '", key, "' must be a name with at most a leading '/'"));
  }
  if (byte_size == 0) return absl::InvalidArgumentError("shared memory byte_size is 0");
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open('", key, "')"));
  void* data = MAP_FAILED;
  int error = 0;
  if (byte_size > static_cast<uint64_t>(INT64_MAX)) {
    error = EINVAL;
  } else if (ftruncate(fd, static_cast<off_t>(byte_size)) != 0) {
    error = errno;
  } else {
    data = mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) error = errno;
  }
  close(fd);  // the mapping keeps the object
  if (data == MAP_FAILED) {
    shm_unlink(key.c_str());
    return ErrnoStatus(error,
                       absl::StrCat("sizing and mapping '", key, "' (", byte_size, " bytes)"));
  }
  return ShmRegion(std::move(key), static_cast<uint8_t*>(data), byte_size);
}

ShmRegion::ShmRegion(std::string key, uint8_t* data, uint64_t byte_size)
    : key_(std::move(key)), data_(data), byte_size_(byte_size) {}

ShmRegion::ShmRegion(ShmRegion&& other) noexcept
    : key_(std::move(other.key_)), data_(std::exchange(other.data_, nullptr)),
      byte_size_(std::exchange(other.byte_size_, 0)) {}

ShmRegion& ShmRegion::operator=(ShmRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    key_ = std::move(other.key_);
    data_ = std::exchange(other.data_, nullptr);
    byte_size_ = std::exchange(other.byte_size_, 0);
  }
  return *this;
}

ShmRegion::~ShmRegion() { Reset(); }

void ShmRegion::Reset() {
  if (data_ == nullptr) return;
  munmap(data_, byte_size_);
  shm_unlink(key_.c_str());
  data_ = nullptr;
  byte_size_ = 0;
}

absl::StatusOr<absl::Span<uint8_t>> ShmRegion::Slice(uint64_t offset, uint64_t byte_size) const {
  if (offset > byte_size_ || byte_size > byte_size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " + byte_size ", byte_size,
                                              " is past the end of the region (", byte_size_,
                                              " bytes)"));
  }
  return absl::Span<uint8_t>(data_ + offset, static_cast<size_t>(byte_size));
}

v1::RegisterSharedMemoryRequest ShmRegion::RegisterRequest(const std::string& name, uint64_t offset,
                                                           uint64_t byte_size) const {
  v1::RegisterSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key_);
  request.set_offset(offset);
  request.set_byte_size(byte_size == UINT64_MAX && offset <= byte_size_ ? byte_size_ - offset
                                                                        : byte_size);
  return request;
}

v1::SharedMemoryRef ShmRegion::Ref(const std::string& region, uint64_t offset, uint64_t byte_size) {
  v1::SharedMemoryRef ref;
  ref.set_region(region);
  ref.set_offset(offset);
  ref.set_byte_size(byte_size);
  return ref;
}

}  // namespace posenc::client
