#!/usr/bin/python3
"""Peak resident memory of posenc-server answering one large JSON infer body over HTTP.

Starts posenc-server (port 0, --threads=1) with the given budget, sends one POST of an FP32
input whose JSON "data" is `--mib` MiB of `--element` text (the output asked for in binary),
reads the answer, and prints the server's VmHWM from /proc/<pid>/status before and after.

  bench/http_json_rss.py [--build=build] [--mib=64] [--element=0.5]
                         [--max_inflight_bytes=268435456] [--max_message_bytes=134217728]
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time


def start(args):
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [os.path.join(args.build, "server", "posenc-server"), "--listen=127.0.0.1:0",
         "--metrics_listen=127.0.0.1:0", "--http_listen=127.0.0.1:0", "--threads=1",
         "--max_inflight_bytes=%d" % args.max_inflight_bytes,
         "--max_message_bytes=%d" % args.max_message_bytes],
        stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        log.seek(0)
        m = re.search(r"http=\S+:(\d+)", log.read())
        if m:
            return proc, int(m.group(1))
        time.sleep(0.05)
    proc.kill()
    log.seek(0)
    sys.exit("posenc-server did not start: " + log.read())


def vm_mib(proc, field):
    with open("/proc/%d/status" % proc.pid) as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1)) / 1024


def body(mib, element):
    n = (mib << 20) // (len(element) + 1)
    return n, (b'{"parameters": {"binary_data_output": true}, "inputs": [{"name": "input", '
               b'"datatype": "FP32", "shape": [1, %d, 1], "data": [' % n +
               b",".join([element] * n) + b"]}]}")


def infer(port, data):
    """The answer's status line and body, the whole answer read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=600)
    try:
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(data) + data)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        head, _, first = got.partition(b"\r\n\r\n")
        rest = bytearray(first)
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        length = int(m.group(1)) if m else 0
        while len(rest) < length:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            rest += chunk
        return head.split(b"\r\n")[0].decode(), bytes(rest)
    finally:
        s.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--element", default="0.5")
    p.add_argument("--max_inflight_bytes", type=int, default=256 << 20)
    p.add_argument("--max_message_bytes", type=int, default=128 << 20)
    args = p.parse_args()
    n, data = body(args.mib, args.element.encode())
    proc, port = start(args)
    try:
        idle = vm_mib(proc, "VmHWM")
        t0 = time.monotonic()
        status, answer = infer(port, data)
        seconds = time.monotonic() - t0
        peak = vm_mib(proc, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    mib = len(data) / 2**20
    print("body %.1f MiB (%d FP32 elements, a %.0f MiB tensor): %s in %.1f s" %
          (mib, n, n * 4 / 2**20, status, seconds))
    if not status.endswith("200 OK"):
        print(answer[:300].decode(errors="replace"))
    print("VmHWM idle %.0f MiB, after %.0f MiB (%.1fx the body)" % (idle, peak, peak / mib))


if __name__ == "__main__":
    main()
