#include "server/tables/sinusoidal_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace posenc {

absl::Status ValidateSinusoidal(const SinusoidalSpec& spec, absl::string_view field) {
  if (!(spec.base > 0.0) || !std::isfinite(spec.base)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".base is ", spec.base, "; it must be a finite number > 0"));
  }
  if (spec.base < kMinSinusoidalBase) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".base is ", spec.base, "; it must be >= ", kMinSinusoidalBase,
                     " (a smaller base makes the frequencies overflow)"));
  }
  if (spec.dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " encoding width is ", spec.dim, "; it must be >= 1"));
  }
  return absl::OkStatus();
}

SinusoidalEncoder::SinusoidalEncoder(const SinusoidalSpec& spec) : dim_(spec.dim) {
  const int64_t d = spec.dim;
  const bool fairseq =
      spec.layout == SinusoidalLayout::kConcatenated && spec.timescale == Timescale::kHalfMinusOne;
  // fairseq drops the odd column's sin; every other variant gives it ceil(d/2) sins.
  const int64_t num_sin = fairseq ? d / 2 : (d + 1) / 2;
  const int64_t num_cos = d / 2;
  const double log_base = std::log(spec.base);
  const double denom = static_cast<double>(std::max<int64_t>(d / 2 - 1, 1));
  inv_freq_.resize(num_sin);
  sin_col_.resize(num_sin);
  cos_col_.assign(num_sin, -1);
  for (int64_t i = 0; i < num_sin; ++i) {
    const double exponent = spec.timescale == Timescale::kPerDim
                                ? 2.0 * static_cast<double>(i) / static_cast<double>(d)
                                : static_cast<double>(i) / denom;
    inv_freq_[i] = std::exp(-exponent * log_base);
    if (spec.layout == SinusoidalLayout::kInterleaved) {
      sin_col_[i] = 2 * i;
      if (i < num_cos) cos_col_[i] = 2 * i + 1;
    } else {
      sin_col_[i] = i;
      if (i < num_cos) cos_col_[i] = num_sin + i;
    }
  }
}

void SinusoidalEncoder::RowF64(double position, double* out) const {
  std::fill(out, out + dim_, 0.0);  // fairseq's odd column stays zero
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = position * inv_freq_[i];
    out[sin_col_[i]] = std::sin(angle);
    if (cos_col_[i] >= 0) out[cos_col_[i]] = std::cos(angle);
  }
}

void SinusoidalEncoder::Row(double position, float* out) const {
  std::fill(out, out + dim_, 0.0f);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = position * inv_freq_[i];
    out[sin_col_[i]] = static_cast<float>(std::sin(angle));
    if (cos_col_[i] >= 0) out[cos_col_[i]] = static_cast<float>(std::cos(angle));
  }
}

Table ComputeSinusoidalTable(const SinusoidalSpec& spec, int64_t first, int64_t n) {
  SinusoidalEncoder encoder(spec);
  Table table;
  table.rows = n;
  table.cols = spec.dim;
  table.data.resize(static_cast<size_t>(n * spec.dim));
  for (int64_t r = 0; r < n; ++r) {
    encoder.Row(static_cast<double>(first + r), table.data.data() + r * spec.dim);
  }
  return table;
}

Table ComputeSinusoidalTable(const SinusoidalSpec& spec, const TablePositions& positions,
                             int64_t first_row, int64_t n) {
  SinusoidalEncoder encoder(spec);
  Table table;
  table.rows = n;
  table.cols = spec.dim;
  table.data.resize(static_cast<size_t>(n * spec.dim));
  for (int64_t r = 0; r < n; ++r) {
    encoder.Row(static_cast<double>(positions.At(first_row + r)), table.data.data() + r * spec.dim);
  }
  return table;
}

std::string SinusoidalTableKey(const SinusoidalSpec& spec, int64_t rows) {
  // Built on every Encode: the prefix, then every field's bytes at a fixed width (the base by
  // its bit pattern, so that 10000 and 10000.0000001 never share a table), under a third of
  // the instructions of formatting them as text (about 280 against 920).
  constexpr absl::string_view kPrefix = "sinusoidal|";
  const int32_t layout = static_cast<int32_t>(spec.layout);
  const int32_t timescale = static_cast<int32_t>(spec.timescale);
  const std::pair<const void*, size_t> fields[] = {{&spec.base, sizeof(spec.base)},
                                                   {&layout, sizeof(layout)},
                                                   {&timescale, sizeof(timescale)},
                                                   {&spec.dim, sizeof(spec.dim)},
                                                   {&rows, sizeof(rows)}};
  size_t bytes = kPrefix.size();
  for (const auto& field : fields) bytes += field.second;
  std::string key(bytes, '\0');
  char* out = key.data();
  std::memcpy(out, kPrefix.data(), kPrefix.size());
  out += kPrefix.size();
  for (const auto& [field, size] : fields) {
    std::memcpy(out, field, size);
    out += size;
  }
  return key;
}

}  // namespace posenc
