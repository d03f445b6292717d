#include "server/kernels/kernel_impl.h"

#include <cpuid.h>

#include <atomic>
#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace posenc {
namespace {

constexpr KernelImpl kAll[] = {KernelImpl::kAuto, KernelImpl::kScalar, KernelImpl::kAvx2,
                               KernelImpl::kAvx512, KernelImpl::kOneDnn};

// kAuto when no override is set.
std::atomic<KernelImpl> kernel_override{KernelImpl::kAuto};

// The width order of the ISAs: scalar < AVX2 < AVX-512.
int IsaRank(KernelImpl isa) {
  switch (isa) {
    case KernelImpl::kAvx2: return 1;
    case KernelImpl::kAvx512: return 2;
    default: return 0;
  }
}

bool IsIsa(KernelImpl impl) {
  return impl == KernelImpl::kScalar || impl == KernelImpl::kAvx2 || impl == KernelImpl::kAvx512;
}

}  // namespace

const char* KernelImplName(KernelImpl impl) {
  switch (impl) {
    case KernelImpl::kAuto: return "auto";
    case KernelImpl::kScalar: return "scalar";
    case KernelImpl::kAvx2: return "avx2";
    case KernelImpl::kAvx512: return "avx512";
    case KernelImpl::kOneDnn: return "onednn";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, KernelImpl impl) { return os << KernelImplName(impl); }

std::optional<KernelImpl> ParseKernelImpl(std::string_view name) {
  for (KernelImpl impl : kAll) {
    if (name == KernelImplName(impl)) return impl;
  }
  return std::nullopt;
}

bool CpuSupports(KernelImpl impl) {
  // F16C from CPUID leaf 1: clang 14's __builtin_cpu_supports does not know "f16c".
  static const bool avx2 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  static const bool avx512 =
      avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  switch (impl) {
    case KernelImpl::kAvx2: return avx2;
    case KernelImpl::kAvx512: return avx512;
    case KernelImpl::kAuto:
    case KernelImpl::kScalar:
    case KernelImpl::kOneDnn: return true;
  }
  return false;
}

KernelImpl CpuBestIsa() {
  if (CpuSupports(KernelImpl::kAvx512)) return KernelImpl::kAvx512;
  if (CpuSupports(KernelImpl::kAvx2)) return KernelImpl::kAvx2;
  return KernelImpl::kScalar;
}

KernelImpl CpuIsaAtMost(KernelImpl isa) {
  for (KernelImpl wider : {KernelImpl::kAvx512, KernelImpl::kAvx2}) {
    if (IsaRank(wider) <= IsaRank(isa) && CpuSupports(wider)) return wider;
  }
  return KernelImpl::kScalar;
}

KernelImpl NarrowerIsa(KernelImpl a, KernelImpl b) { return IsaRank(a) <= IsaRank(b) ? a : b; }

std::vector<KernelImpl> CpuVectorIsas() {
  std::vector<KernelImpl> isas;
  for (KernelImpl isa : {KernelImpl::kAvx2, KernelImpl::kAvx512}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

void SetKernelOverride(KernelImpl impl) { kernel_override.store(impl, std::memory_order_relaxed); }

KernelImpl KernelOverride() { return kernel_override.load(std::memory_order_relaxed); }

KernelImpl AutoIsaCeiling() {
  const KernelImpl forced = KernelOverride();
  return IsIsa(forced) ? forced : CpuBestIsa();
}

KernelImpl IsaBoundFor(KernelImpl implementation) {
  switch (implementation) {
    case KernelImpl::kAuto: return AutoIsaCeiling();
    case KernelImpl::kOneDnn: return CpuBestIsa();
    default: return CpuIsaAtMost(implementation);
  }
}

absl::StatusOr<KernelImpl> ParseKernelOverride(std::string_view value) {
  if (value.empty()) return KernelImpl::kAuto;
  const std::optional<KernelImpl> impl = ParseKernelImpl(value);
  if (!impl) {
    return absl::InvalidArgumentError("one of auto, scalar, avx2, avx512, onednn");
  }
  if (!CpuSupports(*impl)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an instruction set this CPU has (", KernelImplName(*impl), " needs ",
                     *impl == KernelImpl::kAvx2 ? "AVX2, FMA and F16C" : "AVX-512 F, BW, VL and DQ",
                     "; widest here: ", KernelImplName(CpuBestIsa()), ")"));
  }
  return *impl;
}

}  // namespace posenc
