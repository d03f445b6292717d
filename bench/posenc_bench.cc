// posenc-bench: in one run, measures this machine's memory roofline, every posenc kernel as
// a fraction of that roofline at the same buffer size (once per vector ISA the CPU has), and
// posenc-server end to end over loopback as a fraction of a no-op gRPC echo
// (posenc-bench-echo, same messages, same gRPC, also its own process). Prints a table, or
// with --json one JSON document.
//
//   posenc-bench [--json] [--quick] [--kernels-only | --e2e-only] [--threads=N]
//                [--seconds=S] [--rounds=R] [--filter=TEXT] [--isa=avx2|avx512]
//                [--server=PATH] [--echo=PATH] [--echo-vs-echo]
//   posenc-bench --target=HOST:PORT [--calls=N] [--filter=TEXT] [--quick]
//
// --filter keeps the kernel cases whose "name dtype size" contains TEXT, e.g.
// --filter="rope_neox bf16" or --filter=large, and the end-to-end cells whose
// "rpc workload xconcurrency" does, e.g. --filter="EncodeStream 1 MiB x1",
// --filter="ModelInfer rope [1,1,32,128] x8". --isa runs the
// kernels on that ISA only. --rounds (default 3; 1 with --quick) is how many times each
// kernel alternates with its roofline (at least twice; a row's "ratio" is the median of its
// rounds' ratios, listed in "round_ratios" with "ratio_best" and "ratio_spread" beside it,
// "ms" and "gbps" the kernel's best round; the row roofline_self is the roofline's own pass
// as a kernel, an A/A row) and each
// end-to-end cell with the echo, each side keeping each figure at its best (throughput,
// p50, p99).
// --echo-vs-echo runs the end-to-end cells only, with a second posenc-bench-echo in
// posenc-server's place: an A/A run, whose ratios and targets show what the machine's
// run-to-run noise alone gives a server that is exactly the echo.
// --target sends N (default 1000) calls of each selected cell's workload at concurrency 1 to
// a server already running there and prints what it did, nothing else: for measuring the
// server from outside (bench/call_breakdown.py runs it under callgrind and perf).
//
// The parts: roofline.h (the baseline), kernel_cases.h (the kernels per ISA), load.h (end
// to end and shared memory), report.h (targets and tables).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/http_load.h"
#include "bench/kernel_cases.h"
#include "bench/load.h"
#include "bench/report.h"
#include "server/common/flags.h"
#include "server/kernels/threads.h"

namespace posenc::bench {
namespace {

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(stderr,
               "posenc-bench: %s\nusage: posenc-bench [--json] [--quick] [--kernels-only | "
               "--e2e-only] [--threads=N] [--seconds=S] [--rounds=R] [--filter=TEXT] "
               "[--isa=avx2|avx512] [--server=PATH] [--echo=PATH] [--echo-vs-echo]\n"
               "       posenc-bench --target=HOST:PORT [--calls=N] [--filter=TEXT] [--quick]\n",
               problem.c_str());
  std::exit(2);
}

// <dir of this binary>/../<relative>: posenc-bench lives in <build>/bench.
std::string SiblingBinary(const std::string& relative) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return relative;
  std::string dir(self, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../" + relative;
}

// Exits through Usage unless `v` holds a value.
template <typename T>
T OrUsage(absl::StatusOr<T> v) {
  if (!v.ok()) Usage(std::string(v.status().message()));
  return *std::move(v);
}

// The flags, on the one parser (server/common/flags.h).
Options ParseOptions(int argc, char** argv) {
  static const CommandFlags::Options kFlags{
      {"json", "quick", "kernels-only", "e2e-only", "threads", "seconds", "rounds", "filter", "isa",
       "server", "echo", "target", "calls", "echo-vs-echo"},
      {"json", "quick", "kernels-only", "e2e-only", "echo-vs-echo"},
      '-'};
  const CommandFlags f =
      OrUsage(CommandFlags::Parse(std::vector<std::string>(argv + 1, argv + argc), kFlags));
  Options o;
  o.json = OrUsage(f.Bool("json"));
  o.quick = OrUsage(f.Bool("quick"));
  o.e2e = !OrUsage(f.Bool("kernels-only"));
  o.kernels = !OrUsage(f.Bool("e2e-only"));
  o.threads = static_cast<int>(OrUsage(f.IntIn("threads", 0, 1024, 0)));
  o.cell_seconds = OrUsage(f.OptDouble("seconds")).value_or(o.cell_seconds);
  o.rounds = static_cast<int>(std::max<int64_t>(1, OrUsage(f.IntIn("rounds", 0, 1000, o.rounds))));
  o.filter = f.Str("filter");
  o.isa = f.Str("isa");
  o.server_binary = f.Str("server");
  o.echo_binary = f.Str("echo");
  o.target = f.Str("target");
  o.calls = OrUsage(f.IntIn("calls", 1, int64_t{1} << 30, o.calls));
  o.echo_vs_echo = OrUsage(f.Bool("echo-vs-echo"));
  if (o.echo_vs_echo) o.kernels = false;
  if (!o.kernels && !o.e2e) Usage("--kernels-only and --e2e-only exclude each other");
  if (o.quick) {
    o.cell_seconds = std::min(o.cell_seconds, 0.25);
    o.rounds = 1;
  }
  if (o.server_binary.empty()) o.server_binary = SiblingBinary("server/posenc-server");
  if (o.echo_binary.empty()) o.echo_binary = SiblingBinary("bench/posenc-bench-echo");
  o.http_echo_binary = SiblingBinary("bench/posenc-bench-http-echo");
  o.self_binary = SiblingBinary("bench/posenc-bench");
  return o;
}

}  // namespace
}  // namespace posenc::bench

int main(int argc, char** argv) {
  using namespace posenc::bench;
  const Options o = ParseOptions(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (!o.target.empty()) {
    std::printf("%s\n", json{{"drive", DriveTarget(o)}}.dump(2).c_str());
    return 0;
  }
  posenc::SetKernelThreads(o.threads);
  const Clock::time_point start = Clock::now();
  json doc;
  doc["machine"] = MachineInfo();
  doc["quick"] = o.quick;
  doc["echo_vs_echo"] = o.echo_vs_echo;
  if (o.kernels) {
    doc["kernels"] = RunKernelsEveryIsa(o);
  }
  if (o.e2e) {
    doc["e2e"] = RunE2e(o);
    if (!o.echo_vs_echo) {
      doc["shm"] = RunShm(o);
      doc["http"] = RunHttp(o);
    }
  }
  doc["targets"] = Targets(doc);
  doc["seconds"] = SecondsSince(start);
  if (o.json) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    PrintTable(doc);
    std::printf("(%.0f s)\n", doc["seconds"].get<double>());
  }
  return 0;
}
