#include "server/kernels/finite_kernel.h"

#include <immintrin.h>

#include <atomic>
#include <cstring>

#include "server/kernels/threads.h"

namespace posenc {
namespace {

// What a search looks for: kNonFinite, exponent bits all ones (inf or NaN); kNan, the
// magnitude bits above infinity's (NaN only).
enum class Find { kNonFinite, kNan };

// Every bit but the sign.
template <typename Bits>
constexpr Bits Magnitude() {
  return static_cast<Bits>(~(Bits{1} << (8 * sizeof(Bits) - 1)));
}

template <Find kFind, typename Bits>
bool Hit(Bits bits, Bits exponent) {
  if constexpr (kFind == Find::kNonFinite) return (bits & exponent) == exponent;
  return (bits & Magnitude<Bits>()) > exponent;
}

template <Find kFind, typename Bits>
int64_t FirstLoop(const unsigned char* data, int64_t begin, int64_t n, Bits exponent) {
  for (int64_t i = begin; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, data + i * sizeof(Bits), sizeof(Bits));  // need not be aligned
    if (Hit<kFind>(bits, exponent)) return i;
  }
  return -1;
}

// Lane-wide steps for 32-bit (float32) and 16-bit (float16, bfloat16) values.
template <typename Bits>
__attribute__((target("avx2"))) __m256i Set1(Bits v) {
  if constexpr (sizeof(Bits) == 4) return _mm256_set1_epi32(static_cast<int32_t>(v));
  return _mm256_set1_epi16(static_cast<int16_t>(v));
}
template <typename Bits>
__attribute__((target("avx2"))) __m256i Equal(__m256i a, __m256i b) {
  if constexpr (sizeof(Bits) == 4) return _mm256_cmpeq_epi32(a, b);
  return _mm256_cmpeq_epi16(a, b);
}
template <typename Bits>
__attribute__((target("avx2"))) __m256i Greater(__m256i a, __m256i b) {
  if constexpr (sizeof(Bits) == 4) return _mm256_cmpgt_epi32(a, b);
  return _mm256_cmpgt_epi16(a, b);
}

template <typename Bits>
__attribute__((target("avx2"))) __m256i Max(__m256i a, __m256i b) {  // unsigned lanes
  if constexpr (sizeof(Bits) == 4) return _mm256_max_epu32(a, b);
  return _mm256_max_epu16(a, b);
}

// The 32 bytes at `at`, and `mask`.
__attribute__((target("avx2"))) inline __m256i Masked(const unsigned char* at, __m256i mask) {
  return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)), mask);
}

// Whether a vector of masked values (v & exponent for kNonFinite, v & magnitude for kNan)
// holds a hit. The magnitudes (sign cleared) compare as signed integers.
template <Find kFind, typename Bits>
__attribute__((target("avx2"))) bool AnyHit(__m256i masked, __m256i exponent) {
  const __m256i hit =
      kFind == Find::kNonFinite ? Equal<Bits>(masked, exponent) : Greater<Bits>(masked, exponent);
  return !_mm256_testz_si256(hit, hit);
}

// 256 bytes a step: the lane-wise maximum of the masked values of eight vectors, tested
// once (a hit is the largest masked value there is: exponent bits all set, or a magnitude
// above infinity's). The block with a hit and the tail go 32 bytes a step, and the vector
// with a hit to the loop, which names the first element.
template <Find kFind, typename Bits>
__attribute__((target("avx2"))) int64_t FirstAvx2(const unsigned char* data, int64_t n,
                                                  Bits exponent_bits) {
  const __m256i exponent = Set1<Bits>(exponent_bits);
  const __m256i mask = Set1<Bits>(kFind == Find::kNonFinite ? exponent_bits : Magnitude<Bits>());
  constexpr int64_t kLanes = 32 / sizeof(Bits);
  constexpr int kVectors = 8;
  int64_t i = 0;
  for (; i + kVectors * kLanes <= n; i += kVectors * kLanes) {
    const unsigned char* block = data + i * sizeof(Bits);
    __m256i top = Masked(block, mask);
    for (int v = 1; v < kVectors; ++v) top = Max<Bits>(top, Masked(block + 32 * v, mask));
    if (AnyHit<kFind, Bits>(top, exponent)) break;
  }
  for (; i + kLanes <= n; i += kLanes) {
    if (AnyHit<kFind, Bits>(Masked(data + i * sizeof(Bits), mask), exponent)) break;
  }
  return FirstLoop<kFind, Bits>(data, i, n, exponent_bits);
}

template <Find kFind, typename Bits>
int64_t FirstOf(const unsigned char* data, int64_t n, Bits exponent, bool avx2) {
  return avx2 ? FirstAvx2<kFind, Bits>(data, n, exponent)
              : FirstLoop<kFind, Bits>(data, 0, n, exponent);
}

// One thread's part: the first hit in [0, n) at `data`, or -1.
template <Find kFind>
int64_t FirstIn(DType dtype, const unsigned char* data, int64_t n, bool avx2) {
  switch (dtype) {
    case DType::kFloat32: return FirstOf<kFind, uint32_t>(data, n, 0x7f800000u, avx2);
    case DType::kFloat16: return FirstOf<kFind, uint16_t>(data, n, 0x7c00u, avx2);
    case DType::kBFloat16: return FirstOf<kFind, uint16_t>(data, n, 0x7f80u, avx2);
    default: return -1;
  }
}

template <Find kFind>
int64_t First(DType dtype, const void* bytes, int64_t n, KernelImpl implementation) {
  const auto* data = static_cast<const unsigned char*>(bytes);
  const bool avx2 = IsaBoundFor(implementation) != KernelImpl::kScalar;
  if (!IsFloat(dtype) || n <= 0) return -1;
  // One core reads at a fraction of the memory bandwidth: large tensors go to the team.
  KernelThreadLease lease(WorkBytes(n));
  if (lease.threads() <= 1) return FirstIn<kFind>(dtype, data, n, avx2);
  const size_t size = DTypeSize(dtype);
  std::atomic<int64_t> first{n};
  ParallelFor(lease.threads(), n, [&](int64_t begin, int64_t end) {
    const int64_t at = FirstIn<kFind>(dtype, data + begin * size, end - begin, avx2);
    if (at < 0) return;
    int64_t seen = first.load();
    while (begin + at < seen && !first.compare_exchange_weak(seen, begin + at)) {
    }
  });
  return first.load() < n ? first.load() : -1;
}

}  // namespace

int64_t FirstNonFinite(DType dtype, const void* data, int64_t n, KernelImpl implementation) {
  return First<Find::kNonFinite>(dtype, data, n, implementation);
}

int64_t FirstNonFiniteHere(DType dtype, const void* data, int64_t n, KernelImpl implementation) {
  if (!IsFloat(dtype) || n <= 0) return -1;
  return FirstIn<Find::kNonFinite>(dtype, static_cast<const unsigned char*>(data), n,
                                   IsaBoundFor(implementation) != KernelImpl::kScalar);
}

int64_t FirstNan(DType dtype, const void* data, int64_t n, KernelImpl implementation) {
  return First<Find::kNan>(dtype, data, n, implementation);
}

}  // namespace posenc
