// ConvertFromFloat32 and ConcatEncoding, every implementation (vector, oneDNN's reorder, the
// loop) under every ISA this CPU has, against an independent per-element reference: the
// float32 product rounded once with FloatToHalf / FloatToBFloat16 (oneDNN: the same, but for
// the zeros it writes for subnormals and -0; see FirstDifference). Finite inputs, including
// rounding ties, subnormals and values that overflow to infinity; sizes that cross the
// 512-float staging, the 4096-column oneDNN rows, the 64 Ki-element blocks and the threaded
// size.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/convert_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;

// The reference: one float32 value rounded once to `t`, as raw bytes.
void StoreAs(DType t, float v, char* out) {
  if (t == DType::kFloat32) {
    std::memcpy(out, &v, 4);
    return;
  }
  const uint16_t h = t == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
  std::memcpy(out, &h, 2);
}

float LoadAs(DType t, const char* in) {
  if (t == DType::kFloat32) {
    float v;
    std::memcpy(&v, in, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, in, 2);
  return t == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
}

std::vector<float> MakeFloats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-8, 8);
  // Ties in bfloat16 (0x3f808000: halfway between two bf16 values), a half subnormal, a
  // float subnormal, values past the largest half.
  const uint32_t tie_bits = 0x3f808000u;
  float tie;
  std::memcpy(&tie, &tie_bits, 4);
  const float specials[] = {tie, -tie, 6.0e-8f, 1.0e-39f, 70000.0f, -1.0e30f, -0.0f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i % 29 == 3 ? specials[(i / 29) % 7] : u(rng);
  return v;
}

// Whether `v`, in `t`, is a zero or a subnormal of t.
bool ZeroOrSubnormal(DType t, float v) {
  const float smallest_normal =
      t == DType::kFloat16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
  return std::fabs(v) < smallest_normal;
}

// "" when equal, else the first element that differs, as "i=..: got .. want ..". oneDNN's
// reorder is held to the same bits except that it writes a zero, of either sign, where the
// reference has a signed zero or a subnormal (it flushes denormals and loses -0).
std::string FirstDifference(DType t, const std::vector<char>& got, const std::vector<char>& want,
                            bool onednn = false) {
  const size_t e = DTypeSize(t);
  for (size_t i = 0; i * e < want.size(); ++i) {
    const float g = LoadAs(t, got.data() + i * e), w = LoadAs(t, want.data() + i * e);
    if (onednn && ZeroOrSubnormal(t, w) && g == 0.0f) continue;
    if (std::memcmp(got.data() + i * e, want.data() + i * e, e) != 0) {
      return "i=" + std::to_string(i) + ": got " + std::to_string(LoadAs(t, got.data() + i * e)) +
             " want " + std::to_string(LoadAs(t, want.data() + i * e));
    }
  }
  return "";
}

const KernelImpl kImpls[] = {KernelImpl::kAuto, KernelImpl::kAvx2, KernelImpl::kAvx512,
                             KernelImpl::kOneDnn, KernelImpl::kScalar};
const DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// No override, then each implementation forced.
std::vector<KernelImpl> IsasToRun() {
  std::vector<KernelImpl> isas = {KernelImpl::kAuto, KernelImpl::kScalar, KernelImpl::kOneDnn};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  return isas;
}

TEST(ConvertFromFloat32Test, EveryImplementationMatchesTheReference) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 15, 513, 4096, 4097 + 4096, 70001, 300000}) {
    const std::vector<float> src = MakeFloats(n, rng);
    for (DType t : kTypes) {
      std::vector<char> want(n * DTypeSize(t));
      for (int64_t i = 0; i < n; ++i) StoreAs(t, src[i], want.data() + i * DTypeSize(t));
      for (KernelImpl isa : IsasToRun()) {
        ScopedKernelOverride scope(isa);
        for (KernelImpl impl : kImpls) {
          std::vector<char> got(want.size(), 0x55);
          ASSERT_THAT(ConvertFromFloat32(src.data(), t, got.data(), n, impl), IsOk());
          const bool onednn = LastConvertImplementation() == KernelImpl::kOneDnn;
          EXPECT_EQ(FirstDifference(t, got, want, onednn), "")
              << "n=" << n << " " << DTypeName(t) << " impl " << KernelImplName(impl) << " isa "
              << KernelImplName(isa) << " ran " << KernelImplName(LastConvertImplementation());
        }
      }
    }
  }
}

TEST(ConvertFromFloat32Test, ImplementationsReportWhatRan) {
  std::vector<float> src(100, 1.5f);
  std::vector<char> out(200);
  ASSERT_THAT(ConvertFromFloat32(src.data(), DType::kBFloat16, out.data(), 100,
                                 KernelImpl::kScalar),
              IsOk());
  EXPECT_STREQ(KernelImplName(LastConvertImplementation()), "scalar");
  ASSERT_THAT(ConvertFromFloat32(src.data(), DType::kFloat32, out.data(), 50, KernelImpl::kOneDnn),
              IsOk());
  // oneDNN has a float32 reorder on every x86-64 CPU.
  EXPECT_STREQ(KernelImplName(LastConvertImplementation()), "onednn");
  {
    ScopedKernelOverride scalar(KernelImpl::kScalar);
    ASSERT_THAT(ConvertFromFloat32(src.data(), DType::kFloat16, out.data(), 100), IsOk());
    EXPECT_STREQ(KernelImplName(LastConvertImplementation()), "scalar");
  }
  {
    // The override reaches the conversions: oneDNN's float32 reorder exists everywhere.
    ScopedKernelOverride onednn(KernelImpl::kOneDnn);
    ASSERT_THAT(ConvertFromFloat32(src.data(), DType::kFloat32, out.data(), 50), IsOk());
    EXPECT_STREQ(KernelImplName(LastConvertImplementation()), "onednn");
  }
  if (CpuSupports(KernelImpl::kAvx2)) {
    // No AVX-512 code: the AVX2 code serves an AVX-512 request.
    ASSERT_THAT(ConvertFromFloat32(src.data(), DType::kBFloat16, out.data(), 100,
                                   KernelImpl::kAvx512),
                IsOk());
    EXPECT_STREQ(KernelImplName(LastConvertImplementation()), "avx2");
  }
}

// out[r, :d] = x[r] * a, out[r, d:] = pe[r % seq] * b, each rounded once.
std::vector<char> ReferenceConcat(DType t, const std::vector<char>& x, const std::vector<float>& pe,
                                  int64_t nb, int64_t seq, int64_t d, int64_t k, float a, float b) {
  const size_t e = DTypeSize(t);
  std::vector<char> out(nb * seq * (d + k) * e);
  for (int64_t r = 0; r < nb * seq; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      StoreAs(t, LoadAs(t, x.data() + (r * d + c) * e) * a, out.data() + (r * (d + k) + c) * e);
    }
    for (int64_t c = 0; c < k; ++c) {
      StoreAs(t, pe[(r % seq) * k + c] * b, out.data() + (r * (d + k) + d + c) * e);
    }
  }
  return out;
}

TEST(ConcatEncodingTest, EveryImplementationMatchesTheReference) {
  std::mt19937 rng(11);
  struct Shape {
    int64_t nb, seq, d, k;
  };
  for (const Shape& s :
       {Shape{1, 1, 1, 1}, Shape{2, 5, 7, 9}, Shape{3, 64, 600, 64}, Shape{2, 256, 256, 256}}) {
    const std::vector<float> pe = MakeFloats(s.seq * s.k, rng);
    const std::vector<float> xs = MakeFloats(s.nb * s.seq * s.d, rng);
    for (DType t : kTypes) {
      std::vector<char> x(xs.size() * DTypeSize(t));
      for (size_t i = 0; i < xs.size(); ++i) StoreAs(t, xs[i], x.data() + i * DTypeSize(t));
      for (auto [a, b] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 3.0f}}) {
        const std::vector<char> want = ReferenceConcat(t, x, pe, s.nb, s.seq, s.d, s.k, a, b);
        for (KernelImpl isa : IsasToRun()) {
          ScopedKernelOverride scope(isa);
          for (KernelImpl impl : kImpls) {
            std::vector<char> got(want.size(), 0x55);
            ConstTensorView in{t, {s.nb, s.seq, s.d}, x.data()};
            TensorView out{t, {s.nb, s.seq, s.d + s.k}, got.data()};
            ASSERT_THAT(ConcatEncoding(in, pe.data(), s.k, a, b, out, impl), IsOk());
            const bool onednn = LastConvertImplementation() == KernelImpl::kOneDnn;
            EXPECT_EQ(FirstDifference(t, got, want, onednn), "")
                << "[" << s.nb << "," << s.seq << "," << s.d << "]+" << s.k << " " << DTypeName(t)
                << " scales " << a << "," << b << " impl " << KernelImplName(impl) << " isa "
                << KernelImplName(isa) << " ran " << KernelImplName(LastConvertImplementation());
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace posenc
