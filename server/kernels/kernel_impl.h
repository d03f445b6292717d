// Which code a kernel runs: one enum for every hand-written kernel (the add and multiply
// rows, the conversions and CONCAT, RoPE, the bias adds), the CPU's instruction sets in its
// terms, and the process-wide override that forces one.
//
// The add, multiply, convert, CONCAT, RoPE and bias-add kernels each take an optional
// `implementation` (default kAuto); the add and the conversions report what ran on the
// calling thread (LastAddImplementation, LastConvertImplementation). Every kernel resolves
// a request by the same rules:
//   kAuto    the kernel's default among the ISAs up to the ceiling: KernelOverride()'s ISA
//            when one is set, else this CPU's widest (CpuBestIsa). Defaults differ per
//            kernel and dtype (float32 adds take AVX2 rows even where AVX-512 is present);
//            each kernel's header says which. With the override kOneDnn, the kernels that
//            have oneDNN code run it, the others their default for this CPU.
//   kScalar, kAvx2, kAvx512
//            that ISA's code, whatever the override. Where the kernel has no code of that
//            ISA for the dtype it runs the next narrower code it has (the conversions have
//            no AVX-512 code: AVX2's); where the CPU lacks the ISA, the widest ISA below it
//            that the CPU has (CpuIsaAtMost), so a request never faults.
//   kOneDnn  oneDNN's primitive where the kernel has one (add, convert, concat) and oneDNN
//            has a JIT kernel for the dtype on this CPU; otherwise what kAuto runs, with
//            the ceiling at this CPU's widest ISA.
// Forcing kAvx2 on a CPU with AVX-512 thus runs every kernel's path as an AVX2-only CPU
// would; tests and posenc-bench use ScopedKernelOverride for that.
//
//   ScopedKernelOverride avx2(KernelImpl::kAvx2);  // this scope: AVX2 rows, RoPE, biases
//   AddEncodingInPlace(x, pe, 1, 1);
#pragma once

#include <iosfwd>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace posenc {

// kAvx2: AVX2, FMA and F16C. kAvx512: AVX-512 F, BW, VL and DQ besides (bfloat16 rounding
// with VCVTNE2PS2BF16 also needs AVX512_BF16, checked where it is used). kOneDnn: oneDNN's
// primitives, at the ISA oneDNN picks for itself (DNNL_MAX_CPU_ISA caps it).
enum class KernelImpl { kAuto, kScalar, kAvx2, kAvx512, kOneDnn };

// "auto", "scalar", "avx2", "avx512", "onednn".
const char* KernelImplName(KernelImpl impl);
// Writes KernelImplName (for test messages).
std::ostream& operator<<(std::ostream& os, KernelImpl impl);
// Parses KernelImplName's spelling (exactly); nullopt for anything else.
std::optional<KernelImpl> ParseKernelImpl(std::string_view name);

// Whether this CPU can run `impl`: kAuto, kScalar and kOneDnn always (oneDNN falls back
// where it has no JIT kernel, as above).
bool CpuSupports(KernelImpl impl);
// The widest ISA this CPU has: kAvx512, kAvx2 or kScalar.
KernelImpl CpuBestIsa();
// The widest ISA at most `isa` (kScalar, kAvx2 or kAvx512) that this CPU has.
KernelImpl CpuIsaAtMost(KernelImpl isa);
// The narrower of two ISAs (kScalar, kAvx2 or kAvx512).
KernelImpl NarrowerIsa(KernelImpl a, KernelImpl b);
// The vector ISAs this CPU has, narrowest first: {avx2}, {avx2, avx512}, or {} on a CPU
// without AVX2. Benchmarks and bit-identity tests run each.
std::vector<KernelImpl> CpuVectorIsas();

// Makes every kernel called with kAuto run as on a CPU whose widest ISA is `impl` (kScalar,
// kAvx2, kAvx512), or with oneDNN where the kernel has it (kOneDnn); kAuto removes the
// override. Process-wide and thread-safe (an atomic); set once at start (posenc-server's
// --kernel, environment POSENC_KERNEL) or by tests and benchmarks between kernel calls, not
// while calls run. REQUIRES: CpuSupports(impl).
void SetKernelOverride(KernelImpl impl);
// The override in force, kAuto when none.
KernelImpl KernelOverride();
// The widest ISA kAuto may use: the override's ISA, else CpuBestIsa() (also under the
// override kOneDnn).
KernelImpl AutoIsaCeiling();

// The widest ISA a kernel without oneDNN code may run for `implementation`: an ISA itself,
// as far as the CPU has it (CpuIsaAtMost); kAuto AutoIsaCeiling(); kOneDnn CpuBestIsa().
// The kernel then runs that ISA's code, or for kAuto its default up to it.
KernelImpl IsaBoundFor(KernelImpl implementation);

// The override a value of posenc-server's --kernel flag (or its environment variable
// POSENC_KERNEL) asks for: a KernelImplName spelling, empty meaning "auto". INVALID_ARGUMENT
// for any other value or an ISA this CPU lacks; the message says what the value must be
// ("one of auto, scalar, avx2, avx512, onednn", or "an instruction set this CPU has ..."),
// for the caller to put after the flag's name and value (CommandFlags::Bad).
absl::StatusOr<KernelImpl> ParseKernelOverride(std::string_view value);

// SetKernelOverride for a scope; restores the previous override on destruction.
class ScopedKernelOverride {
 public:
  explicit ScopedKernelOverride(KernelImpl impl) : previous_(KernelOverride()) {
    SetKernelOverride(impl);
  }
  ~ScopedKernelOverride() { SetKernelOverride(previous_); }
  ScopedKernelOverride(const ScopedKernelOverride&) = delete;
  ScopedKernelOverride& operator=(const ScopedKernelOverride&) = delete;

 private:
  KernelImpl previous_;
};

}  // namespace posenc
