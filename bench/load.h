// posenc-bench's load sections: a real posenc-server end to end against posenc-bench-echo
// (a no-op server on the same gRPC and messages), both child processes, over unary and
// streaming calls of 64 KiB to 48 MiB at concurrency 1 and 8; and Encode by shared-memory
// reference against the same Encode inline and the kernel alone. Cells alternate the two
// sides over rounds and keep each one's best, so a noisy neighbour hurts both alike.
#pragma once

#include "bench/bench_common.h"

namespace posenc::bench {

// The "e2e" rows.
json RunE2e(const Options& o);
// The "shm" rows.
json RunShm(const Options& o);

}  // namespace posenc::bench
