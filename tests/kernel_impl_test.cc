// KernelImpl's names and parser, the ISA helpers, the process-wide override and the parsing
// of posenc-server's --kernel / POSENC_KERNEL value (the server's refusal at start is in
// server_flags_test.py).
#include "server/kernels/kernel_impl.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

constexpr KernelImpl kAll[] = {KernelImpl::kAuto, KernelImpl::kScalar, KernelImpl::kAvx2,
                               KernelImpl::kAvx512, KernelImpl::kOneDnn};

TEST(KernelImpl, NamesRoundTripAndNothingElseParses) {
  const char* names[] = {"auto", "scalar", "avx2", "avx512", "onednn"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_STREQ(KernelImplName(kAll[i]), names[i]);
    EXPECT_EQ(ParseKernelImpl(names[i]), kAll[i]) << names[i];
  }
  for (const char* bad : {"", "loop", "vector", "AVX2", "avx2 ", "avx-512", "oneDNN"}) {
    EXPECT_EQ(ParseKernelImpl(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(KernelImpl, IsaHelpersFollowTheCpu) {
  EXPECT_TRUE(CpuSupports(KernelImpl::kAuto));
  EXPECT_TRUE(CpuSupports(KernelImpl::kScalar));
  EXPECT_TRUE(CpuSupports(KernelImpl::kOneDnn));
  // AVX-512 implies AVX2 here (posenc's AVX-512 code also uses AVX2 instructions).
  EXPECT_TRUE(!CpuSupports(KernelImpl::kAvx512) || CpuSupports(KernelImpl::kAvx2));
  const KernelImpl best = CpuBestIsa();
  EXPECT_TRUE(CpuSupports(best));
  EXPECT_EQ(CpuIsaAtMost(KernelImpl::kScalar), KernelImpl::kScalar);
  EXPECT_EQ(CpuIsaAtMost(KernelImpl::kAvx512), best);
  EXPECT_EQ(CpuIsaAtMost(KernelImpl::kAvx2),
            CpuSupports(KernelImpl::kAvx2) ? KernelImpl::kAvx2 : KernelImpl::kScalar);
  EXPECT_EQ(NarrowerIsa(KernelImpl::kAvx512, KernelImpl::kAvx2), KernelImpl::kAvx2);
  EXPECT_EQ(NarrowerIsa(KernelImpl::kScalar, KernelImpl::kAvx512), KernelImpl::kScalar);
  std::vector<KernelImpl> vector_isas;
  for (KernelImpl isa : {KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    if (CpuSupports(isa)) vector_isas.push_back(isa);
  }
  EXPECT_EQ(CpuVectorIsas(), vector_isas);
}

TEST(KernelImpl, OverrideSetsTheCeilingAndScopesRestoreIt) {
  ASSERT_EQ(KernelOverride(), KernelImpl::kAuto);
  EXPECT_EQ(AutoIsaCeiling(), CpuBestIsa());
  {
    const ScopedKernelOverride scalar(KernelImpl::kScalar);
    EXPECT_EQ(KernelOverride(), KernelImpl::kScalar);
    EXPECT_EQ(AutoIsaCeiling(), KernelImpl::kScalar);
    {
      const ScopedKernelOverride onednn(KernelImpl::kOneDnn);
      EXPECT_EQ(KernelOverride(), KernelImpl::kOneDnn);
      EXPECT_EQ(AutoIsaCeiling(), CpuBestIsa());  // oneDNN is not an ISA ceiling
    }
    EXPECT_EQ(KernelOverride(), KernelImpl::kScalar);
  }
  EXPECT_EQ(KernelOverride(), KernelImpl::kAuto);
  for (KernelImpl isa : CpuVectorIsas()) {
    const ScopedKernelOverride forced(isa);
    EXPECT_EQ(AutoIsaCeiling(), isa);
    EXPECT_EQ(IsaBoundFor(KernelImpl::kAuto), isa);
    // A named implementation does not follow the override.
    EXPECT_EQ(IsaBoundFor(KernelImpl::kScalar), KernelImpl::kScalar);
    EXPECT_EQ(IsaBoundFor(KernelImpl::kOneDnn), CpuBestIsa());
    EXPECT_EQ(IsaBoundFor(KernelImpl::kAvx512), CpuBestIsa());
  }
}

TEST(ParseKernelOverride, AcceptsEveryNameThisCpuRuns) {
  for (KernelImpl impl : kAll) {
    const absl::StatusOr<KernelImpl> parsed = ParseKernelOverride(KernelImplName(impl));
    if (CpuSupports(impl)) {
      ASSERT_THAT(parsed.status(), IsOk()) << KernelImplName(impl);
      EXPECT_EQ(*parsed, impl);
    } else {
      // An ISA this CPU lacks is refused, naming what it needs and what the CPU has.
      EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("an instruction set this CPU has")))
          << KernelImplName(impl);
      EXPECT_THAT(std::string(parsed.status().message()),
                  HasSubstr(std::string("widest here: ") + KernelImplName(CpuBestIsa())));
    }
  }
  // An empty variable is no override.
  const absl::StatusOr<KernelImpl> empty = ParseKernelOverride("");
  ASSERT_THAT(empty.status(), IsOk());
  EXPECT_EQ(*empty, KernelImpl::kAuto);
}

TEST(ParseKernelOverride, RefusesOtherValuesListingTheChoices) {
  for (const char* bad : {"loop", "vector", "AVX2", "avx1024", " scalar", "1"}) {
    EXPECT_THAT(ParseKernelOverride(bad).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("one of auto, scalar, avx2, avx512, onednn")))
        << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace posenc
