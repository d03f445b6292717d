#!/usr/bin/python3
"""Hostile clients against the HTTP front of a real posenc-server (raw sockets, loopback).

Each attack runs while a well-behaved client makes a small HTTP infer and a small gRPC infer;
after each, the server must be alive, its RSS within --max_inflight_bytes + 20 %, and the
good client answered (200 / OK):

- 1000 idle connections and 200 trickling a header byte every 0.5 s;
- bodies that declare 64 MiB and send nothing (32 of them), stalled chunked bodies (16);
- a refusal (413 for a declared 1 GiB) answered and the connection closed at once;
- 40 clients pipelining 50 requests each without reading;
- a parameter nested 1000 levels deep in each position, and one 10^6 deep (400);
- a 64 MiB JSON body answered within the budget (peak RSS), and one whose parse (2x its
  JSON) and body cannot fit --max_inflight_bytes together (413);
- four clients that do not read 90 MB JSON answers: admitted one by one (429 for the
  rest), within the budget (peak RSS); a JSON answer that cannot fit beside its call (413);
- /metrics with 100 idle and trickling sockets open: a scrape under 1 s.

Usage: http_hostile_test.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BUILD, SRC = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="posenc_http_hostile_")
BUDGET_MIB = 256
FAILURES = []
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
from oip_test_support import PosencServer, inference_stubs  # noqa: E402

GOOD_BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 2],
                                    "data": [0, 0]}]}).encode()


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def sanitized_build(build):
    """Whether `build` was configured with POSENC_SANITIZE (scripts/sanitize.sh)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return any(line.strip() == "POSENC_SANITIZE:BOOL=ON" for line in f)
    except OSError:
        return False


# ASan's quarantine keeps freed memory resident (up to 256 MiB) and its redzones pad every
# allocation, so resident memory is judged in the normal build only; the sanitized run
# checks every answer and that the server survives and leaks nothing.
RSS_JUDGED = not sanitized_build(BUILD)


def check_rss(mib, what):
    if RSS_JUDGED:
        check(mib < BUDGET_MIB * 1.2, what)


STUBS = []


def load_stubs():
    STUBS[:] = inference_stubs(SRC, WORK)
    return tuple(STUBS)


def pb_grpc_stub(server):
    import grpc
    return STUBS[1].GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % server.grpc))


def Server(*flags):  # noqa: N802
    return PosencServer(BUILD, WORK, "--max_inflight_bytes=%d" % (BUDGET_MIB << 20), *flags)


def http_infer(port, timeout=3):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(GOOD_BODY) + GOOD_BODY)
        head, body = read_response(s)
        return head, body
    finally:
        s.close()


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data, b""
        data += chunk
    head, _, first = data.partition(b"\r\n\r\n")
    rest = bytearray(first)  # appended in place: a 64 MiB answer in linear time
    m = re.search(rb"Content-Length: (\d+)", head, re.I)
    while m and len(rest) < int(m.group(1)):
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        rest += chunk
    return head, bytes(rest)


def well_behaved(server, stub, pb, what):
    """The server alive, within its budget, and a good client answered on both protocols."""
    check(server.proc.poll() is None, "%s: the server died (%s)" % (what, server.proc.poll()))
    if server.proc.poll() is not None:
        return
    try:
        head, body = http_infer(server.http)
        check(head.startswith(b"HTTP/1.1 200"), "%s: good HTTP infer got %r" % (what, head[:40]))
    except OSError as e:
        check(False, "%s: good HTTP infer failed: %s" % (what, e))
    req = pb.ModelInferRequest(model_name="sinusoidal")
    req.inputs.add(name="input", datatype="FP32", shape=[1, 1, 2])
    req.raw_input_contents.append(b"\0" * 8)
    try:
        stub.ModelInfer(req, timeout=3)
    except Exception as e:  # noqa: BLE001
        check(False, "%s: good gRPC infer failed: %s" % (what, e))
    rss = server.rss_mib()
    check_rss(rss, "%s: RSS %.0f MiB over the budget + 20 %%" % (what, rss))


def open_many(port, n):
    out = []
    for _ in range(n):
        out.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return out


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def test_idle_and_trickling(server, stub, pb):
    idle = open_many(server.http, 1000)
    trickle = open_many(server.http, 200)
    for s in trickle:
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
    for _ in range(3):
        for s in trickle:
            try:
                s.sendall(b"X")
            except OSError:
                pass
        well_behaved(server, stub, pb, "1000 idle + 200 trickling")
        time.sleep(0.5)
    close_all(idle + trickle)


def test_absent_bodies(server, stub, pb):
    socks = open_many(server.http, 32)
    for s in socks:
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 67108864\r\n\r\n{")
    chunked = open_many(server.http, 16)
    for s in chunked:
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"inputs\": [  ")
    time.sleep(0.3)
    for _ in range(5):
        well_behaved(server, stub, pb, "32 declared-but-absent and 16 stalled chunked bodies")
    close_all(socks + chunked)


def test_refusal_closes(server):
    s = socket.create_connection(("127.0.0.1", server.http), timeout=5)
    start = time.monotonic()
    s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 1073741824\r\n\r\n")
    head, _ = read_response(s)
    try:
        rest = s.recv(100)
    except OSError:
        rest = b""
    check(head.startswith(b"HTTP/1.1 413") and b"Retry-After" not in head and rest == b"" and
          time.monotonic() - start < 1, "a 413 closes at once: %r %r" % (head[:80], rest))
    s.close()


def test_pipelining(server, stub, pb):
    one = (b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: %d\r\n\r\n" % len(GOOD_BODY) + GOOD_BODY)
    socks = open_many(server.http, 40)
    for s in socks:
        s.setblocking(False)
        try:
            s.send(one * 50)
        except OSError:
            pass
    time.sleep(0.3)
    for _ in range(3):
        well_behaved(server, stub, pb, "40 clients pipelining without reading")
    close_all(socks)


def test_nested_parameters(server, stub, pb):
    deep = "[" * 1000 + "]" * 1000
    bodies = [
        '{"parameters": {"x": %s}, "inputs": []}' % deep,
        '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1,1,2], "data": [0,0],'
        ' "parameters": {"x": %s}}]}' % deep,
        '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1,1,2], "data": [0,0]}],'
        ' "outputs": [{"name": "output", "parameters": {"x": %s}}]}' % deep,
    ]
    for i, text in enumerate(bodies):
        body = text.encode()
        s = socket.create_connection(("127.0.0.1", server.http), timeout=5)
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        try:
            head, body = read_response(s)
        except OSError:
            head, body = b"", b""
        s.close()
        check(head.startswith(b"HTTP/1.1 400") and b"nested deeper" in body,
              "nested parameter %d: %r %r" % (i, head[:40], body[:120]))
        well_behaved(server, stub, pb, "a parameter nested 1000 deep (%d)" % i)
    # A million levels (2 MB): refused while parsing, before anything walks the value.
    deep = b'{"parameters": {"x": ' + b"[" * 1000000 + b"]" * 1000000 + b'}, "inputs": []}'
    head, body = post(server.http, deep)
    check(head.startswith(b"HTTP/1.1 400") and b"nested deeper" in body,
          "a parameter nested 10^6 deep: %r %r" % (head[:40], body[:120]))
    well_behaved(server, stub, pb, "a parameter nested 10^6 deep")


def post(port, body, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return read_response(s)
    finally:
        s.close()


def vm_mib(server, field):
    with open("/proc/%d/status" % server.proc.pid) as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1)) / 1024


def json_body(mib, element):
    """An FP32 input of `mib` MiB of JSON whose "data" elements are `element`, with its
    output in binary (no JSON text of it)."""
    n = (mib << 20) // (len(element) + 1)
    return (b'{"parameters": {"binary_data_output": true}, "inputs": [{"name": "input", '
            b'"datatype": "FP32", "shape": [1, %d, 1], "data": [' % n +
            (element + b",") * (n - 1) + element + b"]}]}")


def test_json_charged(pb):
    """The JSON parse is charged twice the JSON's bytes beside its body: a 64 MiB JSON body
    is answered on a 256 MiB budget with the server's peak RSS (VmHWM) inside the budget
    + 20 %; a 100 MiB one, whose 2x and body together cannot fit, is 413 unparsed."""
    server = Server("--max_message_bytes=%d" % (128 << 20))
    try:
        stub = pb_grpc_stub(server)
        body = json_body(64, b"0.5")
        head, text = post(server.http, body, timeout=120)
        hwm = vm_mib(server, "VmHWM")
        check(head.startswith(b"HTTP/1.1 200"),
              "a 64 MiB JSON body on a 256 MiB budget: %r %r" % (head[:40], text[:160]))
        check_rss(hwm, "a 64 MiB JSON body: peak RSS %.0f MiB over the budget + 20 %%" % hwm)
        print("64 MiB JSON body: peak RSS (VmHWM) %.0f MiB" % hwm, flush=True)
        body = json_body(100, b"0")
        head, text = post(server.http, body, timeout=120)
        check(head.startswith(b"HTTP/1.1 413") and b"JSON" in text,
              "a 100 MiB JSON body (200 MiB parsed beside it) on a 256 MiB budget: %r %r"
              % (head[:40], text[:160]))
        well_behaved(server, stub, pb, "a JSON body whose parse cannot fit")
        hwm = vm_mib(server, "VmHWM")
        check_rss(hwm, "after a refused 100 MiB JSON body: peak RSS %.0f MiB" % hwm)
    finally:
        check(server.stop() == 0, "the JSON-charge server exits 0 on SIGTERM")


def test_json_answers_to_slow_readers(pb):
    """JSON answers are admitted before they are written: four clients ask for the JSON text
    of 8 Mi FP32 elements (about 90 MB each, up to 128 MiB admitted) and do not read it;
    what does not fit beside the first is refused 429 (retry advice), the peak RSS stays
    within the budget + 20 % while they wait, and a JSON answer that could never fit beside
    its call is 413 with no advice."""
    server = Server()
    try:
        stub = pb_grpc_stub(server)
        n = 8 << 20
        body = (b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, %d, 1], '
                b'"data": [' % n + b"0," * (n - 1) + b"0]}]}")
        socks = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", server.http), timeout=60)
            s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            socks.append(s)
        time.sleep(6)  # every call answered or refused; the answers sit unread
        hwm = vm_mib(server, "VmHWM")
        check_rss(hwm, "four unread 90 MB JSON answers: peak RSS %.0f MiB" % hwm)
        print("four unread JSON answers: peak RSS (VmHWM) %.0f MiB" % hwm, flush=True)
        well_behaved(server, stub, pb, "JSON answers unread")
        heads = []
        for s in socks:  # each status line; the rest of the answer is left unread
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            heads.append(data.split(b"\r\n")[0])
            s.close()
        ok = sum(h.startswith(b"HTTP/1.1 200") for h in heads)
        busy = sum(h.startswith(b"HTTP/1.1 429") for h in heads)
        check(ok >= 1 and ok + busy == 4, "four large JSON answers: %r" % heads)
        # 12 Mi elements: the call fits the budget, but not beside its JSON text.
        n = 12 << 20
        body = (b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, %d, 1], '
                b'"data": [' % n + b"0," * (n - 1) + b"0]}]}")
        head, text = post(server.http, body, timeout=120)
        check(head.startswith(b"HTTP/1.1 413") and b"binary_data" in text
              and b"Retry-After" not in head,
              "a JSON answer that can never fit beside its call: %r %r" % (head[:60], text[:200]))
        hwm = vm_mib(server, "VmHWM")
        check_rss(hwm, "after a JSON answer refused: peak RSS %.0f MiB" % hwm)
    finally:
        check(server.stop() == 0, "the JSON-answer server exits 0 on SIGTERM")


def test_metrics_slowloris(server):
    idle = open_many(server.metrics, 50)
    trickle = open_many(server.metrics, 50)
    for s in trickle:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
    worst = 0
    for _ in range(3):
        start = time.monotonic()
        text = subprocess.run(["curl", "-sS", "--max-time", "5",
                               "http://127.0.0.1:%d/metrics" % server.metrics],
                              capture_output=True, text=True).stdout
        worst = max(worst, time.monotonic() - start)
        check("posenc_requests_total" in text, "a scrape with 100 slow sockets open")
        for s in trickle:
            try:
                s.sendall(b"X")
            except OSError:
                pass
    check(worst < 1, "scrapes with 100 slow sockets took up to %.2fs" % worst)
    close_all(idle + trickle)


def main():
    import grpc
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    pb, pb_grpc = load_stubs()
    server = Server()
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel("127.0.0.1:%d" % server.grpc))
        well_behaved(server, stub, pb, "at start")
        test_idle_and_trickling(server, stub, pb)
        test_absent_bodies(server, stub, pb)
        test_refusal_closes(server)
        test_pipelining(server, stub, pb)
        test_nested_parameters(server, stub, pb)
        test_json_charged(pb)
        test_json_answers_to_slow_readers(pb)
        test_metrics_slowloris(server)
        well_behaved(server, stub, pb, "at the end")
    finally:
        code = server.stop()
        check(code == 0, "posenc-server exits 0 on SIGTERM (got %s)" % code)
        if FAILURES:
            print(server.output()[-3000:])
        shutil.rmtree(WORK, ignore_errors=True)
    if FAILURES:
        print("FAILED: %d checks" % len(FAILURES))
        sys.exit(1)
    print("PASS: the HTTP front holds against idle, trickling, absent, stalled, pipelining, "
          "nested and metrics-slowloris clients")


if __name__ == "__main__":
    main()
