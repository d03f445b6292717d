// Writes a matrix as a PNG heatmap (libpng): a diverging blue-white-red scale symmetric
// around zero, so signs read at a glance (sin/cos, eigenvectors, biases); -inf (a causal
// mask) is black and NaN magenta. Pure functions; thread-safe.
//
//   RETURN_IF_ERROR(WriteHeatmapPng("pe.png", {values, rows, cols, /*cell=*/2}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace posenc::client {

struct Heatmap {
  std::vector<float> values;  // [rows, cols], row-major
  int64_t rows = 0;
  int64_t cols = 0;
  int cell = 1;  // pixels per value, each way
};

// RGB of `v` on the scale [-limit, limit].
void HeatColor(float v, float limit, uint8_t rgb[3]);

// Several heatmaps of one height side by side with a gap (e.g. one per head).
Heatmap SideBySide(const std::vector<Heatmap>& parts, int gap_cells = 1);

// INVALID_ARGUMENT for an empty matrix or one past 16384 pixels a side; UNAVAILABLE when the
// file cannot be written.
absl::Status WriteHeatmapPng(const std::string& path, const Heatmap& map);

}  // namespace posenc::client
