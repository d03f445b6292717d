// posenc-bench's load sections: a real posenc-server end to end against posenc-bench-echo
// (a no-op server on the same gRPC and messages), both child processes: unary and
// streaming calls of both fronts (posenc.v1 Encode/EncodeStream, the Open Inference
// Protocol's ModelInfer/ModelStreamInfer) with sinusoidal payloads of 1 KiB to 48 MiB and
// RoPE decode steps, at concurrency 1, 8 and 64 (64 up to 1 MiB); and Encode by
// shared-memory reference against the same Encode inline and the kernel alone. Cells
// alternate the two sides over rounds and keep each side's best of each figure, so a noisy
// neighbour hurts both alike. With --echo-vs-echo the server side is a second echo.
#pragma once

#include "bench/bench_common.h"

namespace posenc::bench {

// The "e2e" rows.
json RunE2e(const Options& o);
// The "shm" rows.
json RunShm(const Options& o);
// --target: o.calls calls of each selected cell's workload at concurrency 1 (unary calls
// one after another, or one stream) to the server already listening at o.target, posenc's
// or the echo; rows of the calls made. For measuring a server from outside (under
// callgrind or perf: bench/call_breakdown.py).
json DriveTarget(const Options& o);

}  // namespace posenc::bench
