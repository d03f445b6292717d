// ViT / MAE 2D sin-cos encodings (MAE's get_2d_sincos_pos_embed) of a patch grid, computed in
// float64 and rounded once. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/tables/table_cache.h"

namespace posenc {

// Largest grid side served (a 2^16 x 2^16 grid is 4 G patches, past any input anyway).
inline constexpr int64_t kMaxGridSide = int64_t{1} << 16;

struct Sinusoidal2DSpec {
  int64_t grid_height = 0;  // patch rows H
  int64_t grid_width = 0;   // patch columns W
  bool cls_token = false;   // a zero row first
  double base = 10000.0;
  int64_t dim = 0;  // encoding width d, divisible by 4
};

// Rows of the table: H*W, plus one with cls_token. REQUIRES: sides within kMaxGridSide.
inline int64_t Sinusoidal2DRows(const Sinusoidal2DSpec& spec) {
  return spec.grid_height * spec.grid_width + (spec.cls_token ? 1 : 0);
}

// Errors name `field` (e.g. "sinusoidal_2d"): INVALID_ARGUMENT for a side < 1, a base that is
// not finite or below kMinSinusoidalBase, or a width that is not a positive multiple of 4;
// RESOURCE_EXHAUSTED for a side over kMaxGridSide. With it OK every row is finite.
absl::Status ValidateSinusoidal2D(const Sinusoidal2DSpec& spec, absl::string_view field);

// [Sinusoidal2DRows(spec), dim]: with cls_token row 0 is zeros; patch token t = i*W + j (row
// i, column j) gets [E(j), E(i)], E(p) = [sin(p*w_k) for k < d/4, cos(p*w_k) for k < d/4],
// w_k = base^(-k/(d/4)). REQUIRES: ValidateSinusoidal2D(spec).ok().
Table ComputeSinusoidal2DTable(const Sinusoidal2DSpec& spec);

// Cache key naming every parameter of the table.
std::string Sinusoidal2DTableKey(const Sinusoidal2DSpec& spec);

}  // namespace posenc
