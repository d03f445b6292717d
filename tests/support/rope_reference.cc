#include "tests/support/rope_reference.h"

namespace posenc::testing {

void RopeRotateReference(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                         int rotary_dim, absl::Span<const float* const> token_rows) {
  const int64_t half = rotary_dim / 2;
  auto load = [&](int64_t i) -> float {
    switch (x.dtype) {
      case DType::kFloat16: return HalfToFloat(x.As<uint16_t>()[i]);
      case DType::kBFloat16: return BFloat16ToFloat(x.As<uint16_t>()[i]);
      default: return x.As<float>()[i];
    }
  };
  auto store = [&](int64_t i, float v) {
    switch (x.dtype) {
      case DType::kFloat16: x.As<uint16_t>()[i] = FloatToHalf(v); break;
      case DType::kBFloat16: x.As<uint16_t>()[i] = FloatToBFloat16(v); break;
      default: x.As<float>()[i] = v; break;
    }
  };
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < g.seq; ++s) {
      const float* row = token_rows[b * g.seq + s];
      for (int64_t h = 0; h < g.heads; ++h) {
        const int64_t start = b * g.batch_stride + s * g.seq_stride + h * g.head_stride;
        for (int64_t k = 0; k < half; ++k) {
          const int64_t ia = start + (pairing == RopePairing::kRotateHalf ? k : 2 * k);
          const int64_t ib = start + (pairing == RopePairing::kRotateHalf ? k + half : 2 * k + 1);
          const float xa = load(ia);
          const float xb = load(ib);
          store(ia, xa * row[k] - xb * row[half + k]);
          store(ib, xb * row[k] + xa * row[half + k]);
        }
      }
    }
  }
}

}  // namespace posenc::testing
