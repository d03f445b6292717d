#include "server/shm/shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/shm/fault_guard.h"

namespace posenc {

// One mapping of a slice of an object. Unmapped when the last shared_ptr (the registry's
// or a lease's) goes.
class MappedRegion {
 public:
  MappedRegion(std::string name, uint64_t offset, uint64_t byte_size, void* map_base,
               size_t map_length, uint8_t* data, int guard_slot,
               std::shared_ptr<std::atomic<uint64_t>> mapped_bytes)
      : name_(std::move(name)), offset_(offset), byte_size_(byte_size), map_base_(map_base),
        map_length_(map_length), data_(data), guard_slot_(guard_slot),
        mapped_bytes_(std::move(mapped_bytes)) {
    mapped_bytes_->fetch_add(byte_size_);
  }
  ~MappedRegion() {
    fault_guard::Release(guard_slot_);
    munmap(map_base_, map_length_);
    mapped_bytes_->fetch_sub(byte_size_);
  }
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  const std::string& name() const { return name_; }
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }
  uint8_t* data() const { return data_; }
  bool faulted() const { return fault_guard::Faulted(guard_slot_); }
  std::atomic<int64_t>& in_use() { return in_use_; }

 private:
  const std::string name_;
  const uint64_t offset_;
  const uint64_t byte_size_;
  void* const map_base_;
  const size_t map_length_;
  uint8_t* const data_;
  const int guard_slot_;
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
  std::atomic<int64_t> in_use_{0};
};

namespace {

const char kOffMessage[] = "shared memory is off; start posenc-server with --shm";

std::string ErrnoText(int error) {
  char buffer[128];
  return strerror_r(error, buffer, sizeof(buffer));  // GNU: returns the message
}

std::string Prefix(absl::string_view name) {
  return absl::StrCat("shared memory region '", name, "': ");
}

// Owns an open descriptor; the mapping keeps the object alive, so none stays open.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens the object without following a symlink; errors never mention the key.
absl::StatusOr<UniqueFd> OpenObject(absl::string_view name, absl::string_view key) {
  const std::string path(key);
  const int fd = shm_open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd >= 0) return UniqueFd(fd);
  const int error = errno;
  const std::string message = Prefix(name) + "cannot open the key's object: ";
  switch (error) {
    case ENOENT: return absl::NotFoundError(message + "no object has that key");
    case ELOOP: return absl::PermissionDeniedError(message + "it is a symbolic link");
    case EMFILE:
    case ENFILE: return absl::ResourceExhaustedError(message + ErrnoText(error));
    default: return absl::PermissionDeniedError(message + ErrnoText(error));
  }
}

// The object must be ours and plain; [offset, offset + byte_size) must lie inside it.
absl::Status CheckObject(absl::string_view name, int fd, uint64_t offset, uint64_t byte_size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(Prefix(name) + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(Prefix(name) + "the key's object is not a regular object");
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(
        Prefix(name) + "the key's object is owned by another user than the server's");
  }
  const auto object_size = static_cast<uint64_t>(st.st_size);
  if (offset > object_size || byte_size > object_size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(name), "offset ", offset, " + byte_size ", byte_size,
                     " is past the end of the key's object (", object_size, " bytes)"));
  }
  return absl::OkStatus();
}

// REQUIRES: CheckObject(name, fd, offset, byte_size) is OK.
absl::StatusOr<std::shared_ptr<MappedRegion>> MapRegion(
    absl::string_view name, int fd, uint64_t offset, uint64_t byte_size,
    std::shared_ptr<std::atomic<uint64_t>> mapped_bytes) {
  // mmap wants a page-aligned file offset; the slice starts `lead` bytes into the map.
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lead = offset % page;
  const size_t length = static_cast<size_t>(lead + byte_size);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(offset - lead));
  if (base == MAP_FAILED) {
    const int error = errno;
    const std::string message = Prefix(name) + "mmap failed: " + ErrnoText(error);
    return error == ENOMEM ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
  }
  const int slot = fault_guard::Claim(base, length);
  if (slot < 0) {
    munmap(base, length);
    return absl::ResourceExhaustedError(
        absl::StrCat(Prefix(name), "the server already maps ", fault_guard::kMaxRanges,
                     " regions (some unregistered ones are still in use)"));
  }
  return std::make_shared<MappedRegion>(std::string(name), offset, byte_size, base, length,
                                        static_cast<uint8_t*>(base) + lead, slot,
                                        std::move(mapped_bytes));
}

}  // namespace

ShmLease::ShmLease(std::shared_ptr<MappedRegion> region, uint8_t* data, uint64_t size)
    : region_(std::move(region)), data_(data), size_(size) {
  region_->in_use().fetch_add(1);
}

ShmLease::ShmLease(ShmLease&& other) noexcept
    : region_(std::move(other.region_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

ShmLease& ShmLease::operator=(ShmLease&& other) noexcept {
  if (this != &other) {
    Drop();
    region_ = std::move(other.region_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShmLease::~ShmLease() { Drop(); }

void ShmLease::Drop() {
  if (region_ == nullptr) return;
  region_->in_use().fetch_sub(1);
  region_.reset();  // the last lease of an unregistered region unmaps it here
  data_ = nullptr;
  size_ = 0;
}

const std::string& ShmLease::region_name() const {
  static const std::string kNone;
  return region_ != nullptr ? region_->name() : kNone;
}

absl::Status ShmLease::CheckIntact() const {
  if (region_ == nullptr) return absl::FailedPreconditionError("shared memory lease is empty");
  if (!region_->faulted()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("shared memory region '", region_->name(), "' was truncated while in use"));
}

SharedMemoryRegistry::SharedMemoryRegistry(Options options)
    : options_(std::move(options)), mapped_bytes_(std::make_shared<std::atomic<uint64_t>>(0)) {}

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

// shm_open's rules plus ours: the prefix, and no '/' but an optional leading one.
absl::Status SharedMemoryRegistry::CheckKey(absl::string_view key) const {
  absl::string_view bare = key;
  if (!bare.empty() && bare.front() == '/') bare.remove_prefix(1);
  if (bare.empty()) return absl::PermissionDeniedError("the key is empty");
  if (bare.find('/') != absl::string_view::npos) {
    return absl::PermissionDeniedError("the key has a '/' after its first character");
  }
  if (bare.find('\0') != absl::string_view::npos) {
    return absl::PermissionDeniedError("the key has a NUL byte");
  }
  if (bare.substr(0, options_.key_prefix.size()) != options_.key_prefix) {
    return absl::PermissionDeniedError("the key does not start with the server's --shm_key_prefix");
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::CheckRoom(uint64_t byte_size, const std::string& owner) const {
  if (regions_.size() >= static_cast<size_t>(std::max(options_.max_regions, 0))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server has ", regions_.size(), " shared memory regions, its --shm_max_regions"));
  }
  int64_t owned = 0;
  uint64_t owned_bytes = 0;
  for (auto it = regions_.lower_bound({owner, ""});
       it != regions_.end() && it->first.first == owner; ++it) {
    ++owned;
    owned_bytes += it->second.region->byte_size();
  }
  if (owned >= std::max(options_.max_regions_per_owner, 0)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", owned, " shared memory regions, as many as one client may"));
  }
  if (owned_bytes > options_.max_bytes_per_owner ||
      byte_size > options_.max_bytes_per_owner - owned_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "byte_size ", byte_size, " on top of this client's ", owned_bytes,
        " bytes exceeds what one client may map (", options_.max_bytes_per_owner, ")"));
  }
  const uint64_t mapped = mapped_bytes_->load();
  if (mapped > options_.max_bytes || byte_size > options_.max_bytes - mapped) {
    return absl::ResourceExhaustedError(
        absl::StrCat("byte_size ", byte_size, " on top of the ", mapped,
                     " bytes mapped exceeds --shm_max_bytes (", options_.max_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Register(absl::string_view name, absl::string_view key,
                                            uint64_t offset, uint64_t byte_size,
                                            absl::string_view owner) {
  if (!options_.enabled) return absl::FailedPreconditionError(kOffMessage);
  if (name.empty()) return absl::InvalidArgumentError("shared memory region name is empty");
  if (byte_size == 0) {
    return absl::InvalidArgumentError(Prefix(name) + "byte_size is 0; it must be >= 1");
  }
  absl::Status key_status = CheckKey(key);
  if (!key_status.ok()) {
    return absl::Status(key_status.code(), Prefix(name) + std::string(key_status.message()));
  }
  absl::string_view bare_key = key;
  if (!bare_key.empty() && bare_key.front() == '/') bare_key.remove_prefix(1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    OwnedName owned{std::string(owner), std::string(name)};
    if (regions_.find(owned) != regions_.end()) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory region '", name, "' is already registered"));
    }
    for (const auto& [other, entry] : regions_) {
      if (other.first != owner && entry.key == bare_key) {
        return absl::PermissionDeniedError(Prefix(name) +
                                           "the key is registered by another client");
      }
    }
    ASSIGN_OR_RETURN(const UniqueFd fd, OpenObject(name, key));
    RETURN_IF_ERROR(CheckObject(name, fd.get(), offset, byte_size));
    RETURN_IF_ERROR(CheckRoom(byte_size, owned.first));
    ASSIGN_OR_RETURN(auto region, MapRegion(name, fd.get(), offset, byte_size, mapped_bytes_));
    regions_.emplace(std::move(owned), Entry{std::move(region), std::string(bare_key),
                                             std::chrono::steady_clock::now()});
  }
  Changed();
  return absl::OkStatus();
}

void SharedMemoryRegistry::Changed() const {
  if (options_.on_change) options_.on_change();
}

absl::Status SharedMemoryRegistry::Unregister(absl::string_view name, absl::string_view owner) {
  if (!options_.enabled) return absl::FailedPreconditionError(kOffMessage);
  // Unmapping happens when `dropped` goes, outside the lock.
  {
    std::vector<Entry> dropped;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = regions_.lower_bound({std::string(owner), ""});
         it != regions_.end() && it->first.first == owner;) {
      if (name.empty() || it->first.second == name) {
        dropped.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    if (dropped.empty()) return absl::OkStatus();
  }
  Changed();
  return absl::OkStatus();
}

void SharedMemoryRegistry::ReleaseOwnersExcept(const std::set<std::string>& live,
                                               std::chrono::steady_clock::time_point seen_at) {
  {
    std::vector<Entry> dropped;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (!it->first.first.empty() && live.count(it->first.first) == 0 &&
          it->second.registered < seen_at) {
        dropped.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    if (dropped.empty()) return;
  }
  Changed();
}

absl::StatusOr<std::vector<ShmRegionStatus>> SharedMemoryRegistry::Status(
    absl::string_view name, absl::string_view owner) const {
  if (!options_.enabled) return absl::FailedPreconditionError(kOffMessage);
  std::vector<ShmRegionStatus> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = regions_.lower_bound({std::string(owner), ""});
       it != regions_.end() && it->first.first == owner; ++it) {
    const std::string& region_name = it->first.second;
    MappedRegion& region = *it->second.region;
    if (!name.empty() && region_name != name) continue;
    out.push_back({region_name, region.offset(), region.byte_size(), region.in_use().load()});
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(absl::StrCat("shared memory region '", name, "' is not registered"));
  }
  return out;
}

absl::StatusOr<ShmLease> SharedMemoryRegistry::Lookup(const ShmRef& ref, absl::string_view field,
                                                      absl::string_view owner) const {
  if (!options_.enabled) return absl::FailedPreconditionError(kOffMessage);
  if (ref.region.empty())
    return absl::InvalidArgumentError(absl::StrCat(field, ".region is empty"));
  std::shared_ptr<MappedRegion> region;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(OwnedName{std::string(owner), std::string(ref.region)});
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat(field, ".region: shared memory region '", ref.region,
                                              "' is not registered"));
    }
    region = it->second.region;
  }
  if (region->faulted()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ".region: shared memory region '", ref.region,
                     "' was truncated; unregister it and register it again"));
  }
  const uint64_t size = region->byte_size();
  if (ref.offset > size || ref.byte_size > size - ref.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": offset ", ref.offset, " + byte_size ", ref.byte_size,
        " is past the end of shared memory region '", ref.region, "' (", size, " bytes)"));
  }
  uint8_t* data = region->data() + ref.offset;
  return ShmLease(std::move(region), data, ref.byte_size);
}

int64_t SharedMemoryRegistry::regions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(regions_.size());
}

uint64_t SharedMemoryRegistry::mapped_bytes() const { return mapped_bytes_->load(); }

}  // namespace posenc
