#include "server/kernels/rope_kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/rope_isa.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"

// RoPE's dispatch: which ISA a call runs on, the per-token cos/sin tables, the split over
// tokens and threads; and the scalar float32 rotation. The vector kernels are in
// rope_avx2.cc and rope_avx512.cc (rope_isa.h).
namespace posenc {
namespace rope_internal {
namespace {

void RotateHalfScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 1, half);
}

void InterleavedScalar(float* x, const float* cos, const float* sin, int64_t half) {
  RotatePairsScalar(x, cos, sin, 0, half, 2, 1);
}

}  // namespace

RotateFns ScalarFns() { return {RotateHalfScalar, InterleavedScalar}; }

}  // namespace rope_internal

namespace {

using namespace rope_internal;  // NOLINT: this file is their dispatch

// The per-head float32 kernels of `isa` (kScalar, kAvx2 or kAvx512, one the CPU has); none
// for AVX2, whose every plan rotates whole tokens (PlanRotation).
RotateFns FnsFor(KernelImpl isa) {
  switch (isa) {
    case KernelImpl::kAvx512: return Avx512Fns();
    case KernelImpl::kAvx2: return {};
    default: return ScalarFns();
  }
}

// The fused 16-bit kernel for `isa` (resolved, one the CPU has), or none where the
// widen-rotate-narrow staging below serves (scalar).
Token16Kernel Token16KernelFor(KernelImpl isa, DType dtype, RopePairing pairing, int64_t half) {
  if (isa == KernelImpl::kAvx512) {
    if (const Token16Kernel k = Avx512Token16(dtype, pairing, half); k.fn != nullptr) return k;
  }
  if (isa == KernelImpl::kAvx2 || isa == KernelImpl::kAvx512) {
    return Avx2Token16(dtype, pairing, half);
  }
  return {};
}

// Lays out one token's cos/sin for the fused 16-bit kernels (see RotateToken16Fn) in
// c and s, each of at least PaddedTableSize floats.
int64_t PaddedTableSize(int64_t half) { return (2 * half + 15) / 16 * 16; }

void RopeTokenTables(RopePairing pairing, TableLayout layout, const float* cos, const float* sin,
                     int64_t half, float* c, float* s) {
  const int64_t padded = PaddedTableSize(half);
  if (layout == TableLayout::kEvenOdd && pairing == RopePairing::kRotateHalf) {
    // Only the AVX-512 parity kernels ask for this layout; half % 32 == 0 for them.
    SplitByParity32(cos, c, half);
    SplitByParity32(sin, s, half);
    return;
  }
  if (layout == TableLayout::kEvenOdd16 && pairing == RopePairing::kRotateHalf) {
    SplitByParity16(cos, c, half);  // half % 16 == 0 for these kernels
    SplitByParity16(sin, s, half);
    return;
  }
  if (pairing == RopePairing::kRotateHalf || layout != TableLayout::kPaired) {
    std::memcpy(c, cos, static_cast<size_t>(half) * sizeof(float));
    std::memcpy(s, sin, static_cast<size_t>(half) * sizeof(float));
    std::fill(c + half, c + padded, 0.0f);
    std::fill(s + half, s + padded, 0.0f);
  } else {
    for (int64_t k = 0; k < half; ++k) {
      c[2 * k] = c[2 * k + 1] = cos[k];
      s[2 * k] = s[2 * k + 1] = sin[k];
    }
    std::fill(c + 2 * half, c + padded, 0.0f);
    std::fill(s + 2 * half, s + padded, 0.0f);
  }
}

// kAuto's ISA for `dtype` up to `ceiling`. float32: AVX-512 only on Intel: on AMD's
// AVX-512 the float32 512-bit path is no faster than AVX2 in cache and slower on large
// tensors, so AMD gets AVX2. float16/bfloat16: the fused kernels are bound by the
// conversions, where 16 lanes per instruction pay even on AMD, so every CPU with AVX-512
// takes it (docs/performance.md, "Kernel choices").
KernelImpl AutoIsa(DType dtype, KernelImpl ceiling) {
  static const KernelImpl best_f32 = CpuSupports(KernelImpl::kAvx512) && __builtin_cpu_is("intel")
                                         ? KernelImpl::kAvx512
                                         : CpuIsaAtMost(KernelImpl::kAvx2);
  return NarrowerIsa(dtype == DType::kFloat32 ? best_f32 : CpuBestIsa(), ceiling);
}

// The ISA a call with `implementation` runs for `dtype` (rope_kernel.h).
KernelImpl ResolveIsa(KernelImpl implementation, DType dtype) {
  const KernelImpl bound = IsaBoundFor(implementation);
  const bool named_isa =
      implementation != KernelImpl::kAuto && implementation != KernelImpl::kOneDnn;
  return named_isa ? bound : AutoIsa(dtype, bound);
}

// How one call's tokens are rotated, fixed before the loop over them.
struct RotationPlan {
  DType dtype;
  RopePairing pairing;
  int64_t rotary_dim;
  bool wide;                  // float32: heads are rotated where they lie
  bool simd_convert;          // 16-bit staging widens/narrows with F16C-class SIMD
  RotateHeadFn rotate;        // one float32 head; null where the plan is tabled() (AVX2)
  Token16Kernel kernel16;     // a whole 16-bit token in registers, or none
  RotateTokenF32Fn rotate32;  // a whole float32 token (AVX2), or none
  bool tabled() const { return kernel16.fn != nullptr || rotate32 != nullptr; }
  // Whether the tabled kernel reads each token's cos/sin laid out and padded
  // (RopeTokenTables); the float32 rotate-half one reads [0, half) of the rows as given
  // (its tail is scalar).
  bool padded_tables() const {
    return kernel16.fn != nullptr || (rotate32 != nullptr && pairing != RopePairing::kRotateHalf);
  }
  int64_t half() const { return rotary_dim / 2; }
};

// Every part of the path (rotation, fused 16-bit kernels, the staging conversions) runs on
// one resolved ISA, so a pin to scalar never reaches F16C.
RotationPlan PlanRotation(DType dtype, RopePairing pairing, int rotary_dim,
                          KernelImpl implementation) {
  RotationPlan p{dtype, pairing, rotary_dim, dtype == DType::kFloat32, false, nullptr, {}, nullptr};
  const KernelImpl resolved = ResolveIsa(implementation, dtype);
  const RotateFns fns = FnsFor(resolved);
  p.rotate = pairing == RopePairing::kRotateHalf ? fns.rotate_half : fns.interleaved;
  p.simd_convert = resolved != KernelImpl::kScalar;
  if (!p.wide) p.kernel16 = Token16KernelFor(resolved, dtype, pairing, p.half());
  if (p.wide && resolved == KernelImpl::kAvx2) p.rotate32 = Avx2TokenF32(pairing);
  return p;
}

// Per-thread scratch: 16-bit heads without a fused kernel are widened into `widened`,
// rotated and narrowed back; the fused kernels read one token's cos/sin from c and s.
// Inline storage covers heads up to 256 features, so a small call's threads do not each
// allocate.
struct RotationScratch {
  explicit RotationScratch(const RotationPlan& p)
      : widened(p.wide || p.kernel16.fn != nullptr ? 0 : p.rotary_dim),
        tables(p.padded_tables() ? 2 * PaddedTableSize(p.half()) : 0) {}
  absl::InlinedVector<float, 256> widened;
  absl::InlinedVector<float, 512> tables;
};

// Tokens [first, last) of the batch * seq grid, each whole from its padded per-token
// tables, or from its rows as given where the plan needs no padding. Everything per call
// is read into locals once: at 12 heads of 64 bfloat16 the per-token work around the
// kernel call was a tenth of a small call.
void RotateTokensTabled(const RotationPlan& p, unsigned char* bytes, size_t elem,
                        const RopeGeometry& g, absl::Span<const float* const> token_rows,
                        int64_t first, int64_t last, RotationScratch& scratch) {
  const int64_t half = p.half(), heads = g.heads, head_stride = g.head_stride;
  const int64_t seq = g.seq, seq_stride = g.seq_stride, batch_stride = g.batch_stride;
  const RopePairing pairing = p.pairing;
  const TableLayout layout = p.kernel16.layout;
  const RotateToken16Fn rotate16 = p.kernel16.fn;
  const RotateTokenF32Fn rotate32 = p.rotate32;
  float* c = scratch.tables.data();
  float* s = c + PaddedTableSize(half);
  const bool padded = p.padded_tables();
  // (b, i) of token t, stepped rather than divided.
  int64_t b = first / seq, i = first % seq;
  for (int64_t t = first; t < last; ++t) {
    const float* cos = token_rows[t];
    unsigned char* token = bytes + static_cast<size_t>(b * batch_stride + i * seq_stride) * elem;
    if (!padded) {
      rotate32(reinterpret_cast<float*>(token), heads, head_stride, cos, cos + half, half);
    } else {
      RopeTokenTables(pairing, layout, cos, cos + half, half, c, s);
      if (rotate16 != nullptr) {
        rotate16(reinterpret_cast<uint16_t*>(token), heads, head_stride, c, s, half);
      } else {
        rotate32(reinterpret_cast<float*>(token), heads, head_stride, c, s, half);
      }
    }
    if (++i == seq) i = 0, ++b;
  }
}

// One head: in place for float32, through float32 staging for 16-bit types.
void RotateHead(const RotationPlan& p, void* head, const float* cos, const float* sin,
                RotationScratch& scratch) {
  const int64_t half = p.half();
  float* widened = scratch.widened.data();
  if (p.wide) {
    p.rotate(static_cast<float*>(head), cos, sin, half);
  } else if (p.simd_convert) {
    simd::Widen(p.dtype, static_cast<const uint16_t*>(head), widened, p.rotary_dim);
    p.rotate(widened, cos, sin, half);
    simd::Narrow(p.dtype, widened, static_cast<uint16_t*>(head), p.rotary_dim);
  } else {
    ToFloat32(p.dtype, head, widened, p.rotary_dim);
    p.rotate(widened, cos, sin, half);
    FromFloat32(widened, p.dtype, head, p.rotary_dim);
  }
}

}  // namespace

void RopeRotateInPlace(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                       int rotary_dim, absl::Span<const float* const> token_rows,
                       KernelImpl implementation) {
  const RotationPlan plan = PlanRotation(x.dtype, pairing, rotary_dim, implementation);
  const size_t elem = DTypeSize(x.dtype);
  auto* bytes = static_cast<unsigned char*>(x.data);
  // Small tensors stay on the calling thread; large ones split the tokens across the kernel
  // threads when no other call holds them (KernelThreadLease).
  const KernelThreadLease lease(WorkBytes(x.NumElements()));
  ParallelFor(lease.threads(), g.batch * g.seq, [&](int64_t first, int64_t last) {
    RotationScratch scratch(plan);
    if (plan.tabled()) {
      RotateTokensTabled(plan, bytes, elem, g, token_rows, first, last, scratch);
      return;
    }
    for (int64_t t = first; t < last; ++t) {  // batch * seq
      const int64_t b = t / g.seq, s = t % g.seq;
      const float* cos = token_rows[t];
      const float* sin = cos + plan.half();
      const int64_t token = b * g.batch_stride + s * g.seq_stride;
      for (int64_t h = 0; h < g.heads; ++h) {
        RotateHead(plan, bytes + static_cast<size_t>(token + h * g.head_stride) * elem, cos, sin,
                   scratch);
      }
    }
  });
}

}  // namespace posenc
