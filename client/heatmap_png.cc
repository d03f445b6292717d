#include "client/heatmap_png.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace posenc::client {

void HeatColor(float v, float limit, uint8_t rgb[3]) {
  if (std::isnan(v)) {
    rgb[0] = 255, rgb[1] = 0, rgb[2] = 255;
    return;
  }
  if (std::isinf(v) && v < 0) {
    rgb[0] = rgb[1] = rgb[2] = 0;
    return;
  }
  const float t = limit > 0 ? std::clamp(v / limit, -1.0f, 1.0f) : 0.0f;
  // White at zero, towards (33, 102, 172) blue below and (178, 24, 43) red above.
  const float a = std::fabs(t);
  const float to[3] = {t < 0 ? 33.0f : 178.0f, t < 0 ? 102.0f : 24.0f, t < 0 ? 172.0f : 43.0f};
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(std::lround(255 + (to[c] - 255) * a));
}

Heatmap SideBySide(const std::vector<Heatmap>& parts, int gap_cells) {
  Heatmap out;
  if (parts.empty()) return out;
  out.rows = parts[0].rows;
  out.cell = parts[0].cell;
  for (const Heatmap& p : parts) out.cols += p.cols;
  out.cols += gap_cells * static_cast<int64_t>(parts.size() - 1);
  out.values.assign(static_cast<size_t>(out.rows * out.cols), 0.0f);
  int64_t col = 0;
  for (const Heatmap& p : parts) {
    for (int64_t r = 0; r < std::min(out.rows, p.rows); ++r) {
      std::copy_n(&p.values[static_cast<size_t>(r * p.cols)], p.cols,
                  &out.values[static_cast<size_t>(r * out.cols + col)]);
    }
    col += p.cols + gap_cells;
  }
  return out;
}

absl::Status WriteHeatmapPng(const std::string& path, const Heatmap& map) {
  const int64_t width = map.cols * map.cell, height = map.rows * map.cell;
  if (map.rows < 1 || map.cols < 1 || map.cell < 1 || width > 16384 || height > 16384 ||
      static_cast<int64_t>(map.values.size()) != map.rows * map.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("a heatmap of ", map.rows, " x ", map.cols, " values at ", map.cell,
                     " px each cannot be drawn (1 to 16384 px a side)"));
  }
  float limit = 0;
  for (float v : map.values) {
    if (std::isfinite(v)) limit = std::max(limit, std::fabs(v));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info || setjmp(png_jmpbuf(png))) {  // libpng reports errors by longjmp
    png_destroy_write_struct(&png, &info);
    return absl::UnavailableError(absl::StrCat("libpng failed writing '", path, "'"));
  }
  png_init_io(png, file.get());
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  // Unfiltered rows: flat colour blocks compress well anyway, and readers stay simple.
  png_set_filter(png, 0, PNG_FILTER_NONE);
  png_write_info(png, info);
  std::vector<uint8_t> line(static_cast<size_t>(width) * 3);
  for (int64_t r = 0; r < map.rows; ++r) {
    for (int64_t c = 0; c < map.cols; ++c) {
      uint8_t rgb[3];
      HeatColor(map.values[static_cast<size_t>(r * map.cols + c)], limit, rgb);
      for (int k = 0; k < map.cell; ++k) std::copy_n(rgb, 3, &line[((c * map.cell) + k) * 3]);
    }
    for (int k = 0; k < map.cell; ++k) png_write_row(png, line.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return absl::OkStatus();
}

}  // namespace posenc::client
