// gMock matchers for absl::Status and absl::StatusOr, so a test states the value or the
// error it expects instead of only `.ok()`:
//   EXPECT_THAT(ParseMix("small"), IsOkAndHolds(SizeIs(3)));
//   EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--k")));
// On failure they print the status. Header-only.
#pragma once

#include <gmock/gmock.h>

#include <ostream>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace posenc::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// OK.
MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
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
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(s.message()), result_listener);
}

// Only the code.
MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status " << s;
  return s.code() == code;
}

}  // namespace posenc::testing
