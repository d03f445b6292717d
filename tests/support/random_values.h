// Reproducible random test inputs: the same seed gives the same values on every run and
// machine (std::mt19937 and uniform_real_distribution over float, as libstdc++ defines them).
// Header-only; no shared state.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace posenc::testing {

// `n` floats uniform in [lo, hi).
inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace posenc::testing
