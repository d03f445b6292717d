// SharedMemoryRegistry and the SIGBUS fault guard against real POSIX shm objects in
// /dev/shm: every refusal with its code (and no key in its message), bounds, deferred
// unmapping, leaks over many cycles, and a client truncating an object under a lease.
#include "server/shm/shared_memory_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shm/fault_guard.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

// AddressSanitizer installs its own SIGBUS handler (the guard chains to it) and grows its
// own heap mappings as it goes.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

std::string UniqueKey(absl::string_view prefix = "posenc_") {
  static int counter = 0;
  return absl::StrCat("/", prefix, "regtest_", getpid(), "_", counter++);
}

// A shm object the test owns (as a client would): created, sized, unlinked at the end.
class TestObject {
 public:
  explicit TestObject(uint64_t size, std::string key = UniqueKey()) : key_(std::move(key)) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
  }
  ~TestObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  std::string path() const { return "/dev/shm" + key_; }
  int fd() const { return fd_; }

 private:
  std::string key_;
  int fd_ = -1;
};

SharedMemoryRegistry::Options On() {
  SharedMemoryRegistry::Options options;
  options.enabled = true;
  return options;
}

// The code, and a message that does not leak the key (with or without its '/').
void ExpectRefused(const absl::Status& status, absl::StatusCode code, const std::string& key) {
  EXPECT_EQ(status.code(), code) << status;
  const std::string bare = key.substr(
      key.find_first_not_of('/') == std::string::npos ? key.size() : key.find_first_not_of('/'));
  if (!bare.empty()) {
    EXPECT_EQ(std::string(status.message()).find(bare), std::string::npos) << status;
  }
}

// Lines of /proc/self/maps, all or only those of /dev/shm objects.
int CountMapsLines(bool shm_only) {
  std::ifstream maps("/proc/self/maps");
  int lines = 0;
  for (std::string line; std::getline(maps, line);) {
    lines += !shm_only || line.find("/dev/shm/") != std::string::npos;
  }
  return lines;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  int count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

// The pathname of the /proc/self/maps line whose range holds `address` ("" if none).
std::string MappingOf(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (sscanf(line.c_str(), "%lx-%lx", &begin, &end) != 2) continue;
    if (target < begin || target >= end) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "[anonymous]" : line.substr(slash);
  }
  return "";
}

TEST(ShmRegistryTest, OffAnswersFailedPreconditionNamingTheFlag) {
  SharedMemoryRegistry registry(SharedMemoryRegistry::Options{});
  TestObject object(kPage);
  for (const absl::Status& status :
       {registry.Register("r", object.key(), 0, kPage), registry.Unregister(""),
        registry.Status("").status(), registry.Lookup({"r", 0, 1}).status()}) {
    ExpectRefused(status, absl::StatusCode::kFailedPrecondition, object.key());
    EXPECT_NE(std::string(status.message()).find("--shm"), std::string::npos) << status;
  }
}

TEST(ShmRegistryTest, LeaseWritesReachTheObjectAtTheRegisteredOffset) {
  SharedMemoryRegistry registry(On());
  TestObject object(4 * kPage);
  const uint64_t offset = kPage + 100;  // not page-aligned on purpose
  ASSERT_THAT(registry.Register("in0", object.key(), offset, 2 * kPage), IsOk());
  EXPECT_EQ(registry.regions(), 1);
  EXPECT_EQ(registry.mapped_bytes(), 2 * kPage);

  auto lease = registry.Lookup({"in0", 8, 16}, "input.shm");
  ASSERT_THAT(lease, IsOk());
  ASSERT_EQ(lease->size(), 16u);
  for (int i = 0; i < 16; ++i) lease->data()[i] = static_cast<uint8_t>(0xA0 + i);

  std::vector<uint8_t> seen(16);
  ASSERT_EQ(pread(object.fd(), seen.data(), 16, static_cast<off_t>(offset + 8)), 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(seen[i], 0xA0 + i) << i;
  EXPECT_THAT(lease->CheckIntact(), IsOk());
  EXPECT_EQ(lease->region_name(), "in0");

  auto status = registry.Status("in0");
  ASSERT_THAT(status, IsOk());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].name, "in0");
  EXPECT_EQ((*status)[0].offset, offset);
  EXPECT_EQ((*status)[0].byte_size, 2 * kPage);
  EXPECT_EQ((*status)[0].in_use, 1);
}

TEST(ShmRegistryTest, KeyWithoutLeadingSlashIsAccepted) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  EXPECT_THAT(registry.Register("r", object.key().substr(1), 0, kPage), IsOk());
}

TEST(ShmRegistryTest, DuplicateNameIsAlreadyExists) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  ASSERT_THAT(registry.Register("dup", object.key(), 0, kPage), IsOk());
  const absl::Status status = registry.Register("dup", object.key(), 0, kPage);
  ExpectRefused(status, absl::StatusCode::kAlreadyExists, object.key());
  EXPECT_NE(std::string(status.message()).find("'dup'"), std::string::npos) << status;
  EXPECT_EQ(registry.regions(), 1);
}

TEST(ShmRegistryTest, KeysOutsideTheRulesArePermissionDenied) {
  SharedMemoryRegistry registry(On());
  TestObject foreign(kPage, UniqueKey("other_"));  // exists: refused for its name alone
  TestObject ours(kPage);
  const std::string nested = ours.key() + "/x";
  const std::string with_nul = ours.key() + std::string(1, '\0') + "x";
  const std::vector<std::string> keys = {foreign.key(), "/" + ours.key(), nested, with_nul, "/", "",
                                         "/posenc"};
  for (const std::string& key : keys) {
    ExpectRefused(registry.Register("r", key, 0, kPage), absl::StatusCode::kPermissionDenied, key);
  }
  EXPECT_EQ(registry.regions(), 0);
}

TEST(ShmRegistryTest, CustomPrefixIsEnforced) {
  SharedMemoryRegistry::Options options = On();
  options.key_prefix = "app_";
  SharedMemoryRegistry registry(options);
  TestObject posenc_object(kPage);
  TestObject app_object(kPage, UniqueKey("app_"));
  ExpectRefused(registry.Register("a", posenc_object.key(), 0, kPage),
                absl::StatusCode::kPermissionDenied, posenc_object.key());
  EXPECT_THAT(registry.Register("b", app_object.key(), 0, kPage), IsOk());
}

TEST(ShmRegistryTest, MissingObjectIsNotFound) {
  SharedMemoryRegistry registry(On());
  const std::string key = UniqueKey();
  ExpectRefused(registry.Register("r", key, 0, kPage), absl::StatusCode::kNotFound, key);
}

TEST(ShmRegistryTest, SymlinkKeyIsRefused) {
  SharedMemoryRegistry registry(On());
  TestObject target(kPage);
  const std::string link_key = UniqueKey();
  ASSERT_EQ(symlink(target.path().c_str(), ("/dev/shm" + link_key).c_str()), 0)
      << std::strerror(errno);
  ExpectRefused(registry.Register("r", link_key, 0, kPage), absl::StatusCode::kPermissionDenied,
                link_key);
  unlink(("/dev/shm" + link_key).c_str());
  EXPECT_EQ(registry.regions(), 0);
}

TEST(ShmRegistryTest, DirectoryAndFifoAreRefused) {
  SharedMemoryRegistry registry(On());
  const std::string dir_key = UniqueKey();
  const std::string fifo_key = UniqueKey();
  ASSERT_EQ(mkdir(("/dev/shm" + dir_key).c_str(), 0700), 0);
  ASSERT_EQ(mkfifo(("/dev/shm" + fifo_key).c_str(), 0600), 0);
  ExpectRefused(registry.Register("d", dir_key, 0, kPage), absl::StatusCode::kPermissionDenied,
                dir_key);
  ExpectRefused(registry.Register("f", fifo_key, 0, kPage), absl::StatusCode::kPermissionDenied,
                fifo_key);
  rmdir(("/dev/shm" + dir_key).c_str());
  unlink(("/dev/shm" + fifo_key).c_str());
}

TEST(ShmRegistryTest, ObjectOfAnotherUidIsRefused) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  const uid_t nobody = 65534;
  if (fchown(object.fd(), nobody, nobody) != 0) {
    GTEST_SKIP() << "cannot chown a shm object to uid 65534 (" << std::strerror(errno)
                 << "); the test needs root";
  }
  ExpectRefused(registry.Register("r", object.key(), 0, kPage), absl::StatusCode::kPermissionDenied,
                object.key());
}

TEST(ShmRegistryTest, RegisteredRangeMustLieInsideTheObject) {
  SharedMemoryRegistry registry(On());
  TestObject object(2 * kPage);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Case {
    uint64_t offset, byte_size;
  };
  for (const Case& c :
       {Case{2 * kPage + 1, 1}, Case{kPage, kPage + 1}, Case{0, 2 * kPage + 1}, Case{max - 31, 64},
        Case{max - 31, 1}, Case{1, max}, Case{uint64_t{1} << 63, 16}}) {
    ExpectRefused(registry.Register("r", object.key(), c.offset, c.byte_size),
                  absl::StatusCode::kInvalidArgument, object.key());
  }
  ExpectRefused(registry.Register("r", object.key(), 0, 0), absl::StatusCode::kInvalidArgument,
                object.key());
  ExpectRefused(registry.Register("", object.key(), 0, kPage), absl::StatusCode::kInvalidArgument,
                object.key());
  EXPECT_EQ(registry.regions(), 0);
  EXPECT_EQ(registry.mapped_bytes(), 0u);
  EXPECT_THAT(registry.Register("whole", object.key(), 0, 2 * kPage), IsOk());
  EXPECT_THAT(registry.Register("last", object.key(), 2 * kPage - 1, 1), IsOk());
}

TEST(ShmRegistryTest, RegionAndByteLimitsAreResourceExhausted) {
  SharedMemoryRegistry::Options options = On();
  options.max_regions = 2;
  options.max_bytes = 3 * kPage;
  SharedMemoryRegistry registry(options);
  TestObject object(4 * kPage);
  ASSERT_THAT(registry.Register("a", object.key(), 0, 2 * kPage), IsOk());
  ExpectRefused(registry.Register("b", object.key(), 0, 2 * kPage),
                absl::StatusCode::kResourceExhausted, object.key());
  ASSERT_THAT(registry.Register("b", object.key(), 0, kPage), IsOk());
  ExpectRefused(registry.Register("c", object.key(), 0, 1), absl::StatusCode::kResourceExhausted,
                object.key());
  ASSERT_THAT(registry.Unregister("a"), IsOk());
  EXPECT_THAT(registry.Register("c", object.key(), 0, 2 * kPage), IsOk());
  EXPECT_EQ(registry.mapped_bytes(), 3 * kPage);
}

TEST(ShmRegistryTest, LookupBoundsAreOverflowSafe) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  ASSERT_THAT(registry.Register("r", object.key(), 0, kPage), IsOk());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Case {
    uint64_t offset, byte_size;
  };
  for (const Case& c : {Case{kPage + 1, 0}, Case{kPage, 1}, Case{kPage - 1, 2}, Case{0, kPage + 1},
                        Case{max - 31, 64}, Case{max - 31, 0}, Case{32, max - 31}, Case{1, max}}) {
    auto lease = registry.Lookup({"r", c.offset, c.byte_size}, "input.shm");
    ASSERT_THAT(lease, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input.shm")))
        << c.offset << " " << c.byte_size;
    ExpectRefused(lease.status(), absl::StatusCode::kInvalidArgument, object.key());
  }
  // byte_size 0 is an empty slice, valid up to the end; the whole region is valid.
  for (const Case& c : {Case{kPage, 0}, Case{0, 0}, Case{0, kPage}, Case{kPage - 1, 1}}) {
    auto lease = registry.Lookup({"r", c.offset, c.byte_size});
    ASSERT_THAT(lease, IsOk());
    EXPECT_EQ(lease->size(), c.byte_size);
  }
  ExpectRefused(registry.Lookup({"nope", 0, 1}).status(), absl::StatusCode::kNotFound,
                object.key());
  ExpectRefused(registry.Lookup({"", 0, 1}).status(), absl::StatusCode::kInvalidArgument,
                object.key());
  EXPECT_THAT(registry.Status("nope"), StatusIs(absl::StatusCode::kNotFound,
                                                "shared memory region 'nope' is not registered"));
}

TEST(ShmRegistryTest, InUseCountsLiveLeases) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  ASSERT_THAT(registry.Register("r", object.key(), 0, kPage), IsOk());
  auto in_use = [&] { return (*registry.Status("r"))[0].in_use; };
  {
    auto a = registry.Lookup({"r", 0, 8});
    auto b = registry.Lookup({"r", 8, 8});
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(b, IsOk());
    EXPECT_EQ(in_use(), 2);
    ShmLease moved = std::move(*a);
    EXPECT_EQ(in_use(), 2);
    moved = std::move(*b);  // drops a's hold
    EXPECT_EQ(in_use(), 1);
  }
  EXPECT_EQ(in_use(), 0);
}

TEST(ShmRegistryTest, UnregisterWhileLeasedDefersTheUnmap) {
  SharedMemoryRegistry registry(On());
  TestObject object(2 * kPage);
  ASSERT_THAT(registry.Register("r", object.key(), 0, 2 * kPage), IsOk());
  auto lease = registry.Lookup({"r", kPage, kPage});
  ASSERT_THAT(lease, IsOk());
  const uint8_t* address = lease->data();
  ASSERT_NE(MappingOf(address).find(object.key()), std::string::npos) << MappingOf(address);

  ASSERT_THAT(registry.Unregister("r"), IsOk());
  EXPECT_EQ(registry.regions(), 0);
  EXPECT_TRUE(registry.Status("")->empty());
  EXPECT_THAT(registry.Lookup({"r", 0, 1}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("region 'r' is not registered")));
  EXPECT_EQ(registry.mapped_bytes(), 2 * kPage);  // still mapped
  EXPECT_NE(MappingOf(address).find(object.key()), std::string::npos) << MappingOf(address);
  lease->data()[0] = 42;  // still valid
  uint8_t seen = 0;
  ASSERT_EQ(pread(object.fd(), &seen, 1, static_cast<off_t>(kPage)), 1);
  EXPECT_EQ(seen, 42);
  // The name is free again while the old mapping lives on.
  ASSERT_THAT(registry.Register("r", object.key(), 0, kPage), IsOk());
  EXPECT_EQ(registry.mapped_bytes(), 3 * kPage);

  *lease = std::move(*registry.Lookup({"r", 0, 1}));  // drops the old region's last lease
  EXPECT_EQ(MappingOf(address).find(object.key()), std::string::npos) << MappingOf(address);
  EXPECT_EQ(registry.mapped_bytes(), kPage);
}

TEST(ShmRegistryTest, UnregisterEmptyNameDropsAllAndUnknownIsFine) {
  SharedMemoryRegistry registry(On());
  TestObject object(kPage);
  ASSERT_THAT(registry.Register("a", object.key(), 0, kPage), IsOk());
  ASSERT_THAT(registry.Register("b", object.key(), 0, kPage), IsOk());
  EXPECT_THAT(registry.Unregister("unknown"), IsOk());
  EXPECT_EQ(registry.regions(), 2);
  auto all = registry.Status("");
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "a");
  EXPECT_EQ((*all)[1].name, "b");
  EXPECT_THAT(registry.Unregister(""), IsOk());
  EXPECT_EQ(registry.regions(), 0);
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

TEST(ShmRegistryTest, TenThousandCyclesLeakNoMappingOrFd) {
  SharedMemoryRegistry registry(On());
  TestObject object(64 * 1024);
  ASSERT_THAT(registry.Register("warm", object.key(), 0, 4096), IsOk());  // installs the guard
  ASSERT_THAT(registry.Unregister("warm"), IsOk());
  const int maps_before = CountMapsLines(false);
  const int shm_maps_before = CountMapsLines(true);
  const int fds_before = CountOpenFds();
  for (int i = 0; i < 10000; ++i) {
    ASSERT_THAT(registry.Register("cycle", object.key(), 0, 64 * 1024), IsOk()) << i;
    auto lease = registry.Lookup({"cycle", 4096, 4096});
    ASSERT_THAT(lease, IsOk()) << i;
    lease->data()[0] = static_cast<uint8_t>(i);
    ASSERT_THAT(registry.Unregister(i % 2 ? "cycle" : ""), IsOk()) << i;
  }
  EXPECT_EQ(CountMapsLines(true), shm_maps_before);
  if (!kAsan) EXPECT_EQ(CountMapsLines(false), maps_before);
  EXPECT_EQ(CountOpenFds(), fds_before);
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

// The client shrinks the object to 0 while a lease is out: the process survives, reads
// see zeros, the lease reports DATA_LOSS, later lookups are refused until re-registered.
TEST(ShmRegistryTest, TruncationUnderALeaseIsDataLossNotACrash) {
  SharedMemoryRegistry registry(On());
  TestObject object(4 * kPage);
  ASSERT_THAT(registry.Register("t", object.key(), 0, 4 * kPage), IsOk());
  auto lease = registry.Lookup({"t", 0, 4 * kPage});
  ASSERT_THAT(lease, IsOk());
  std::memset(lease->data(), 7, lease->size());
  const uint64_t faults_before = fault_guard::FaultCount();

  ASSERT_EQ(ftruncate(object.fd(), 0), 0);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < lease->size(); ++i)
    sum += static_cast<volatile uint8_t*>(lease->data())[i];
  std::memset(lease->data(), 9, lease->size());  // writes land on private zero pages

  EXPECT_EQ(sum, 0u);
  EXPECT_EQ(fault_guard::FaultCount(), faults_before + 1);
  const absl::Status intact = lease->CheckIntact();
  ExpectRefused(intact, absl::StatusCode::kDataLoss, object.key());
  EXPECT_EQ(intact.message(), "shared memory region 't' was truncated while in use");
  ExpectRefused(registry.Lookup({"t", 0, 1}).status(), absl::StatusCode::kFailedPrecondition,
                object.key());
  EXPECT_THAT(registry.Register("t", object.key(), 0, kPage),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       "shared memory region 't' is already registered"));

  // Unregister, grow the object back, register again: a fresh, intact mapping.
  ASSERT_THAT(registry.Unregister("t"), IsOk());
  ASSERT_EQ(ftruncate(object.fd(), static_cast<off_t>(4 * kPage)), 0);
  ASSERT_THAT(registry.Register("t", object.key(), 0, 4 * kPage), IsOk());
  auto fresh = registry.Lookup({"t", 0, 4 * kPage});
  ASSERT_THAT(fresh, IsOk());
  fresh->data()[4 * kPage - 1] = 1;
  EXPECT_THAT(fresh->CheckIntact(), IsOk());
  EXPECT_THAT(lease->CheckIntact(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("truncated while in use")));  // the old one stays
}

TEST(ShmRegistryTest, TruncationWhileThreadsReadFailsEveryLease) {
  SharedMemoryRegistry registry(On());
  TestObject object(64 * kPage);
  ASSERT_THAT(registry.Register("t", object.key(), 0, 64 * kPage), IsOk());
  std::atomic<bool> truncated{false};
  std::atomic<int> leased{0};
  std::vector<std::thread> readers;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      auto lease = registry.Lookup({"t", 0, 64 * kPage});
      leased.fetch_add(1);
      if (!lease.ok()) {
        results[t] = lease.status();
        return;
      }
      // Keep touching every cache line until two passes after the truncation.
      for (int pass = 0; pass < 2; pass += truncated.load() ? 1 : 0) {
        for (uint64_t i = 0; i < lease->size(); i += 64) lease->data()[i] += 1;
      }
      results[t] = lease->CheckIntact();
    });
  }
  while (leased.load() < 4) std::this_thread::yield();
  ASSERT_EQ(ftruncate(object.fd(), static_cast<off_t>(kPage)), 0);  // shrink, not to 0
  truncated.store(true);
  for (std::thread& reader : readers) reader.join();
  for (const absl::Status& result : results) {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated while in use")))
        << result;
  }
}

// Faults the guard does not own keep their default action: death by SIGBUS.
TEST(ShmRegistryDeathTest, FaultOutsideRegionsStillKills) {
  SharedMemoryRegistry registry(On());
  TestObject registered(kPage);
  ASSERT_THAT(registry.Register("r", registered.key(), 0, kPage), IsOk());  // guard installed
  TestObject unguarded(kPage);
  auto* bytes = static_cast<volatile uint8_t*>(
      mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, unguarded.fd(), 0));
  ASSERT_NE(static_cast<void*>(const_cast<uint8_t*>(bytes)), MAP_FAILED);
  ASSERT_EQ(ftruncate(unguarded.fd(), 0), 0);
  // Under ASan the previous handler is ASan's: it reports the BUS and exits 1.
  auto died_of_sigbus = [](int status) {
    return kAsan ? WIFEXITED(status) && WEXITSTATUS(status) != 0
                 : WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
  };
  const char* report = kAsan ? "BUS" : "";
  EXPECT_EXIT(bytes[0] = 1, died_of_sigbus, report);
  EXPECT_EXIT(raise(SIGBUS), died_of_sigbus, report);
  munmap(const_cast<uint8_t*>(bytes), kPage);
}

}  // namespace
}  // namespace posenc
