// gMock matchers for absl::Status and absl::StatusOr, so a test states the value or the
// error it expects instead of only `.ok()`:
//   EXPECT_THAT(ParseMix("small"), IsOkAndHolds(SizeIs(3)));
//   EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--k")));
// They take absl::Status, absl::StatusOr<T> and grpc::Status (whose codes map 1:1 onto
// absl's), so the integration tests state a call's outcome the same way:
//   EXPECT_THAT(Encode(*stub, req), StatusIs(absl::StatusCode::kNotFound, HasSubstr("table")));
// On failure they print the status. Header-only.
#pragma once

#include <gmock/gmock.h>

#include <ostream>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace posenc::testing {

inline absl::Status GetStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
// grpc::Status, found by its members so this header needs no gRPC include.
template <typename S, typename = decltype(std::declval<const S&>().error_code()),
          typename = decltype(std::declval<const S&>().error_message())>
absl::Status GetStatus(const S& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// OK.
MATCHER(IsOk, "is OK") {
  const absl::Status s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status " << s;
  return s.ok();
}

// OK and the value matches `m`.
MATCHER_P(IsOkAndHolds, m, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(m, *arg, result_listener);
}

// The code is `code` and the message matches `message` (a string or a matcher).
MATCHER_P2(StatusIs, code, message,
           "has code " + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message)) {
  const absl::Status s = GetStatus(arg);
  *result_listener << "status " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(s.message()), result_listener);
}

// Only the code.
MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status s = GetStatus(arg);
  *result_listener << "status " << s;
  return s.code() == code;
}

}  // namespace posenc::testing
