// Where the test fixtures live: $POSENC_SOURCE_DIR/tests/fixtures (ctest sets it), else
// the folder beside this header. Header-only; no state.
#pragma once

#include <cstdlib>
#include <string>

namespace posenc::testing {

inline std::string FixturePath(const std::string& relative) {
  if (const char* root = std::getenv("POSENC_SOURCE_DIR")) {
    return std::string(root) + "/tests/fixtures/" + relative;
  }
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/fixtures/" + relative;
}

}  // namespace posenc::testing
