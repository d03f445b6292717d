// posenc-bench's report: the machine, the targets each row is judged on, and the table.
#pragma once

#include "bench/bench_common.h"

namespace posenc::bench {

// CPU model, cores, kernel threads, ISAs and the load average at start.
json MachineInfo();
// The targets, each with the measured value it was judged on.
json Targets(const json& doc);
// The document as tables on stdout.
void PrintTable(const json& doc);

}  // namespace posenc::bench
