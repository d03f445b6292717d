// The one flag parser (server/common/flags.h) that posenc-server and posenc-client share.
#include "server/common/flags.h"
#include "tests/support/status_matchers.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;

CommandFlags::Options ServerLike() {
  return {{"listen", "table", "threads", "shm", "shutdown_grace"}, {"shm"}, 0};
}

TEST(FlagsTest, BothFormsBareBooleansAndRepeats) {
  auto f = CommandFlags::Parse({"--listen", "a:1", "--table=x=1.npy", "--shm", "--table", "y=2.npy",
                                "--threads=3"},
                               ServerLike());
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->Str("listen"), "a:1");
  EXPECT_EQ(f->All("table"), (std::vector<std::string>{"x=1.npy", "y=2.npy"}));
  EXPECT_EQ(f->Str("table"), "y=2.npy");  // the last one
  EXPECT_EQ(f->Bool("shm").value_or(false), true);
  EXPECT_EQ(f->IntIn("threads", 0, 1024, 0).value_or(-1), 3);
  EXPECT_FALSE(f->Has("shutdown_grace"));
  EXPECT_EQ(f->Duration("shutdown_grace", absl::Seconds(8)).value_or(absl::ZeroDuration()),
            absl::Seconds(8));
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"stray"}, "unexpected argument 'stray'"},
           {{"--nope=1"}, "unknown flag --nope"},
           {{"--listen"}, "--listen needs a value"},
           // The server spells its flags with '_' and does not fold '-'.
           {{"--shutdown-grace=1s"}, "unknown flag --shutdown-grace"},
       }) {
    auto f = CommandFlags::Parse(c.args, ServerLike());
    EXPECT_THAT(f, StatusIs(absl::StatusCode::kInvalidArgument, c.message));
  }
  auto f =
      CommandFlags::Parse({"--threads=x", "--shm=maybe", "--shutdown_grace=soon"}, ServerLike());
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(f->IntIn("threads", 0, 1024, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--threads 'x' is not an integer in [0, 1024]"));
  EXPECT_THAT(f->Bool("shm"),
              StatusIs(absl::StatusCode::kInvalidArgument, "--shm 'maybe' is not true or false"));
  EXPECT_THAT(f->Duration("shutdown_grace", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--shutdown_grace 'soon' is not a duration (10s, 500ms, 5m)"));
}

TEST(FlagsTest, SeparatorFoldsDashesAndUnderscores) {
  CommandFlags::Options options{{"tls-ca", "shape", "timeout"}, {}, '-'};
  auto f = CommandFlags::Parse({"--tls_ca=ca.pem", "--shape", "2x16,64", "--timeout=0"}, options);
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->Str("tls-ca"), "ca.pem");
  EXPECT_EQ(f->IntList("shape").value_or(std::vector<int64_t>{}),
            (std::vector<int64_t>{2, 16, 64}));
  EXPECT_THAT(f->Duration("timeout", absl::Seconds(30), absl::ZeroDuration(), absl::Hours(24),
                          /*lo_exclusive=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--timeout '0' is not a duration in (0, 24h]"));
}

TEST(FlagsTest, EnvironmentFillsWhatTheCommandLineLeavesOut) {
  ASSERT_EQ(setenv("POSENC_TEST_THREADS", "x", 1), 0);
  ASSERT_EQ(setenv("POSENC_TEST_LISTEN", "env:1", 1), 0);
  ASSERT_EQ(setenv("POSENC_TEST_SHM", "true", 1), 0);
  ASSERT_EQ(setenv("POSENC_TEST_TABLE", "", 1), 0);
  auto f = CommandFlags::Parse({"--listen=cli:2"}, ServerLike(), "POSENC_TEST_");
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->Str("listen"), "cli:2");  // the command line wins
  EXPECT_EQ(f->Bool("shm").value_or(false), true);
  EXPECT_TRUE(f->Has("table"));  // set, empty
  EXPECT_EQ(f->Str("table", "fallback"), "");
  EXPECT_FALSE(f->Has("shutdown_grace"));
  EXPECT_THAT(f->IntIn("threads", 0, 1024, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "POSENC_TEST_THREADS (--threads) 'x' is not an integer in [0, 1024]"));
  // Without a prefix the environment is not read.
  auto plain = CommandFlags::Parse({}, ServerLike());
  ASSERT_THAT(plain, IsOk());
  EXPECT_FALSE(plain->Has("threads"));
  EXPECT_EQ(CommandFlags::EnvName("POSENC_", "max_inflight_bytes"), "POSENC_MAX_INFLIGHT_BYTES");
  EXPECT_EQ(CommandFlags::EnvName("POSENC_", "tls-ca"), "POSENC_TLS_CA");
  for (const char* name :
       {"POSENC_TEST_THREADS", "POSENC_TEST_LISTEN", "POSENC_TEST_SHM", "POSENC_TEST_TABLE"}) {
    unsetenv(name);
  }
}

TEST(FlagsTest, DurationText) {
  EXPECT_EQ(ParseDurationText("10"), absl::Seconds(10));
  EXPECT_EQ(ParseDurationText("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(ParseDurationText("5m"), absl::Minutes(5));
  EXPECT_EQ(ParseDurationText("soon"), std::nullopt);
}

}  // namespace
}  // namespace posenc
