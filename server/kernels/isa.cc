#include "server/kernels/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstring>

namespace posenc {
namespace {

// -1: no override; else static_cast<int>(Isa).
std::atomic<int> isa_override{-1};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> ParseIsa(const char* name) {
  if (name == nullptr) return std::nullopt;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(name, IsaName(isa)) == 0) return isa;
  }
  return std::nullopt;
}

bool CpuHasIsa(Isa isa) {
  // F16C from CPUID leaf 1: clang 14's __builtin_cpu_supports does not know "f16c".
  static const bool avx2 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq");
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
  }
  return false;
}

Isa CpuBestIsa() {
  if (CpuHasIsa(Isa::kAvx512)) return Isa::kAvx512;
  if (CpuHasIsa(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

std::vector<Isa> CpuVectorIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (CpuHasIsa(isa)) isas.push_back(isa);
  }
  return isas;
}

void SetIsaOverride(std::optional<Isa> isa) {
  isa_override.store(isa ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

std::optional<Isa> IsaOverride() {
  const int v = isa_override.load(std::memory_order_relaxed);
  if (v < 0) return std::nullopt;
  return static_cast<Isa>(v);
}

}  // namespace posenc
