#include "server/kernels/rope_kernel.h"

#include <immintrin.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

namespace posenc {
namespace {

// Below this many tensor bytes a rotation runs on the calling thread.
constexpr size_t kParallelBytes = size_t{256} << 10;

// Rotates rotary_dim features of one head in place. A pair is (x[k*step], x[k*step+offset])
// with step 2, offset 1 for interleaved pairs and step 1, offset half for rotate-half:
// the single pair offset ggml's rotate_pairs uses.
using RotateHeadFn = void (*)(float* x, const float* cos, const float* sin, int64_t half);

inline void RotatePairsScalar(float* x, const float* cos, const float* sin, int64_t k0,
                              int64_t half, int64_t step, int64_t offset) {
  for (int64_t k = k0; k < half; ++k) {
    float* a = x + k * step;
    float* b = a + offset;
    const float xa = *a;
    const float xb = *b;
    *a = xa * cos[k] - xb * sin[k];
    *b = xb * cos[k] + xa * sin[k];
  }
}

void RotateHalfScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 1, half);
}

void InterleavedScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 2, 1);
}

__attribute__((target("avx2,fma"))) void RotateHalfAvx2(float* x, const float* cos,
                                                        const float* sin, int64_t half) {
  float* x2 = x + half;
  int64_t k = 0;
  for (; k + 8 <= half; k += 8) {
    const __m256 a = _mm256_loadu_ps(x + k);
    const __m256 b = _mm256_loadu_ps(x2 + k);
    const __m256 c = _mm256_loadu_ps(cos + k);
    const __m256 s = _mm256_loadu_ps(sin + k);
    _mm256_storeu_ps(x + k, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(x2 + k, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
  }
  RotatePairsScalar(x, cos, sin, k, half, 1, half);
}

__attribute__((target("avx2,fma"))) void InterleavedAvx2(float* x, const float* cos,
                                                         const float* sin, int64_t half) {
  int64_t k = 0;
  // 4 pairs = 8 floats per step: cos/sin duplicated onto both lanes of their pair; then
  // fmaddsub gives x_a*c - x_b*s on even lanes and x_b*c + x_a*s on odd ones.
  for (; k + 4 <= half; k += 4) {
    const __m256 v = _mm256_loadu_ps(x + 2 * k);
    const __m128 c4 = _mm_loadu_ps(cos + k);
    const __m128 s4 = _mm_loadu_ps(sin + k);
    const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
    const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
    const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x_b, x_a) in every pair
    _mm256_storeu_ps(x + 2 * k, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(swapped, s)));
  }
  RotatePairsScalar(x, cos, sin, k, half, 2, 1);
}

__attribute__((target("avx512f"))) void RotateHalfAvx512(float* x, const float* cos,
                                                         const float* sin, int64_t half) {
  float* x2 = x + half;
  int64_t k = 0;
  for (; k + 16 <= half; k += 16) {
    const __m512 a = _mm512_loadu_ps(x + k);
    const __m512 b = _mm512_loadu_ps(x2 + k);
    const __m512 c = _mm512_loadu_ps(cos + k);
    const __m512 s = _mm512_loadu_ps(sin + k);
    _mm512_storeu_ps(x + k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_storeu_ps(x2 + k, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
  // The remainder (< 16 pairs) under a mask rather than a scalar loop: head sizes such as
  // 64 or 80 leave 8 or 0.
  if (k < half) {
    const __mmask16 m = static_cast<__mmask16>((1u << (half - k)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + k);
    const __m512 b = _mm512_maskz_loadu_ps(m, x2 + k);
    const __m512 c = _mm512_maskz_loadu_ps(m, cos + k);
    const __m512 s = _mm512_maskz_loadu_ps(m, sin + k);
    _mm512_mask_storeu_ps(x + k, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_mask_storeu_ps(x2 + k, m, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
}

// Loads the first `count` (<= 8) floats of p and duplicates each onto a pair of lanes:
// [p0 p0 p1 p1 .. p7 p7]. (Masked load and permutex2var: the cast/permutexvar route draws
// GCC 12's false "may be used uninitialized" on the undefined upper half.)
__attribute__((target("avx512f"))) inline __m512 LoadDuplicated(const float* p, unsigned count) {
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  return _mm512_permutex2var_ps(v, dup, v);
}

__attribute__((target("avx512f"))) void InterleavedAvx512(float* x, const float* cos,
                                                          const float* sin, int64_t half) {
  int64_t k = 0;
  for (; k + 8 <= half; k += 8) {
    const __m512 v = _mm512_loadu_ps(x + 2 * k);
    const __m512 c = LoadDuplicated(cos + k, 8);
    const __m512 s = LoadDuplicated(sin + k, 8);
    const __m512 swapped = _mm512_shuffle_ps(v, v, 0xB1);  // (x_b, x_a) in every pair
    _mm512_storeu_ps(x + 2 * k, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
  }
  if (k < half) {  // fewer than 8 pairs left: the same under a mask
    const unsigned pairs = static_cast<unsigned>(half - k);
    const __mmask16 m = static_cast<__mmask16>((1u << (2 * pairs)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + 2 * k);
    const __m512 c = LoadDuplicated(cos + k, pairs);
    const __m512 s = LoadDuplicated(sin + k, pairs);
    const __m512 swapped = _mm512_shuffle_ps(v, v, 0xB1);
    _mm512_mask_storeu_ps(x + 2 * k, m, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
  }
}

struct RotateFns {
  RotateHeadFn rotate_half;
  RotateHeadFn interleaved;
};

RotateFns FnsFor(RopeIsa isa) {
  switch (isa) {
    case RopeIsa::kAvx512: return {RotateHalfAvx512, InterleavedAvx512};
    case RopeIsa::kAvx2: return {RotateHalfAvx2, InterleavedAvx2};
    case RopeIsa::kScalar: return {RotateHalfScalar, InterleavedScalar};
    case RopeIsa::kAuto: break;
  }
  return FnsFor(RopeBestIsa());
}

}  // namespace

bool RopeIsaSupported(RopeIsa isa) {
  switch (isa) {
    case RopeIsa::kAuto:
    case RopeIsa::kScalar: return true;
    case RopeIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case RopeIsa::kAvx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

RopeIsa RopeBestIsa() {
  static const RopeIsa best = [] {
    // POSENC_ROPE_ISA=scalar|avx2|avx512 pins the choice (benchmarks, CI comparisons); an
    // unsupported or unknown value falls through to the default.
    if (const char* pin = std::getenv("POSENC_ROPE_ISA"); pin != nullptr) {
      const std::string_view v(pin);
      if (v == "scalar") return RopeIsa::kScalar;
      if (v == "avx2" && RopeIsaSupported(RopeIsa::kAvx2)) return RopeIsa::kAvx2;
      if (v == "avx512" && RopeIsaSupported(RopeIsa::kAvx512)) return RopeIsa::kAvx512;
    }
    // AVX-512 only on Intel: on an AMD EPYC with AVX-512 the 512-bit path measured no
    // faster than AVX2 in cache and 1.7-2.5x slower on a 32 MiB tensor (rotate-half,
    // [2048, 32, 128] fp32), so AMD gets AVX2.
    if (RopeIsaSupported(RopeIsa::kAvx512) && __builtin_cpu_is("intel")) {
      return RopeIsa::kAvx512;
    }
    if (RopeIsaSupported(RopeIsa::kAvx2)) return RopeIsa::kAvx2;
    return RopeIsa::kScalar;
  }();
  return best;
}

void RopeRotateInPlace(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                       int rotary_dim, absl::Span<const float* const> token_rows, RopeIsa isa) {
  const RotateFns fns = FnsFor(isa);
  const RotateHeadFn rotate =
      pairing == RopePairing::kRotateHalf ? fns.rotate_half : fns.interleaved;
  const int64_t half = rotary_dim / 2;
  const size_t elem = DTypeSize(x.dtype);
  auto* bytes = static_cast<unsigned char*>(x.data);
  const bool wide = x.dtype == DType::kFloat32;
  const bool simd_convert = isa != RopeIsa::kScalar && simd::HasAvx2F16c();
  // Small tensors stay on the calling thread (a team wake-up costs more than it saves);
  // large ones split the tokens across the kernel threads.
  const int threads = x.NumBytes() < kParallelBytes ? 1 : KernelThreads();
  const int64_t tokens = g.batch * g.seq;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    // 16-bit heads are widened into this buffer, rotated, and narrowed back.
    std::vector<float> widened(wide ? 0 : rotary_dim);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {  // batch * seq
      const int64_t b = t / g.seq, s = t % g.seq;
      const float* row = token_rows[t];
      const float* cos = row;
      const float* sin = row + half;
      for (int64_t h = 0; h < g.heads; ++h) {  // head
        const int64_t offset = b * g.batch_stride + s * g.seq_stride + h * g.head_stride;
        void* head = bytes + static_cast<size_t>(offset) * elem;
        if (wide) {
          rotate(static_cast<float*>(head), cos, sin, half);
        } else if (simd_convert) {
          simd::Widen(x.dtype, static_cast<const uint16_t*>(head), widened.data(), rotary_dim);
          rotate(widened.data(), cos, sin, half);
          simd::Narrow(x.dtype, widened.data(), static_cast<uint16_t*>(head), rotary_dim);
        } else {
          ToFloat32(x.dtype, head, widened.data(), rotary_dim);
          rotate(widened.data(), cos, sin, half);
          FromFloat32(widened.data(), x.dtype, head, rotary_dim);
        }
      }
    }
  }
}

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

}  // namespace posenc
