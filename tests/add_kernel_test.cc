// AddEncodingInPlace and MultiplyEncodingInPlace (vectorised rows, threaded when large)
// against AddEncodingLoop / MultiplyEncodingLoop (and that against float64), the
// plain formula: bit-identical results for every float dtype, including the vector tail,
// several batch rows, the threaded size, and NaN, infinity, subnormal and overflow inputs.
// GCC 12 reports the _mm512_undefined_* operands inside AVX-512 intrinsics (srli, cvtepi32_epi16,
// cvtps_ph, ...) as "may be used uninitialized" (GCC bug 105593) wherever they inline.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/kernels/add_kernel.h"
#include "server/kernels/finite_kernel.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/simd_convert.h"
#include "server/kernels/threads.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;

uint16_t ToBits16(DType dtype, float v) {
  return dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
}

// Random embeddings of `dtype` as raw bytes, with special values sprinkled in.
std::vector<char> MakeInput(DType dtype, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4, 4);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(),
                            65504.0f,  // largest half: + pe overflows to infinity
                            6.0e-8f,   // half subnormal
                            1.0e-39f,  // float32 subnormal
                            -0.0f};
  std::vector<char> bytes(static_cast<size_t>(n) * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = i % 37 == 5 ? specials[(i / 37) % 7] : u(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(bytes.data() + i * 4, &v, 4);
    } else {
      const uint16_t h = ToBits16(dtype, v);
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  // A NaN with a payload: FloatToHalf and FloatToBFloat16 decide what it becomes.
  if (n > 3 && dtype == DType::kFloat32) {
    const uint32_t payload_nan = 0xffa5a5a5u;
    std::memcpy(bytes.data() + 3 * 4, &payload_nan, 4);
  }
  return bytes;
}

struct Case {
  int64_t nb, seq, dim;
  float input_scale, pe_scale;
};

TEST(AddKernel, BitIdenticalToLoopForEveryDtype) {
  const Case cases[] = {{1, 1, 1, 1, 1},
                        {2, 7, 33, 1.5f, 0.25f},
                        {3, 5, 17, 1, 1},
                        {1, 3, 8, 1, -2},
                        {2, 3, 47, 1, 1},
                        {2, 3, 31, 1.5f, 0.25f},     // AVX-512 tails
                        {4, 64, 1024, 1.5f, 0.25f},  // 1 MiB fp32: the threaded path
                        {9, 31, 515, 1, 1},          // odd rows split across threads
                        {1, 128, 768, 1, 1}};        // 7 blocks of pe rebalanced to 8
  std::mt19937 rng(7);
  // Default choice, then each vector width forced (AVX-512 falls back to AVX2 rows where
  // the CPU or dtype has none).
  for (KernelImpl impl : {KernelImpl::kAuto, KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (const Case& c : cases) {
        const int64_t n = c.nb * c.seq * c.dim;
        std::vector<float> pe(static_cast<size_t>(c.seq * c.dim));
        std::uniform_real_distribution<float> u(-1, 1);
        for (auto& v : pe) v = u(rng);
        if (pe.size() > 2) pe[1] = 60000.0f;  // pushes some halves past 65504
        std::vector<char> fast = MakeInput(dtype, n, rng);
        std::vector<char> slow = fast;
        TensorView x{dtype, {c.nb, c.seq, c.dim}, fast.data()};
        ASSERT_THAT(AddEncodingInPlace(x, pe.data(), c.input_scale, c.pe_scale, impl), IsOk());
        AddEncodingLoop(TensorView{dtype, {c.nb, c.seq, c.dim}, slow.data()}, pe.data(),
                        c.input_scale, c.pe_scale);
        const size_t elem = DTypeSize(dtype);
        int mismatches = 0;
        for (int64_t i = 0; i < n && mismatches < 5; ++i) {
          if (std::memcmp(fast.data() + i * elem, slow.data() + i * elem, elem) != 0) {
            ++mismatches;
            ADD_FAILURE() << DTypeName(dtype) << " [" << c.nb << "," << c.seq << "," << c.dim
                          << "] element " << i << " differs from AddEncodingLoop ("
                          << KernelImplName(LastAddImplementation()) << ")";
          }
        }
      }
    }
  }
}

// The index of the first value that is not finite, as the add and the multiply report it
// while writing (first_non_finite), is FirstNonFinite's over their result: for each ISA
// (rows checked one by one, the threaded size, rows too narrow to check one by one, the
// loop, oneDNN), each float dtype, no such value, one, and several (the first counts).
TEST(AddKernel, ReportsTheFirstValueThatIsNotFiniteAsAPassWould) {
  struct Run {
    KernelImpl isa;
    KernelImpl implementation;
  };
  std::vector<Run> runs = {{KernelImpl::kScalar, KernelImpl::kAuto}};
  for (KernelImpl isa : CpuVectorIsas()) runs.push_back({isa, KernelImpl::kAuto});
  runs.push_back({CpuVectorIsas().empty() ? KernelImpl::kScalar : CpuVectorIsas().back(),
                  KernelImpl::kOneDnn});
  const Case cases[] = {
      {2, 7, 33, 1, 1}, {1, 3, 8, 1.5f, 0.25f}, {9, 31, 515, 1, 1}, {4, 64, 1024, 1, 1}};
  std::mt19937 rng(11);
  for (const Run& run : runs) {
    const ScopedKernelOverride forced(run.isa);
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (const Case& c : cases) {
        const int64_t n = c.nb * c.seq * c.dim;
        std::vector<float> pe(static_cast<size_t>(c.seq * c.dim));
        std::uniform_real_distribution<float> u(-1, 1);
        for (auto& v : pe) v = u(rng);
        std::uniform_int_distribution<int64_t> at(0, n - 1);
        const int64_t first = at(rng), later = std::min(n - 1, first + 1 + at(rng) % 97);
        const std::vector<std::vector<int64_t>> placements = {{}, {first}, {later, first}};
        for (const std::vector<int64_t>& bad_at : placements) {
          for (bool multiply : {false, true}) {
            std::vector<float> values(static_cast<size_t>(n));
            for (auto& v : values) v = 4 * u(rng);
            for (size_t k = 0; k < bad_at.size(); ++k) {
              values[static_cast<size_t>(bad_at[k])] =
                  k == 0 ? std::numeric_limits<float>::infinity()
                         : std::numeric_limits<float>::quiet_NaN();
            }
            std::vector<char> bytes(static_cast<size_t>(n) * DTypeSize(dtype));
            for (int64_t i = 0; i < n; ++i) {
              if (dtype == DType::kFloat32) {
                std::memcpy(bytes.data() + i * 4, &values[i], 4);
              } else {
                const uint16_t h = ToBits16(dtype, values[i]);
                std::memcpy(bytes.data() + i * 2, &h, 2);
              }
            }
            const TensorView x{dtype, {c.nb, c.seq, c.dim}, bytes.data()};
            int64_t reported = -2;
            if (multiply) {
              ASSERT_THAT(MultiplyEncodingInPlace(x, pe.data(), c.input_scale, c.pe_scale,
                                                  run.implementation, {}, &reported),
                          IsOk());
            } else {
              ASSERT_THAT(AddEncodingInPlace(x, pe.data(), c.input_scale, c.pe_scale,
                                             run.implementation, {}, &reported),
                          IsOk());
            }
            const int64_t expected = FirstNonFinite(dtype, bytes.data(), n);
            EXPECT_EQ(expected,
                      bad_at.empty() ? -1 : *std::min_element(bad_at.begin(), bad_at.end()));
            EXPECT_EQ(reported, expected)
                << KernelImplName(run.isa) << "/" << KernelImplName(run.implementation) << " "
                << DTypeName(dtype) << " [" << c.nb << "," << c.seq << "," << c.dim << "] "
                << (multiply ? "multiply" : "add") << " with " << bad_at.size()
                << " bad values, ran " << KernelImplName(LastAddImplementation());
          }
        }
      }
    }
  }
}

// Every 16-bit pattern (NaN payloads, infinities, subnormals, whose float32 products are
// float32 subnormals for bfloat16) through each vector width, against the loop.
TEST(AddKernel, EverySixteenBitPatternBitIdenticalToLoop) {
  const int64_t dim = 65536 + 13;  // one row per batch item: full vectors and a tail
  std::vector<float> pe(dim);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : pe) v = u(rng);
  for (int64_t i = 0; i < dim; i += 5) pe[i] = 0.0f;  // x * a alone: subnormals survive
  // NaN encodings with payloads in their low bits, which rounding to bfloat16 must not carry
  // into the result (the AVX2 rows' NaN fix-up runs only where pe holds one).
  for (int64_t i = 3; i < dim; i += 997) {
    const uint32_t payload = (i % 2 == 0 ? 0x7f80a5a5u : 0xffc0ffffu);
    std::memcpy(&pe[i], &payload, 4);
  }
  for (KernelImpl impl : {KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      // Unit scales take their own rows (x + pe, no products): every pattern there too.
      for (auto [a, b] : {std::pair{1.0f, 1.0f}, std::pair{1.0f, 0.5f}, std::pair{0.75f, 0.5f}}) {
        std::vector<uint16_t> fast(dim), slow(dim);
        for (int64_t i = 0; i < dim; ++i) fast[i] = slow[i] = static_cast<uint16_t>(i * 40503u);
        ASSERT_THAT(AddEncodingInPlace(TensorView{dtype, {1, 1, dim}, fast.data()}, pe.data(), a, b,
                                       impl),
                    IsOk());
        AddEncodingLoop(TensorView{dtype, {1, 1, dim}, slow.data()}, pe.data(), a, b);
        auto is_nan16 = [dtype](uint16_t v) {
          return (v & 0x7fff) > (dtype == DType::kFloat16 ? 0x7c00 : 0x7f80);
        };
        for (int64_t i = 0; i < dim; ++i) {
          // x and pe both NaN: which operand's NaN (and sign) a sum keeps is the compiler's
          // choice of operand order in the loop, so only NaN-ness is the contract.
          if (std::isnan(pe[i]) && is_nan16(static_cast<uint16_t>(i * 40503u))) {
            ASSERT_TRUE(is_nan16(fast[i]) && is_nan16(slow[i])) << DTypeName(dtype) << " " << i;
            continue;
          }
          ASSERT_EQ(fast[i], slow[i])
              << DTypeName(dtype) << " " << KernelImplName(LastAddImplementation()) << " a=" << a
              << " b=" << b << " element " << i << " input " << static_cast<uint16_t>(i * 40503u);
        }
      }
    }
  }
}

// kAuto under SetKernelOverride, for the scalar loop and every vector ISA this CPU has: the
// rows of that ISA run (float32 has no AVX-512 rows: AVX2's), and every dtype, size and
// scale pair is bit-identical to the loop.
TEST(AddKernel, EveryForcedIsaRunsItsRowsBitIdenticalToLoop) {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  const Case cases[] = {{2, 3, 47, 1, 1}, {3, 5, 77, 1.5f, 0.25f}, {4, 64, 1024, 1, 1}};
  std::mt19937 rng(5);
  for (KernelImpl isa : isas) {
    const ScopedKernelOverride forced(isa);
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (const Case& c : cases) {
        const int64_t n = c.nb * c.seq * c.dim;
        std::vector<float> pe(static_cast<size_t>(c.seq * c.dim));
        std::uniform_real_distribution<float> u(-1, 1);
        for (auto& v : pe) v = u(rng);
        std::vector<char> fast = MakeInput(dtype, n, rng);
        std::vector<char> slow = fast;
        ASSERT_THAT(AddEncodingInPlace(TensorView{dtype, {c.nb, c.seq, c.dim}, fast.data()},
                                       pe.data(), c.input_scale, c.pe_scale),
                    IsOk());
        const bool wide_rows = isa == KernelImpl::kAvx512 && dtype != DType::kFloat32 &&
                               (dtype == DType::kFloat16 || simd::HasAvx512Bf16());
        const char* want = isa == KernelImpl::kScalar ? "scalar" : wide_rows ? "avx512" : "avx2";
        ASSERT_STREQ(KernelImplName(LastAddImplementation()), want)
            << KernelImplName(isa) << " " << DTypeName(dtype);
        AddEncodingLoop(TensorView{dtype, {c.nb, c.seq, c.dim}, slow.data()}, pe.data(),
                        c.input_scale, c.pe_scale);
        ASSERT_EQ(fast, slow) << KernelImplName(isa) << " " << DTypeName(dtype) << " [" << c.nb
                              << "," << c.seq << "," << c.dim << "]";
      }
    }
  }
}

// MULTIPLY: x = (x * a) * (pe * b). Under SetKernelOverride (the loop, then every vector
// ISA this CPU has) and with each implementation named (kOneDnn: kAuto's rows), every dtype, vector
// tail, odd batch and the threaded size is bit-identical to MultiplyEncodingLoop; NaN results only
// by NaN-ness where both operands are NaN (which NaN a product keeps is the compiler's operand
// order).
TEST(MultiplyKernel, EveryIsaBitIdenticalToLoop) {
  std::vector<KernelImpl> isas = {KernelImpl::kScalar};
  for (KernelImpl isa : CpuVectorIsas()) isas.push_back(isa);
  const Case cases[] = {{1, 1, 1, 1, 1},           {2, 7, 33, 1.5f, 0.25f}, {3, 5, 17, 1, 1},
                        {2, 3, 47, 1, -2},         {2, 3, 31, 1.5f, 0.25f}, {9, 31, 515, 1, 1},
                        {4, 64, 1024, 1.5f, 0.25f}};
  std::mt19937 rng(17);
  auto check = [&](const char* what, DType dtype, const Case& c, KernelImpl impl,
                   const char* want) {
    const int64_t n = c.nb * c.seq * c.dim;
    std::vector<float> pe(static_cast<size_t>(c.seq * c.dim));
    std::uniform_real_distribution<float> u(-2, 2);
    for (auto& v : pe) v = u(rng);
    if (pe.size() > 2) pe[1] = 3.0e4f;  // pushes some halves past 65504
    std::vector<char> fast = MakeInput(dtype, n, rng);
    std::vector<char> slow = fast;
    ASSERT_THAT(MultiplyEncodingInPlace(TensorView{dtype, {c.nb, c.seq, c.dim}, fast.data()},
                                        pe.data(), c.input_scale, c.pe_scale, impl),
                IsOk());
    if (want != nullptr) {
      ASSERT_STREQ(KernelImplName(LastAddImplementation()), want) << what << DTypeName(dtype);
    }
    MultiplyEncodingLoop(TensorView{dtype, {c.nb, c.seq, c.dim}, slow.data()}, pe.data(),
                         c.input_scale, c.pe_scale);
    const size_t elem = DTypeSize(dtype);
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(fast.data() + i * elem, slow.data() + i * elem, elem) == 0) continue;
      float f = 0, g = 0;
      if (dtype == DType::kFloat32) {
        std::memcpy(&f, fast.data() + i * 4, 4);
        std::memcpy(&g, slow.data() + i * 4, 4);
      } else {
        uint16_t hf, hg;
        std::memcpy(&hf, fast.data() + i * 2, 2);
        std::memcpy(&hg, slow.data() + i * 2, 2);
        f = dtype == DType::kFloat16 ? HalfToFloat(hf) : BFloat16ToFloat(hf);
        g = dtype == DType::kFloat16 ? HalfToFloat(hg) : BFloat16ToFloat(hg);
      }
      ASSERT_TRUE(std::isnan(f) && std::isnan(g))
          << what << " " << DTypeName(dtype) << " [" << c.nb << "," << c.seq << "," << c.dim
          << "] element " << i << ": " << f << " vs loop " << g << " ("
          << KernelImplName(LastAddImplementation()) << ")";
    }
  };
  for (KernelImpl isa : isas) {
    const ScopedKernelOverride forced(isa);
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const bool wide_rows = isa == KernelImpl::kAvx512 && dtype != DType::kFloat32 &&
                             (dtype == DType::kFloat16 || simd::HasAvx512Bf16());
      const char* want = isa == KernelImpl::kScalar ? "scalar" : wide_rows ? "avx512" : "avx2";
      for (const Case& c : cases) check(KernelImplName(isa), dtype, c, KernelImpl::kAuto, want);
    }
  }
  for (KernelImpl impl :
       {KernelImpl::kAvx2, KernelImpl::kAvx512, KernelImpl::kScalar, KernelImpl::kOneDnn}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (const Case& c : cases) check("forced", dtype, c, impl, nullptr);
    }
  }
}

// The loop against the formula in float64, rounded once to the dtype: within 2 float32 ulps
// (two roundings of products before the last) for float32, and within one ulp of the dtype
// for float16 and bfloat16 (the float32 result is rounded once more).
TEST(MultiplyKernel, LoopMatchesFloat64Formula) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> u(-3, 3);
  const int64_t nb = 3, seq = 5, dim = 37;
  std::vector<float> pe(seq * dim);
  for (auto& v : pe) v = static_cast<float>(u(rng));
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (auto [a, b] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 3.0f}, std::pair{-1.25f, 0.1f}}) {
      std::vector<double> x0(nb * seq * dim);
      std::vector<char> bytes(x0.size() * DTypeSize(dtype));
      for (size_t i = 0; i < x0.size(); ++i) {
        const float v = static_cast<float>(u(rng));
        if (dtype == DType::kFloat32) {
          std::memcpy(bytes.data() + i * 4, &v, 4);
          x0[i] = v;
        } else {
          const uint16_t h = ToBits16(dtype, v);
          std::memcpy(bytes.data() + i * 2, &h, 2);
          x0[i] = dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
        }
      }
      MultiplyEncodingLoop(TensorView{dtype, {nb, seq, dim}, bytes.data()}, pe.data(), a, b);
      const double ulp = dtype == DType::kFloat32   ? std::ldexp(1.0, -23)
                         : dtype == DType::kFloat16 ? std::ldexp(1.0, -10)
                                                    : std::ldexp(1.0, -7);
      const double tol_ulps = dtype == DType::kFloat32 ? 2.0 : 1.0;
      for (int64_t i = 0; i < nb * seq * dim; ++i) {
        const int64_t s = (i / dim) % seq, c = i % dim;
        const double want = (x0[i] * a) * (static_cast<double>(pe[s * dim + c]) * b);
        double got;
        if (dtype == DType::kFloat32) {
          float f;
          std::memcpy(&f, bytes.data() + i * 4, 4);
          got = f;
        } else {
          uint16_t h;
          std::memcpy(&h, bytes.data() + i * 2, 2);
          got = dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
        }
        // One ulp relative to the value's binade (float16 subnormals: absolute 2^-24).
        const double scale = std::max(std::abs(want), dtype == DType::kFloat16 ? 6.1e-5 : 1e-30);
        ASSERT_LE(std::abs(got - want), tol_ulps * ulp * scale + 1e-300)
            << DTypeName(dtype) << " a=" << a << " b=" << b << " element " << i;
      }
    }
  }
}

// The one layout today: the AVX2 bfloat16 rows read each group of 16 columns as its 8 even
// columns, then its 8 odd ones (the lanes of widened bfloat16 pairs); the tail in order.
TEST(AddKernel, Bfloat16Avx2LayoutOrdersEachGroupOfSixteenEvenThenOdd) {
  if (!CpuSupports(KernelImpl::kAvx2)) GTEST_SKIP() << "no AVX2";
  const AddRowLayout* layout = AddRowLayoutFor(DType::kBFloat16, KernelImpl::kAvx2);
  ASSERT_NE(layout, nullptr);
  EXPECT_STREQ(layout->name(), "by-parity-16");
  const int64_t rows = 2, dim = 37;  // two whole groups and a tail of 5 per row
  std::vector<float> pe(rows * dim), out(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) pe[i] = static_cast<float>(i);
  layout->LayOut(pe.data(), rows, dim, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t group = c / 16 * 16, j = c % 16;
      const int64_t from = c >= 32 ? c : group + (j < 8 ? 2 * j : 2 * (j - 8) + 1);
      ASSERT_EQ(out[r * dim + c], pe[r * dim + from]) << "row " << r << " column " << c;
    }
  }
}

// The AVX2 bfloat16 rows that read pe in their layout, adding and multiplying: every
// 16-bit input pattern and the shapes of BitIdenticalToLoopForEveryDtype (tails, several
// batch rows, the threaded size), unit and other scales, bit-identical to the loop on the
// rows in order.
TEST(AddKernel, LaidOutRowsBitIdenticalToLoop) {
  if (!CpuSupports(KernelImpl::kAvx2)) GTEST_SKIP() << "no AVX2";
  const AddRowLayout* layout = AddRowLayoutFor(DType::kBFloat16, KernelImpl::kAvx2);
  ASSERT_NE(layout, nullptr);
  const Case cases[] = {{1, 1, 65536 + 13, 1, 1},
                        {1, 1, 65536 + 13, 1, 0.5f},
                        {1, 1, 65536 + 13, 0.75f, 0.5f},
                        {2, 7, 33, 1.5f, 0.25f},
                        {3, 5, 17, 1, 1},
                        {1, 3, 8, 1, -2},
                        {2, 3, 47, 1, 1},
                        {9, 31, 515, 1, 1},
                        {4, 64, 1024, 1.5f, 0.25f},
                        {1, 128, 768, 1, 1}};
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Case& c : cases) {
    std::vector<float> pe(static_cast<size_t>(c.seq * c.dim));
    for (auto& v : pe) v = u(rng);
    for (size_t i = 0; i < pe.size(); i += 5) pe[i] = 0.0f;  // x * a alone: subnormals survive
    if (pe.size() > 2) pe[1] = 3e38f;                        // overflows to infinity
    std::vector<float> laid_out(pe.size());
    layout->LayOut(pe.data(), c.seq, c.dim, laid_out.data());
    const int64_t n = c.nb * c.seq * c.dim;
    for (bool multiply : {false, true}) {  // the same rows, a sum or a product
      std::vector<uint16_t> fast(n), slow(n);
      for (int64_t i = 0; i < n; ++i) fast[i] = slow[i] = static_cast<uint16_t>(i * 40503u);
      const TensorView x{DType::kBFloat16, {c.nb, c.seq, c.dim}, fast.data()};
      const TensorView loop{DType::kBFloat16, {c.nb, c.seq, c.dim}, slow.data()};
      const LaidOutRows rows{layout, laid_out.data()};
      if (multiply) {
        ASSERT_THAT(MultiplyEncodingInPlace(x, pe.data(), c.input_scale, c.pe_scale,
                                            KernelImpl::kAvx2, rows),
                    IsOk());
        MultiplyEncodingLoop(loop, pe.data(), c.input_scale, c.pe_scale);
      } else {
        ASSERT_THAT(AddEncodingInPlace(x, pe.data(), c.input_scale, c.pe_scale, KernelImpl::kAvx2,
                                       rows),
                    IsOk());
        AddEncodingLoop(loop, pe.data(), c.input_scale, c.pe_scale);
      }
      ASSERT_EQ(LastAddImplementation(), KernelImpl::kAvx2);
      ASSERT_EQ(LastAddRowLayout(), layout);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(fast[i], slow[i])
            << (multiply ? "multiply" : "add") << " [" << c.nb << "," << c.seq << "," << c.dim
            << "] a=" << c.input_scale << " b=" << c.pe_scale << " element " << i << " input "
            << static_cast<uint16_t>(i * 40503u);
      }
    }
  }
}

// A layout is asked for only where the AVX2 bfloat16 rows run: not for other dtypes, the
// scalar loop, AVX-512 rows or oneDNN; and laid-out rows are read only there.
TEST(AddKernel, RowLayoutOnlyWhereTheAvx2Bfloat16RowsRun) {
  EXPECT_EQ(AddRowLayoutFor(DType::kFloat32), nullptr);
  EXPECT_EQ(AddRowLayoutFor(DType::kFloat16), nullptr);
  EXPECT_EQ(AddRowLayoutFor(DType::kBFloat16, KernelImpl::kScalar), nullptr);
  EXPECT_EQ(AddRowLayoutFor(DType::kBFloat16, KernelImpl::kOneDnn), nullptr);
  {
    const ScopedKernelOverride scalar(KernelImpl::kScalar);
    EXPECT_EQ(AddRowLayoutFor(DType::kBFloat16), nullptr);
  }
  for (KernelImpl isa : CpuVectorIsas()) {
    const ScopedKernelOverride forced(isa);
    const bool wide = isa == KernelImpl::kAvx512 && simd::HasAvx512Bf16();
    const AddRowLayout* layout = AddRowLayoutFor(DType::kBFloat16);
    EXPECT_EQ(layout != nullptr, !wide) << KernelImplName(isa);
    EXPECT_EQ(AddRowLayoutFor(DType::kBFloat16, isa), layout) << KernelImplName(isa);
    std::vector<uint16_t> x(64, FloatToBFloat16(1.0f));
    const TensorView view{DType::kBFloat16, {1, 1, 64}, x.data()};
    std::vector<float> pe(64, 0.5f), laid_out(64, 0.5f);
    // NaN scales take the rows in order, which fix NaN lanes up.
    ASSERT_THAT(AddEncodingInPlace(view, pe.data(), std::numeric_limits<float>::quiet_NaN(), 1,
                                   KernelImpl::kAuto, LaidOutRows{layout, laid_out.data()}),
                IsOk());
    EXPECT_EQ(LastAddRowLayout(), nullptr) << KernelImplName(isa);
    // Rows without their layout are not read as laid out.
    ASSERT_THAT(AddEncodingInPlace(view, pe.data(), 1, 1, KernelImpl::kAuto,
                                   LaidOutRows{nullptr, laid_out.data()}),
                IsOk());
    EXPECT_EQ(LastAddRowLayout(), nullptr) << KernelImplName(isa);
    if (layout != nullptr) {
      ASSERT_THAT(AddEncodingInPlace(view, pe.data(), 1, 1, KernelImpl::kAuto,
                                     LaidOutRows{layout, laid_out.data()}),
                  IsOk());
      EXPECT_EQ(LastAddRowLayout(), layout) << KernelImplName(isa);
    }
  }
}

// The override kOneDnn reaches the add (oneDNN has a float32 JIT add from AVX2 up) and not
// the multiply, which has no oneDNN code and runs kAuto's rows.
TEST(AddKernel, OneDnnOverrideRunsOneDnnWhereTheKernelHasIt) {
  if (!CpuSupports(KernelImpl::kAvx2)) GTEST_SKIP() << "oneDNN has no float32 JIT add here";
  const ScopedKernelOverride onednn(KernelImpl::kOneDnn);
  std::vector<float> x(2 * 3 * 40, 1.0f), pe(3 * 40, 0.5f);
  const TensorView view{DType::kFloat32, {2, 3, 40}, x.data()};
  ASSERT_THAT(AddEncodingInPlace(view, pe.data(), 1, 1), IsOk());
  EXPECT_EQ(LastAddImplementation(), KernelImpl::kOneDnn);
  EXPECT_EQ(x[7], 1.5f);
  ASSERT_THAT(MultiplyEncodingInPlace(view, pe.data(), 1, 1), IsOk());
  EXPECT_EQ(LastAddImplementation(), KernelImpl::kAvx2);  // float32: AVX2 rows only
  EXPECT_EQ(x[7], 0.75f);
}

TEST(AddKernel, UsesTheVectorRowsWhereTheCpuHasThem) {
  std::vector<float> x(16, 1.0f), pe(16, 0.5f);
  ASSERT_THAT(AddEncodingInPlace(TensorView{DType::kFloat32, {1, 2, 8}, x.data()}, pe.data(), 1, 1),
              IsOk());
  if (CpuSupports(KernelImpl::kAvx2)) {
    EXPECT_EQ(LastAddImplementation(), KernelImpl::kAvx2);
  }
  EXPECT_EQ(x[0], 1.5f);
  // bfloat16 takes the AVX-512 rows where the CPU has them (F, BW, VL, DQ and BF16).
  const int64_t dim = 1024, seq = 512;
  std::vector<uint16_t> big(static_cast<size_t>(seq * dim), FloatToBFloat16(1.0f));
  std::vector<float> big_pe(static_cast<size_t>(seq * dim), 0.5f);
  ASSERT_THAT(AddEncodingInPlace(TensorView{DType::kBFloat16, {1, seq, dim}, big.data()},
                                 big_pe.data(), 1, 1),
              IsOk());
  if (CpuSupports(KernelImpl::kAvx512) && simd::HasAvx512Bf16()) {
    EXPECT_EQ(LastAddImplementation(), KernelImpl::kAvx512);
  }
  EXPECT_EQ(BFloat16ToFloat(big[12345]), 1.5f);
}

TEST(SimdConvert, WidenAndNarrowAreBitIdenticalToTheScalarConversions) {
  if (!simd::HasAvx2F16c()) GTEST_SKIP() << "no AVX2+F16C";
  // Every 16-bit pattern widened, and floats around every 16-bit value narrowed (the value,
  // the halfway points either side, NaN payloads), 16 at a time plus a tail of 7.
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<float> wide(all.size());
    simd::Widen(dtype, all.data(), wide.data(), static_cast<int64_t>(all.size()));
    std::vector<float> probes;
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = dtype == DType::kFloat16 ? HalfToFloat(all[i]) : BFloat16ToFloat(all[i]);
      if (std::isnan(want)) {  // F16C quiets a signalling NaN; arithmetic would anyway
        ASSERT_TRUE(std::isnan(wide[i])) << DTypeName(dtype) << " " << all[i];
      } else {
        ASSERT_EQ(std::memcmp(&wide[i], &want, 4), 0) << DTypeName(dtype) << " " << all[i];
      }
      uint32_t bits;
      std::memcpy(&bits, &want, 4);
      for (uint32_t delta : {0u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u}) {
        const uint32_t probe_bits = bits + delta;
        float probe;
        std::memcpy(&probe, &probe_bits, 4);
        probes.push_back(probe);
      }
    }
    std::vector<uint16_t> narrow(probes.size());
    simd::Narrow(dtype, probes.data(), narrow.data(), static_cast<int64_t>(probes.size()));
    for (size_t i = 0; i < probes.size(); ++i) {
      const uint16_t want =
          dtype == DType::kFloat16 ? FloatToHalf(probes[i]) : FloatToBFloat16(probes[i]);
      ASSERT_EQ(narrow[i], want) << DTypeName(dtype) << " probe " << i << " = " << probes[i];
    }
  }
}

// The parity kernels' rounding (RoundJoinEvenOddBf16 and the per-lane RoundedBf16High +
// JoinEvenOddBf16 it replaces): every non-NaN bfloat16 high half with low halves at and
// around the rounding points (0x7fff, the tie 0x8000, 0x8001, 0xffff), as even and odd
// lanes, each equal to FloatToBFloat16.
__attribute__((target("avx2"))) void JoinBothWays(const float* even, const float* odd,
                                                  uint16_t* packed, uint16_t* per_lane) {
  const __m256 e = _mm256_loadu_ps(even), o = _mm256_loadu_ps(odd);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed), simd::RoundJoinEvenOddBf16(e, o));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(per_lane),
                      simd::JoinEvenOddBf16(simd::RoundedBf16High(e), simd::RoundedBf16High(o)));
}

TEST(SimdConvert, EvenOddBf16RoundingMatchesFloatToBFloat16) {
  if (!simd::HasAvx2F16c()) GTEST_SKIP() << "no AVX2";
  std::vector<float> probes;
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : {0x0u, 0x1u, 0x7ffeu, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu}) {
      const uint32_t bits = high << 16 | low;
      float f;
      std::memcpy(&f, &bits, 4);
      if (!std::isnan(f)) probes.push_back(f);
    }
  }
  while (probes.size() % 16 != 0) probes.push_back(0.0f);
  for (size_t i = 0; i < probes.size(); i += 16) {
    float even[8], odd[8];
    for (int j = 0; j < 8; ++j) {
      even[j] = probes[i + 2 * j];
      odd[j] = probes[i + 2 * j + 1];
    }
    uint16_t packed[16], per_lane[16];
    JoinBothWays(even, odd, packed, per_lane);
    for (int j = 0; j < 16; ++j) {
      const uint16_t want = FloatToBFloat16(probes[i + j]);
      ASSERT_EQ(packed[j], want) << "probe " << i + j << " = " << probes[i + j];
      ASSERT_EQ(per_lane[j], want) << "probe " << i + j << " = " << probes[i + j];
    }
  }
}

// The AVX-512 conversions (16 lanes): every 16-bit pattern widened, and probes around every
// 16-bit value (halfway points, NaN payloads, float32 subnormals) narrowed, each bit-identical
// to the scalar conversions.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) __m256i NativeBf16(
    __m512 f) {
  return simd::NarrowBf16x16Native(f);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void CheckAvx512Conversions(bool native_bf16) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<float> probes;
    for (size_t i = 0; i < all.size(); i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&all[i]));
      alignas(64) float wide[16];
      _mm512_store_ps(wide,
                      dtype == DType::kFloat16 ? simd::WidenF16x16(h) : simd::WidenBf16x16(h));
      for (size_t j = 0; j < 16; ++j) {
        const float want =
            dtype == DType::kFloat16 ? HalfToFloat(all[i + j]) : BFloat16ToFloat(all[i + j]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(wide[j])) << DTypeName(dtype) << " " << all[i + j];
        } else {
          ASSERT_EQ(std::memcmp(&wide[j], &want, 4), 0) << DTypeName(dtype) << " " << all[i + j];
        }
        uint32_t bits;
        std::memcpy(&bits, &want, 4);
        for (uint32_t delta :
             {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
          const uint32_t probe_bits = bits + delta;
          float probe;
          std::memcpy(&probe, &probe_bits, 4);
          probes.push_back(probe);
        }
      }
    }
    for (size_t i = 0; i + 16 <= probes.size(); i += 16) {
      const __m512 f = _mm512_loadu_ps(&probes[i]);
      const __m256i h = dtype == DType::kFloat16 ? simd::NarrowF16x16(f)
                        : native_bf16            ? NativeBf16(f)
                                                 : simd::NarrowBf16x16(f);
      alignas(32) uint16_t got[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(got), h);
      for (size_t j = 0; j < 16; ++j) {
        const uint16_t want =
            dtype == DType::kFloat16 ? FloatToHalf(probes[i + j]) : FloatToBFloat16(probes[i + j]);
        ASSERT_EQ(got[j], want) << DTypeName(dtype) << (native_bf16 ? " native" : "") << " probe "
                                << i + j << " = " << probes[i + j];
      }
    }
  }
}

TEST(SimdConvert, Avx512ConversionsAreBitIdenticalToTheScalarConversions) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    GTEST_SKIP() << "no AVX-512 F/BW/VL";
  }
  CheckAvx512Conversions(/*native_bf16=*/false);
  if (simd::HasAvx512Bf16()) CheckAvx512Conversions(/*native_bf16=*/true);
}

TEST(KernelThreads, SetOnOneThreadIsSeenOnAnother) {
  SetKernelThreads(1);
  int seen = 0;
  std::thread([&] { seen = KernelThreads(); }).join();
  EXPECT_EQ(seen, 1);
  SetKernelThreads(0);
  EXPECT_GE(KernelThreads(), 1);
}

}  // namespace
}  // namespace posenc

namespace posenc {
namespace {

TEST(KernelThreadLease, OneCallHoldsThePoolAndSmallCallsNeverTakeIt) {
  SetKernelThreads(2);
  const size_t big = size_t{1} << 20, small = size_t{4} << 10;
  {
    const KernelThreadLease first(big);
    EXPECT_EQ(first.threads(), 2);
    const KernelThreadLease second(big);  // concurrent call: runs on its own thread
    EXPECT_EQ(second.threads(), 1);
    EXPECT_EQ(KernelThreadLease(small).threads(), 1);
  }
  const KernelThreadLease after(big);  // released with `first`
  EXPECT_EQ(after.threads(), 2);
}

}  // namespace
}  // namespace posenc

namespace posenc {
namespace {

// ParallelFor covers [0, n) exactly once, in contiguous chunks, for any thread count; with
// one thread it runs on the caller's thread.
TEST(ParallelFor, CoversTheRangeOnceInContiguousChunks) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 2, 5, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> chunks{0};
      ParallelFor(threads, n, [&](int64_t begin, int64_t end) {
        ASSERT_LT(begin, end);
        chunks++;
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
            << "threads " << threads << " n " << n << " index " << i;
      }
      EXPECT_LE(chunks.load(), std::max(1, threads)) << "threads " << threads << " n " << n;
      if (n == 0) {
        EXPECT_EQ(chunks.load(), 0);
      }
    }
  }
}

// Calls from several threads at once (one owns the kernel team, the others run their own
// chunks), back to back and after the workers have gone to sleep: every call covers its
// range exactly once and returns.
TEST(ParallelFor, ConcurrentAndSleepingCallsEachCoverTheirRange) {
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&bad, c] {
      for (int call = 0; call < 300; ++call) {
        const int64_t n = 1 + (call * 37 + c) % 500;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        ParallelFor(2 + call % 3, n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) bad += h.load() != 1;
        // Now and then past the workers' spin, so the next call wakes them.
        if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ParallelFor, OneThreadRunsOnTheCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran;
  ParallelFor(1, 100, [&](int64_t, int64_t) { ran = std::this_thread::get_id(); });
  EXPECT_EQ(ran, caller);
}

}  // namespace
}  // namespace posenc
