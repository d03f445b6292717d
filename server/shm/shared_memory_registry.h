// Named slices of POSIX shared-memory objects that same-host clients pass tensors through
// (the --shm regions of RegisterSharedMemory). Each region is mapped once, MAP_SHARED, and
// stays mapped until it is unregistered and its last lease is gone.
// Thread-safe (internal synchronisation). Keys never appear in any message.
//
//   SharedMemoryRegistry registry({.enabled = true});
//   RETURN_IF_ERROR(registry.Register("in0", "/posenc_app0", 0, 1 << 20));
//   ASSIGN_OR_RETURN(ShmLease lease, registry.Lookup({"in0", 4096, 1024}, "input.shm"));
//   Kernel(lease.data(), lease.size());
//   RETURN_IF_ERROR(lease.CheckIntact());  // DATA_LOSS if the client truncated the object
//
// Truncation (SIGBUS) is absorbed by server/shm/fault_guard.h: the faulting access reads
// zeros, and CheckIntact after the work fails the request.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace posenc {

class MappedRegion;

// A slice of a registered region: `offset` bytes from the region's start, `byte_size` long.
struct ShmRef {
  absl::string_view region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// One request's hold on a slice. While any lease of a region lives, the region stays
// mapped (even after Unregister) and counts as in use. Move-only; not thread-safe itself.
class ShmLease {
 public:
  ShmLease(ShmLease&& other) noexcept;
  ShmLease& operator=(ShmLease&& other) noexcept;
  ShmLease(const ShmLease&) = delete;
  ShmLease& operator=(const ShmLease&) = delete;
  ~ShmLease();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  absl::Span<uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  const std::string& region_name() const;

  // OK, or DATA_LOSS once the object was truncated under the region: what was read or
  // written through this lease since then is zeros or lost. Call after the work.
  absl::Status CheckIntact() const;

 private:
  friend class SharedMemoryRegistry;
  ShmLease(std::shared_ptr<MappedRegion> region, uint8_t* data, uint64_t size);
  void Drop();

  std::shared_ptr<MappedRegion> region_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// What SharedMemoryStatus reports of a region (never its key).
struct ShmRegionStatus {
  std::string name;
  uint64_t offset = 0;     // in the object
  uint64_t byte_size = 0;  // mapped
  int64_t in_use = 0;      // live leases
};

class SharedMemoryRegistry {
 public:
  struct Options {
    bool enabled = false;                     // --shm
    std::string key_prefix = "posenc_";       // --shm_key_prefix, after an optional leading '/'
    uint64_t max_bytes = uint64_t{16} << 30;  // --shm_max_bytes, over all mapped regions
    int max_regions = 256;                    // --shm_max_regions
    // What one owner may hold: a quarter of the regions and of the bytes by default, so one
    // client cannot exhaust the registry for the others.
    int max_regions_per_owner = 64;
    uint64_t max_bytes_per_owner = uint64_t{4} << 30;
    // Called after a Register, Unregister or ReleaseOwnersExcept that changed the regions,
    // outside the registry's lock (it may read regions() and mapped_bytes()); any thread.
    std::function<void()> on_change;
  };

  // Every call below names an owner: a region is seen, used, replaced and unregistered only
  // by the owner that registered it (the server passes the client's connection), and an
  // object (key) mapped by one owner cannot be registered by another. "" is one owner too.

  explicit SharedMemoryRegistry(Options options);
  // Unregisters every region; leases still alive keep their mappings until they go.
  ~SharedMemoryRegistry();
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  // Maps bytes [offset, offset + byte_size) of the object `key` under `name`.
  // FAILED_PRECONDITION when disabled; INVALID_ARGUMENT for an empty name or byte_size 0 or
  // a range past the object's end; ALREADY_EXISTS for a name in use; PERMISSION_DENIED for
  // a key without the prefix, with a '/' after the leading one, or not a regular object of
  // this process's uid (symlinks are not followed); NOT_FOUND when no object has the key;
  // RESOURCE_EXHAUSTED over max_regions or max_bytes.
  absl::Status Register(absl::string_view name, absl::string_view key, uint64_t offset,
                        uint64_t byte_size, absl::string_view owner = "");

  // Forgets `name` ("" = every region); unknown names are not an error. The mapping goes
  // when its last lease does. FAILED_PRECONDITION when disabled.
  absl::Status Unregister(absl::string_view name, absl::string_view owner = "");

  // `name`'s status, or every region's ("") sorted by name. NOT_FOUND for an unknown name.
  absl::StatusOr<std::vector<ShmRegionStatus>> Status(absl::string_view name,
                                                      absl::string_view owner = "") const;

  // A lease on the slice `ref`; `field` names it in messages (e.g. "input.shm").
  // NOT_FOUND for an unknown region; INVALID_ARGUMENT when the slice does not lie inside
  // the region (overflow-safe; byte_size 0 is an empty slice, valid for offset <= the
  // region's size); FAILED_PRECONDITION when disabled or the region was truncated (it
  // must be unregistered and registered again).
  absl::StatusOr<ShmLease> Lookup(const ShmRef& ref, absl::string_view field = "shm",
                                  absl::string_view owner = "") const;

  // Unregisters every region registered before `seen_at` by a non-empty owner not in `live`
  // (the clients connected at `seen_at`): their connections are gone.
  void ReleaseOwnersExcept(const std::set<std::string>& live,
                           std::chrono::steady_clock::time_point seen_at);

  bool enabled() const { return options_.enabled; }
  // Gauges: registered regions, and bytes mapped (including unregistered regions whose
  // leases have not gone yet).
  int64_t regions() const;
  uint64_t mapped_bytes() const;

 private:
  absl::Status CheckKey(absl::string_view key) const;
  // REQUIRES: mutex_ not held. Tells options_.on_change.
  void Changed() const;
  // REQUIRES: mutex_ held.
  absl::Status CheckRoom(uint64_t byte_size, const std::string& owner) const;

  const Options options_;
  // Bytes mapped; shared with the regions, which may outlive the registry.
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
  mutable std::mutex mutex_;
  struct Entry {
    std::shared_ptr<MappedRegion> region;
    std::string key;  // as registered, without a leading '/'
    std::chrono::steady_clock::time_point registered;
  };
  using OwnedName = std::pair<std::string, std::string>;  // (owner, name)
  std::map<OwnedName, Entry> regions_;
};

}  // namespace posenc
