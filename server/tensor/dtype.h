// Element types and scalar conversions between float32 and the 16-bit float formats.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

namespace posenc {

// Mirrors posenc.v1.DType without depending on protobuf, plus kFloat64: a storage type of
// files (.npy and safetensors tables, client inputs) that never travels on posenc.v1.
enum class DType { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kFloat64 };

// Bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat64: return 8;
  }
  return 0;
}

// The float types of tensors on the wire (kFloat64 is not one).
constexpr bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

absl::string_view DTypeName(DType t);

// IEEE binary16 <-> float32, round to nearest even; NaN and infinity preserved.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// bfloat16 <-> float32, round to nearest even; NaN stays NaN.
inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Converts n elements of a float dtype to float32, and back.
void ToFloat32(DType src_type, const void* src, float* dst, size_t n);
void FromFloat32(const float* src, DType dst_type, void* dst, size_t n);

}  // namespace posenc
