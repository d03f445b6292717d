// The test fixtures (tests/fixtures): where they are and the one reader of their text
// format (one record per line, words split on whitespace, blank and '#' lines skipped).
// $POSENC_SOURCE_DIR/tests/fixtures when ctest sets it, else the folder beside tests/support.
// Header-only; no state.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace posenc::testing {

inline std::string FixturePath(const std::string& relative) {
  if (const char* root = std::getenv("POSENC_SOURCE_DIR")) {
    return std::string(root) + "/tests/fixtures/" + relative;
  }
  std::string here = __FILE__;             // .../tests/support/fixtures.h
  here = here.substr(0, here.rfind('/'));  // .../tests/support
  return here.substr(0, here.rfind('/')) + "/fixtures/" + relative;
}

// The data lines of a fixture, each as its words; empty when the file cannot be read (the
// caller asserts on the count it expects).
inline std::vector<std::vector<std::string>> ReadFixtureLines(const std::string& relative) {
  std::vector<std::vector<std::string>> lines;
  std::ifstream in(FixturePath(relative));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string>& out = lines.emplace_back();
    for (std::string w; words >> w;) out.push_back(w);
    if (out.empty()) lines.pop_back();
  }
  return lines;
}

}  // namespace posenc::testing
