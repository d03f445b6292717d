// FirstNonFinite on every ISA this CPU has and the scalar loop, for each float dtype,
// against a per-element reference (std::isfinite of the value widened to float32): inf,
// -inf and NaN at every position of lengths that cross the 32- and 256-byte blocks, and the
// largest finite values, which must not count.
#include "server/kernels/finite_kernel.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/kernels/kernel_impl.h"
#include "server/kernels/threads.h"
#include "server/tensor/dtype.h"

namespace posenc {
namespace {

std::string Encoded(DType t, const std::vector<float>& values) {
  std::string out(values.size() * DTypeSize(t), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      const uint16_t h = t == DType::kFloat16 ? FloatToHalf(values[i]) : FloatToBFloat16(values[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

float Largest(DType t) {
  if (t == DType::kFloat16) return 65504.0f;
  if (t == DType::kBFloat16) return BFloat16ToFloat(0x7f7f);
  return std::numeric_limits<float>::max();
}

std::vector<KernelImpl> Implementations() {
  std::vector<KernelImpl> impls = {KernelImpl::kScalar, KernelImpl::kAuto};
  for (KernelImpl isa : CpuVectorIsas()) impls.push_back(isa);
  return impls;
}

TEST(FirstNonFinite, FindsTheFirstInfOrNanAnywhere) {
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (KernelImpl impl : Implementations()) {
      for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 100, 128, 129, 300}) {
        std::vector<float> values(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) values[i] = (i % 3 == 0 ? -1 : 1) * Largest(t);
        const std::string finite = Encoded(t, values);
        ASSERT_EQ(FirstNonFinite(t, finite.data(), n, impl), -1)
            << DTypeName(t) << " " << KernelImplName(impl) << " n " << n;
        for (int64_t at = 0; at < n; ++at) {
          for (float b : bad) {
            std::vector<float> with = values;
            with[at] = b;
            if (at + 2 < n) with[at + 2] = b;  // only the first one counts
            const std::string bytes = Encoded(t, with);
            ASSERT_EQ(FirstNonFinite(t, bytes.data(), n, impl), at)
                << DTypeName(t) << " " << KernelImplName(impl) << " n " << n << " value " << b;
          }
        }
      }
    }
  }
}

// From 256 KiB of work the kernel threads share the pass: the first element still wins when
// each thread's part holds one.
TEST(FirstNonFinite, LargeTensorsOnTheKernelThreads) {
  SetKernelThreads(4);
  const int64_t n = int64_t{1} << 20;  // 4 MiB of float32
  std::vector<float> x(static_cast<size_t>(n), 1.0f);
  for (KernelImpl impl : Implementations()) {
    ASSERT_EQ(FirstNonFinite(DType::kFloat32, x.data(), n, impl), -1);
    for (int64_t at : {int64_t{0}, n / 4 - 1, n / 2 + 3, n - 1}) {
      std::vector<float> with = x;
      with[at] = std::numeric_limits<float>::quiet_NaN();
      with[n - 1] = -std::numeric_limits<float>::infinity();  // in the last part
      ASSERT_EQ(FirstNonFinite(DType::kFloat32, with.data(), n, impl), at) << KernelImplName(impl);
    }
  }
}

// FirstNan: infinities (an attention mask's -inf) are not hits; NaNs of either sign are.
TEST(FirstNan, FindsNanButNotInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (KernelImpl impl : Implementations()) {
      for (int64_t n : {1, 15, 16, 17, 40, 256, 300}) {
        std::vector<float> values(static_cast<size_t>(n), -inf);
        values[0] = inf;
        values[n / 2] = -Largest(t);
        const std::string masked = Encoded(t, values);
        ASSERT_EQ(FirstNan(t, masked.data(), n, impl), -1) << DTypeName(t) << " n " << n;
        for (int64_t at = 0; at < n; ++at) {
          std::vector<float> with = values;
          with[at] = at % 2 ? std::nanf("") : -std::nanf("");
          const std::string bytes = Encoded(t, with);
          ASSERT_EQ(FirstNan(t, bytes.data(), n, impl), at)
              << DTypeName(t) << " " << KernelImplName(impl) << " n " << n;
        }
      }
    }
  }
}

TEST(FirstNonFinite, IntegerDtypesAreNotChecked) {
  const std::vector<int32_t> ids = {0x7f800000, -1};
  EXPECT_EQ(FirstNonFinite(DType::kInt32, ids.data(), 2), -1);
}

}  // namespace
}  // namespace posenc
