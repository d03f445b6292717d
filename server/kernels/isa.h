// Which x86-64 instruction set the kernels use, and a process-wide switch that forces one.
// Every hand-written kernel (the add rows, RoPE, the bias adds, the 16-bit conversions
// they call) asks IsaOverride() when its caller leaves the choice open, so forcing AVX2 on
// a CPU with AVX-512 runs the whole path as an AVX2-only CPU would. Thread-safe (an atomic);
// meant to be set by benchmarks and tests between kernel calls, not while calls run.
//
//   ScopedIsaOverride avx2(Isa::kAvx2);   // this scope: AVX2 rows, AVX2 RoPE, AVX2 biases
//   AddEncodingInPlace(x, pe, 1, 1);
#pragma once

#include <optional>
#include <vector>

namespace posenc {

// kAvx2: AVX2, FMA and F16C. kAvx512: AVX-512 F, BW, VL and DQ (bfloat16 rounding with
// VCVTNE2PS2BF16 also needs AVX512_BF16, checked where it is used).
enum class Isa { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512".
const char* IsaName(Isa isa);
// Parses IsaName's spelling; nullopt for anything else.
std::optional<Isa> ParseIsa(const char* name);

// Whether this CPU can run `isa` (kScalar: always).
bool CpuHasIsa(Isa isa);
// The widest ISA this CPU has.
Isa CpuBestIsa();
// The vector ISAs this CPU has, narrowest first: {avx2}, {avx2, avx512}, or {} on a CPU
// without AVX2. Benchmarks and bit-identity tests run each.
std::vector<Isa> CpuVectorIsas();

// Makes every kernel whose caller does not name an implementation run as it would on a CPU
// whose widest ISA is `isa`: each takes its default among the ISAs up to `isa` (nullopt:
// the defaults for this CPU again). So kScalar is the scalar code everywhere, kAvx2 the
// AVX2 code everywhere, and kAvx512 what an AVX-512 CPU runs, which for some kernels is
// still AVX2 code (float32 adds and bias adds, float32 RoPE on AMD). Overrides the
// POSENC_ADD_IMPL and POSENC_ROPE_ISA environment pins. REQUIRES: CpuHasIsa(*isa).
void SetIsaOverride(std::optional<Isa> isa);
std::optional<Isa> IsaOverride();

// SetIsaOverride for a scope; restores the previous override on destruction.
class ScopedIsaOverride {
 public:
  explicit ScopedIsaOverride(std::optional<Isa> isa) : previous_(IsaOverride()) {
    SetIsaOverride(isa);
  }
  ~ScopedIsaOverride() { SetIsaOverride(previous_); }
  ScopedIsaOverride(const ScopedIsaOverride&) = delete;
  ScopedIsaOverride& operator=(const ScopedIsaOverride&) = delete;

 private:
  std::optional<Isa> previous_;
};

}  // namespace posenc
