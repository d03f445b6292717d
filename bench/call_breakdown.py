#!/usr/bin/python3
"""Where a small call's time goes in posenc-server, against posenc-bench-echo.

For one end-to-end cell at concurrency 1 it runs each server twice, driven from outside by
`posenc-bench --target` (one call at a time):
  - under `perf stat -p` (software events): CPU time, context switches and page faults per call;
  - under valgrind's callgrind, counters zeroed after a warm-up and dumped after --calls
    calls: instructions per call in all, and inclusive in each step of the call path.
Instruction counts repeat to within a few percent on a loaded machine; CPU time does not.
What a server runs with time rather than calls is taken off: posenc-server's monitor thread
(every 100 ms) by name, the rest (gRPC's timers) at the rate measured over an idle interval.

  bench/call_breakdown.py [--build=build] [--cell="Encode 16 KiB x1"] [--calls=2000]
                          [--server-arg=--threads=1 ...] [--perf-only] [--json]

Prints a Markdown table (or with --json one JSON document). Needs valgrind and perf;
--perf-only skips callgrind (for large cells, which it would take minutes a call to run)
and needs only perf.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Steps of posenc's call path, as (label, regex over callgrind's function names): each is
# the inclusive count of the matching function (the largest entry, where callgrind lists
# it more than once), so a nested step (the kernel in the handler) is also in its parent's.
STEPS = [
    ("request parse (protobuf; the echo's too)",
     r"GenericDeserialize<grpc::ProtoBufferReader, (posenc::v1::EncodeRequest|"
     r"inference::ModelInferRequest)>"),
    ("response serialise (protobuf; the echo's too)",
     r"GenericSerialize<grpc::ProtoBufferWriter, (posenc::v1::EncodeResponse|"
     r"inference::ModelInferResponse|inference::ModelStreamInferResponse)>"),
    ("request parse (posenc's raw path: ParseWireRequest)", r"posenc::ParseWireRequest\("),
    ("response write (posenc's raw path: wire_format.h's Write*)",
     r"posenc::Write(Encode|Bias|Infer|StreamInfer)Response\("),
    ("call tracking: arrival (CallTracker::Arrive)", r"posenc::CallTracker::Arrive\("),
    ("call tracking: handler's lookup (CallTracker::Find)", r"posenc::CallTracker::Find\("),
    ("call tracking: end (CallTracker::End)", r"posenc::CallTracker::End\("),
    ("log line (CallTracker::LogEnd)", r"posenc::CallTracker::LogEnd\("),
    ("metrics: calls and durations (RecordRequest)", r"ServiceMetrics::RecordRequest\("),
    ("metrics: kernel histogram (RecordKernel)", r"ServiceMetrics::RecordKernel\("),
    ("metrics: bytes counters (AddBytes)", r"ServiceMetrics::AddBytes\("),
    ("metrics: in-flight gauge (InflightAdd)", r"ServiceMetrics::InflightAdd\("),
    ("cost (CostOf)", r"posenc::CostOf\((posenc::v1::EncodeRequest|posenc::v1::BiasRequest)"),
    ("admission (Admission::Admit)", r"posenc::Admission::Admit\("),
    ("work-pool hand-off (WorkPool::Submit)", r"posenc::WorkPool::Submit\("),
    ("late check (StoppedStatus)", r"posenc::StoppedStatus\("),
    ("response size check (CheckResponseSize)", r"posenc::CheckResponseSize<"),
    ("OIP request conversion (ToNativeRequest)", r"posenc::ToNativeRequest\("),
    ("OIP response conversion (ToInferResponse)", r"posenc::ToInferResponse\("),
    ("handler (RequestHandlers::Encode, all of it)", r"posenc::RequestHandlers::Encode\("),
    ("  scheme (ApplySinusoidal / ApplyRope, with the kernel)",
     r"posenc::(ApplySinusoidal|ApplyRope)\("),
    ("  table lookup (TableCache::GetOrCompute)", r"posenc::TableCache::GetOrCompute\("),
    ("  kernel (AddEncodingInPlace / RopeRotateInPlace)",
     r"posenc::(AddEncodingInPlace|RopeRotateInPlace)\("),
    ("stream reactor (OrderedStreamReactor::OnReadDone)",
     r"OrderedStreamReactor<.*>::OnReadDone\("),
    ("monitor thread (PosencServer::Monitor; ticks every 100 ms, not per call)",
     r"posenc::PosencServer::Monitor\("),
]
MONITOR_PATTERN = STEPS[-1][1]
# The call's own path, repeatable to about 1 %: gRPC's callbacks for the call (the handler's
# start with its parse, interceptors and Finish; each completion after) and the work pool's
# threads. The transport (frames, polling, timers) is left out: it is the same bytes for both
# servers, and its count moves with timing by 10 % and more between runs.
CALL_PATH = [r"CallbackCallTag::StaticRun\(", r"CallbackWithSuccessTag::StaticRun\(",
             r"_State_impl<.*posenc::WorkPool::Queue.*>::_M_run\("]


def start_line(proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening grpc=(\S+)", line)
        if m:
            return m.group(1)
    raise SystemExit(f"server did not start: {proc.args}")


def drive(bench, address, cell, calls):
    out = subprocess.run([bench, f"--target={address}", f"--calls={calls}",
                          f"--filter={cell}"], check=True, capture_output=True, text=True)
    rows = json.loads(out.stdout)["drive"]
    if len(rows) != 1:
        raise SystemExit(f"--filter={cell!r} selects {len(rows)} cells; name one")
    return rows[0]


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def perf_pass(cmd, bench, cell, calls):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        address = start_line(proc)
        drive(bench, address, cell, max(100, calls // 10))
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "task-clock,context-switches,page-faults",
                                 "-p", str(proc.pid)], stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        row = drive(bench, address, cell, calls)
        perf.send_signal(signal.SIGINT)
        _, err = perf.communicate()
    finally:
        stop(proc)
    values = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            values[parts[2]] = float(parts[0])
    return {"cpu_us_per_call": values.get("task-clock", 0) * 1e3 / calls,
            "context_switches_per_call": values.get("context-switches", 0) / calls,
            "page_faults_per_call": values.get("page-faults", 0) / calls,
            "client_p50_us": row["p50_ms"] * 1e3}


def parse_annotate(text):
    """[(function name, inclusive Ir)] from callgrind_annotate --inclusive=yes."""
    functions = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if m:
            functions.append((m.group(2), int(m.group(1).replace(",", ""))))
    return functions


def dump_total(dump):
    with open(dump) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def largest(functions, pattern):
    rx = re.compile(pattern)
    return max([v for name, v in functions if rx.search(name) and "'" not in name] or [0])


def monitor_total(functions):
    rx = re.compile(MONITOR_PATTERN)
    return max([v for name, v in functions if rx.search(name) and "'" not in name] or [0])


def callgrind_pass(cmd, bench, cell, calls, workdir, name, idle_seconds=3.0):
    """Instructions per call, and the step list, net of what the server runs while idle
    (the monitor's ticks, gRPC's timers): those run with time, and callgrind slows time."""
    out = os.path.join(workdir, f"{name}.cg")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                             "--vgdb=yes"] + cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    control = lambda flag: subprocess.run(["callgrind_control", flag, str(proc.pid)],
                                          check=True, capture_output=True)
    try:
        address = start_line(proc, timeout=600)
        drive(bench, address, cell, 200)
        control("-z")
        t = time.time()
        time.sleep(idle_seconds)
        control("-d")  # part 1: idle
        idle_seconds = time.time() - t
        control("-z")
        t = time.time()
        drive(bench, address, cell, calls)
        control("-d")  # part 2: the calls
        busy_seconds = time.time() - t
    finally:
        stop(proc)
    idle, busy = out + ".1", out + ".2"
    annotate = lambda dump: parse_annotate(subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump], check=True,
        capture_output=True, text=True).stdout)
    # The monitor's ticks cost more with a client connected (channelz lists its socket), so
    # they are taken off both parts by name; the rest of the idle rate by time.
    idle_functions, functions = annotate(idle), annotate(busy)
    idle_rate = (dump_total(idle) - monitor_total(idle_functions)) / idle_seconds
    per_call = (dump_total(busy) - monitor_total(functions) - idle_rate * busy_seconds) / calls
    call_path = sum(largest(functions, p) for p in CALL_PATH) / calls
    return per_call, call_path, functions


def step_counts(functions, calls):
    steps = {}
    for label, pattern in STEPS:
        rx = re.compile(pattern)
        values = [v for name, v in functions if rx.search(name) and "'" not in name]
        steps[label] = (max(values) if values else 0) / calls
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cell", default="Encode 16 KiB x1")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--perf-only", action="store_true",
                    help="only the perf stat pass: CPU time, context switches, page faults")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", help="keep the callgrind dumps in this directory")
    a = ap.parse_args()
    tools = ("perf",) if a.perf_only else ("valgrind", "callgrind_control", "callgrind_annotate",
                                             "perf")
    for tool in tools:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed")
    bench = os.path.join(a.build, "bench/posenc-bench")
    servers = {
        "posenc": [os.path.join(a.build, "server/posenc-server"), "--listen=127.0.0.1:0",
                   "--metrics_listen=", "--http_listen=", "--max_concurrent_calls=1024"] + a.server_arg,
        "echo": [os.path.join(a.build, "bench/posenc-bench-echo"), "--listen=127.0.0.1:0"],
    }
    doc = {"cell": a.cell, "calls": a.calls, "servers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = a.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        for name, cmd in servers.items():
            result = perf_pass(cmd, bench, a.cell, a.calls)
            if a.perf_only:
                doc["servers"][name] = result
                continue
            per_call, call_path, functions = callgrind_pass(cmd, bench, a.cell, a.calls,
                                                            workdir, name)
            result["instructions_per_call"] = per_call
            result["call_path_instructions_per_call"] = call_path
            result["steps"] = step_counts(functions, a.calls)
            doc["servers"][name] = result
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    p, e = doc["servers"]["posenc"], doc["servers"]["echo"]
    print(f"cell: {a.cell}, {a.calls} calls, one at a time\n")
    print("| per call | posenc-server | posenc-bench-echo | posenc's own |")
    print("| --- | ---: | ---: | ---: |")
    if not a.perf_only:
        print_instructions(p, e)
    print_perf(p, e)
    if a.perf_only:
        return
    print("\n| step (inclusive) | posenc-server | posenc-bench-echo |")
    print("| --- | ---: | ---: |")
    for label, value in p["steps"].items():
        print(f"| {label} | {value:,.0f} | {e['steps'][label]:,.0f} |")


def print_instructions(p, e):
    print(f"| instructions in the call path (gRPC callbacks, pool) | "
          f"{p['call_path_instructions_per_call']:,.0f} | "
          f"{e['call_path_instructions_per_call']:,.0f} | "
          f"{p['call_path_instructions_per_call'] - e['call_path_instructions_per_call']:,.0f} |")
    print(f"| instructions in all threads, net of idle (+-15 %) | {p['instructions_per_call']:,.0f} | "
          f"{e['instructions_per_call']:,.0f} | "
          f"{p['instructions_per_call'] - e['instructions_per_call']:,.0f} |")


def print_perf(p, e):
    print(f"| CPU time (us, perf task-clock) | {p['cpu_us_per_call']:.1f} | "
          f"{e['cpu_us_per_call']:.1f} | {p['cpu_us_per_call'] - e['cpu_us_per_call']:.1f} |")
    print(f"| context switches | {p['context_switches_per_call']:.2f} | "
          f"{e['context_switches_per_call']:.2f} | "
          f"{p['context_switches_per_call'] - e['context_switches_per_call']:.2f} |")
    print(f"| page faults | {p['page_faults_per_call']:.2f} | "
          f"{e['page_faults_per_call']:.2f} | "
          f"{p['page_faults_per_call'] - e['page_faults_per_call']:.2f} |")
    print(f"| client p50 (us) | {p['client_p50_us']:.1f} | {e['client_p50_us']:.1f} | "
          f"{p['client_p50_us'] - e['client_p50_us']:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
