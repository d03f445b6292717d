#include "server/tensor/dtype.h"

namespace posenc {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "FLOAT32";
    case DType::kFloat16: return "FLOAT16";
    case DType::kBFloat16: return "BFLOAT16";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
    case DType::kFloat64: return "FLOAT64";
  }
  return "UNKNOWN";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {               // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... aligns to 2^-24 units
    const uint32_t rounded = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = rounded;
    if (rem > half || (rem == half && (rounded & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}

void ToFloat32(DType src_type, const void* src, float* dst, size_t n) {
  switch (src_type) {
    case DType::kFloat32:
      if (static_cast<const void*>(dst) != src) std::memcpy(dst, src, n * 4);
      return;
    case DType::kFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i]);
      return;
    }
    case DType::kBFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(s[i]);
      return;
    }
    case DType::kFloat64: {  // rounded once, to nearest
      const auto* s = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, s + i * sizeof(double), sizeof(double));  // need not be aligned
        dst[i] = static_cast<float>(v);
      }
      return;
    }
    default: return;
  }
}

void FromFloat32(const float* src, DType dst_type, void* dst, size_t n) {
  switch (dst_type) {
    case DType::kFloat32:
      if (static_cast<const void*>(src) != dst) std::memcpy(dst, src, n * 4);
      return;
    case DType::kFloat16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = FloatToHalf(src[i]);
      return;
    }
    case DType::kBFloat16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = FloatToBFloat16(src[i]);
      return;
    }
    default: return;
  }
}

}  // namespace posenc
