// posenc-bench's "http" rows: posenc-server's HTTP/REST binding (binary tensor data, the
// sinusoidal model, fp32) against posenc-bench-http-echo, a no-op server on the same HTTP
// library, both child processes, at 64 KiB, 1 MiB and 48 MiB, concurrency 1 and 8, over
// keep-alive connections. Cells alternate the two sides over rounds and keep each one's
// best, as the gRPC rows do.
#pragma once

#include "bench/bench_common.h"

namespace posenc::bench {

json RunHttp(const Options& o);

}  // namespace posenc::bench
