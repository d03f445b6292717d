// posenc-bench's kernel cases: every posenc kernel at a small and a large size, each against
// the memory roofline taken beside it, once per vector ISA this CPU has (scalar excluded).
// Bytes are the kernel's algorithmic traffic: the tensor read and written once each, plus
// one read of the encoding rows it needs (pe rows, cos/sin rows).
#pragma once

#include "bench/bench_common.h"

namespace posenc::bench {

// The kernel rows ("kernels" in the JSON document), each with its "isa". The CPU's widest
// ISA runs in this process; a narrower one runs in a child posenc-bench (--isa) whose
// oneDNN is limited to it, so its add_onednn rows show oneDNN as on such a CPU.
// o.isa names one ISA only (the child's pass).
json RunKernelsEveryIsa(const Options& o);

}  // namespace posenc::bench
