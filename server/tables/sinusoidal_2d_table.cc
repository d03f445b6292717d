#include "server/tables/sinusoidal_2d_table.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/tables/sinusoidal_table.h"

namespace posenc {

absl::Status ValidateSinusoidal2D(const Sinusoidal2DSpec& spec, absl::string_view field) {
  for (auto [name, side] :
       {std::pair{"grid_height", spec.grid_height}, std::pair{"grid_width", spec.grid_width}}) {
    if (side < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", name, " is ", side, "; it must be >= 1"));
    }
    if (side > kMaxGridSide) {
      return absl::ResourceExhaustedError(
          absl::StrCat(field, ".", name, " is ", side, "; at most ", kMaxGridSide, " is served"));
    }
  }
  if (!(spec.base > 0.0) || !std::isfinite(spec.base) || spec.base < kMinSinusoidalBase) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".base is ", spec.base, "; it must be a finite number >= ", kMinSinusoidalBase));
  }
  if (spec.dim < 4 || spec.dim % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " encoding width (input.shape[-1], d_model) is ", spec.dim,
                     "; the 2D sin-cos encoding needs a positive multiple of 4"));
  }
  return absl::OkStatus();
}

Table ComputeSinusoidal2DTable(const Sinusoidal2DSpec& spec) {
  const int64_t d = spec.dim, quarter = d / 4, half = d / 2;
  const int64_t h = spec.grid_height, w = spec.grid_width;
  // w_k = 1 / base^(k / (d/4)), as MAE's get_1d_sincos_pos_embed_from_grid (omega).
  std::vector<double> omega(quarter);
  for (int64_t k = 0; k < quarter; ++k) {
    omega[k] = 1.0 / std::pow(spec.base, static_cast<double>(k) / static_cast<double>(quarter));
  }
  // E(p) for every column index and every row index, float64.
  auto encode = [&](int64_t n) {
    std::vector<double> e(static_cast<size_t>(n * half));
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t k = 0; k < quarter; ++k) {
        const double angle = static_cast<double>(p) * omega[k];
        e[p * half + k] = std::sin(angle);
        e[p * half + quarter + k] = std::cos(angle);
      }
    }
    return e;
  };
  const std::vector<double> by_column = encode(w), by_row = encode(h);
  Table table;
  table.rows = Sinusoidal2DRows(spec);
  table.cols = d;
  table.data.assign(static_cast<size_t>(table.rows * d), 0.0f);
  float* out = table.data.data() + (spec.cls_token ? d : 0);
  for (int64_t i = 0; i < h; ++i) {    // patch row
    for (int64_t j = 0; j < w; ++j) {  // patch column
      float* row = out + (i * w + j) * d;
      for (int64_t c = 0; c < half; ++c) {
        row[c] = static_cast<float>(by_column[j * half + c]);
        row[half + c] = static_cast<float>(by_row[i * half + c]);
      }
    }
  }
  return table;
}

std::string Sinusoidal2DTableKey(const Sinusoidal2DSpec& spec) {
  return absl::StrFormat("sin2d/h=%d/w=%d/cls=%d/base=%.17g/d=%d", spec.grid_height,
                         spec.grid_width, spec.cls_token ? 1 : 0, spec.base, spec.dim);
}

}  // namespace posenc
