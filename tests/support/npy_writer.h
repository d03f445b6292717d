// Writes float32 .npy files byte by byte for tests that start a server with --table: the
// format written here is independent of posenc's own reader. Not thread-safe per path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace posenc::testing {

// Writes [rows, cols] `values` to `dir`/`name` and returns the path.
std::string WriteNpyF32(const std::string& dir, const std::string& name, int64_t rows, int64_t cols,
                        const std::vector<float>& values);

}  // namespace posenc::testing
