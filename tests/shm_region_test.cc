// client::ShmRegion: creates, sizes, maps and unlinks a POSIX shm object; and what a client
// writes through it is what the server's SharedMemoryRegistry reads (and back).
#include "client/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shm/shared_memory_registry.h"
#include "tests/support/status_matchers.h"

namespace posenc::client {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

std::string UniqueKey() {
  static int counter = 0;
  return absl::StrCat("/posenc_regiontest_", getpid(), "_", counter++);
}

bool ObjectExists(const std::string& key) {
  struct stat st;
  return stat(("/dev/shm" + key).c_str(), &st) == 0;
}

TEST(ShmRegionTest, CreatesAPrivateObjectOfTheSizeAndUnlinksIt) {
  const std::string key = UniqueKey();
  {
    auto region = ShmRegion::Create(key, 10000);
    ASSERT_THAT(region, IsOk());
    EXPECT_EQ(region->byte_size(), 10000u);
    EXPECT_EQ(region->bytes().size(), 10000u);
    EXPECT_EQ(region->key(), key);
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm" + key).c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 10000);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    for (uint8_t byte : region->bytes()) ASSERT_EQ(byte, 0);

    // Another mapping of the same object sees the writes.
    region->bytes()[9999] = 0x5A;
    const int fd = shm_open(key.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0);
    uint8_t seen = 0;
    ASSERT_EQ(pread(fd, &seen, 1, 9999), 1);
    close(fd);
    EXPECT_EQ(seen, 0x5A);
  }
  EXPECT_FALSE(ObjectExists(key));
}

TEST(ShmRegionTest, RefusesAnExistingKeyBadKeysAndZeroSize) {
  const std::string key = UniqueKey();
  auto first = ShmRegion::Create(key, 64);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(ShmRegion::Create(key, 64),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("File exists")));
  EXPECT_EQ(first->bytes().size(), 64u);  // the failed create did not unlink it
  EXPECT_TRUE(ObjectExists(key));
  for (const std::string bad : {"", "/", "/posenc_a/b", "//posenc_a"}) {
    EXPECT_THAT(ShmRegion::Create(bad, 64),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("must be a name with at most a leading '/'")))
        << bad;
  }
  EXPECT_THAT(ShmRegion::Create(UniqueKey(), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "shared memory byte_size is 0"));
  const std::string huge = UniqueKey();
  EXPECT_THAT(ShmRegion::Create(huge, std::numeric_limits<uint64_t>::max()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("(18446744073709551615 bytes)")));
  EXPECT_FALSE(ObjectExists(huge));  // a failed create leaves nothing behind
}

TEST(ShmRegionTest, SlicesAreBoundsCheckedWithoutOverflow) {
  auto region = ShmRegion::Create(UniqueKey(), 4096);
  ASSERT_THAT(region, IsOk());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_THAT(region->Slice(4096, 1),
              StatusIs(absl::StatusCode::kOutOfRange,
                       "offset 4096 + byte_size 1 is past the end of the region (4096 bytes)"));
  EXPECT_THAT(region->Slice(max - 31, 64),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("offset 18446744073709551584 + byte_size 64 is past the end")));
  EXPECT_THAT(region->Slice(1, max),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("byte_size 18446744073709551615 is past the end")));
  auto tail = region->Slice(4000, 96);
  ASSERT_THAT(tail, IsOk());
  EXPECT_EQ(tail->data(), region->bytes().data() + 4000);
  EXPECT_EQ(tail->size(), 96u);

  auto floats = region->SliceAs<float>(64, 1000);
  ASSERT_THAT(floats, IsOk());
  EXPECT_EQ(reinterpret_cast<uint8_t*>(floats->data()), region->bytes().data() + 64);
  EXPECT_THAT(region->SliceAs<float>(2, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset 2 is not a multiple of 4"));
  EXPECT_THAT(region->SliceAs<float>(0, 1025),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("byte_size 4100 is past the end")));
  EXPECT_THAT(region->SliceAs<float>(0, max / 2),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("count")));
}

TEST(ShmRegionTest, MovesTransferOwnership) {
  const std::string key = UniqueKey();
  auto created = ShmRegion::Create(key, 128);
  ASSERT_THAT(created, IsOk());
  ShmRegion moved = std::move(*created);
  EXPECT_EQ(moved.byte_size(), 128u);
  { ShmRegion sink = std::move(moved); }
  EXPECT_FALSE(ObjectExists(key));
}

TEST(ShmRegionTest, RequestsDescribeTheRegion) {
  const std::string key = UniqueKey();
  auto region = ShmRegion::Create(key, 1000);
  ASSERT_THAT(region, IsOk());
  const v1::RegisterSharedMemoryRequest all = region->RegisterRequest("in0");
  EXPECT_EQ(all.name(), "in0");
  EXPECT_EQ(all.key(), key);
  EXPECT_EQ(all.offset(), 0u);
  EXPECT_EQ(all.byte_size(), 1000u);
  const v1::RegisterSharedMemoryRequest part = region->RegisterRequest("in1", 100, 200);
  EXPECT_EQ(part.offset(), 100u);
  EXPECT_EQ(part.byte_size(), 200u);
  EXPECT_EQ(region->RegisterRequest("in2", 100).byte_size(), 900u);
  const v1::SharedMemoryRef ref = ShmRegion::Ref("in0", 8, 16);
  EXPECT_EQ(ref.region(), "in0");
  EXPECT_EQ(ref.offset(), 8u);
  EXPECT_EQ(ref.byte_size(), 16u);
}

// The client's bytes are the server's bytes: no copy either way.
TEST(ShmRegionTest, RoundTripsThroughTheServerRegistry) {
  auto region = ShmRegion::Create(UniqueKey(), 3 * 4096);
  ASSERT_THAT(region, IsOk());
  SharedMemoryRegistry::Options options;
  options.enabled = true;
  SharedMemoryRegistry registry(options);
  const v1::RegisterSharedMemoryRequest request = region->RegisterRequest("io", 4096);
  ASSERT_THAT(registry.Register(request.name(), request.key(), request.offset(),
                                request.byte_size()),
              IsOk());

  auto input = region->SliceAs<float>(4096 + 64, 16);
  ASSERT_THAT(input, IsOk());
  for (int i = 0; i < 16; ++i) (*input)[i] = 0.5f * i;
  auto lease = registry.Lookup({"io", 64, 16 * sizeof(float)});
  ASSERT_THAT(lease, IsOk());
  auto* values = reinterpret_cast<float*>(lease->data());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(values[i], 0.5f * i);
    values[i] += 1.0f;  // "in place", as the server writes results
  }
  EXPECT_THAT(lease->CheckIntact(), IsOk());
  for (int i = 0; i < 16; ++i) EXPECT_EQ((*input)[i], 0.5f * i + 1.0f);
}

}  // namespace
}  // namespace posenc::client
