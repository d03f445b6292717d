#include "server/tables/fourier_features.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace posenc {

absl::StatusOr<FourierEncoder> FourierEncoder::Create(absl::Span<const double> b, int64_t num_axes,
                                                      absl::string_view field) {
  if (num_axes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fourier.num_axes is ", num_axes, "; it must be >= 1"));
  }
  if (num_axes > kMaxFourierAxes) {
    return absl::ResourceExhaustedError(absl::StrCat("fourier.num_axes is ", num_axes, "; at most ",
                                                     kMaxFourierAxes, " are served"));
  }
  const auto n = static_cast<int64_t>(b.size());
  if (n == 0 || n % num_axes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", n,
                                                   " values; it must be F rows of num_axes (",
                                                   num_axes, ") frequencies, F >= 1"));
  }
  if (n / num_axes > kMaxFourierFeatures) {
    return absl::ResourceExhaustedError(absl::StrCat(field, " has ", n / num_axes,
                                                     " frequencies (F); at most ",
                                                     kMaxFourierFeatures, " are served"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::abs(b[i]) <= kMaxFourierFrequency)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] is ", b[i], "; it must be finite, within +-", kMaxFourierFrequency));
    }
  }
  return FourierEncoder(std::vector<double>(b.begin(), b.end()), n / num_axes, num_axes);
}

void FourierEncoder::Row(const double* v, float* out) const {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int64_t f = 0; f < features_; ++f) {
    double dot = 0.0;
    for (int64_t a = 0; a < axes_; ++a) dot += b_[f * axes_ + a] * v[a];
    const double angle = kTwoPi * dot;
    out[f] = static_cast<float>(std::cos(angle));
    out[features_ + f] = static_cast<float>(std::sin(angle));
  }
}

Table FourierEncoder::IntegerRows(int64_t rows) const {
  Table t;
  t.rows = rows;
  t.cols = dim();
  t.data.resize(static_cast<size_t>(rows * dim()));
  for (int64_t p = 0; p < rows; ++p) {
    const double v = static_cast<double>(p);
    Row(&v, t.data.data() + p * dim());
  }
  return t;
}

std::string FourierEncoder::IntegerRowsKey(int64_t rows) const {
  std::string key = absl::StrCat("fourier|rows=", rows, "|axes=", axes_, "|f=", features_, "|");
  const size_t head = key.size();
  key.resize(head + b_.size() * sizeof(double));
  std::memcpy(key.data() + head, b_.data(), b_.size() * sizeof(double));
  return key;
}

}  // namespace posenc
