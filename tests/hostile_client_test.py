#!/usr/bin/python3
"""posenc-server against clients that mean harm, on loopback, every loop bounded in time and
count. Transport memory: a gzip bomb is refused before it is inflated; streams that declare
large messages and never finish them, with a good client calling meanwhile: the server's
stream-flood guard (stalled uploads; docs/operations.md, "Transport memory") ends 8
connections x 128 streams by their count (all but what 4x the call slots allows), and
uploads spread thinner (4 x 25, 32 x 3) by the memory they make gRPC hold; the peak
resident memory (VmHWM) stays within --max_inflight_bytes + 20 % and the memory is handed
back once the streams are gone. Metrics: idle sockets that never send a request (slowloris)
do not block a scrape. Usage: hostile_client_test.py BUILD_DIR SOURCE_DIR"""
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

build, source = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(build, "client", "python"))
import grpc  # noqa: E402
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.exceptions  # noqa: E402
import h2.settings  # noqa: E402

from posenc.v1 import posenc_pb2, posenc_pb2_grpc  # noqa: E402

MIB = 1 << 20
BUDGET = 256 * MIB
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Server:
    def __init__(self, *flags):
        self.proc = subprocess.Popen(
            [os.path.join(build, "server", "posenc-server"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", "--http_listen=", "--threads=2",
             f"--max_inflight_bytes={BUDGET}", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        self.grpc = fields["grpc"]
        self.port = int(self.grpc.rsplit(":", 1)[1])
        self.metrics_port = int(fields["metrics"].rsplit(":", 1)[1])

    def hwm_mib(self):
        return vm_kib(self.proc.pid, "VmHWM") / 1024

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def encode_request(nbytes):
    req = posenc_pb2.EncodeRequest()
    req.sinusoidal.SetInParent()
    req.input.shape.extend([1, nbytes // 4 // 1024, 1024])
    req.input.dtype = posenc_pb2.FLOAT32
    req.input.data = bytes(nbytes)
    return req


def gzip_bomb():
    """A 256 MiB request of zeros sent gzip-compressed (about 250 KB on the wire)."""
    server = Server("--max_message_bytes=4194304")
    try:
        base = server.hwm_mib()
        with grpc.insecure_channel(server.grpc, compression=grpc.Compression.Gzip,
                                   options=[("grpc.max_send_message_length", -1)]) as ch:
            stub = posenc_pb2_grpc.PositionalEncodingStub(ch)
            try:
                stub.Encode(encode_request(256 * MIB), timeout=30)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                print("  answer:", code, e.details())
        growth = server.hwm_mib() - base
        check(code == grpc.StatusCode.UNIMPLEMENTED,
              f"a gzip request is refused before inflating ({code})")
        check(growth < 64, f"gzip bomb: peak RSS grew {growth:.0f} MiB (< 64)")
        with grpc.insecure_channel(server.grpc) as ch:  # plain requests still work
            stub = posenc_pb2_grpc.PositionalEncodingStub(ch)
            stub.Encode(encode_request(MIB), timeout=30)
        print(f"  gzip bomb: peak {server.hwm_mib():.0f} MiB, +{growth:.0f} MiB")
    finally:
        server.stop()


class GoodClient:
    """An Encode of 64 KiB every 50 ms on its own channel, counting answers and errors."""

    def __init__(self, target):
        self.target, self.ok, self.errors = target, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        with grpc.insecure_channel(self.target) as ch:
            stub = posenc_pb2_grpc.PositionalEncodingStub(ch)
            req = encode_request(64 << 10)
            while not self.stop.wait(0.05):
                try:
                    stub.Encode(req, timeout=10)
                    self.ok += 1
                except grpc.RpcError as e:
                    self.errors.append(f"{e.code()}: {e.details()}")

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self


def metric(server, name):
    """The value of an unlabelled series on the server's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def grpc_frame_header(length):
    return struct.pack(">BI", 0, length)


def incomplete_uploads(connections=4, streams=25, declared=60 * MIB, send=32 * MIB,
                       seconds=15, by_count=False):
    """Streams that declare `declared` bytes and send up to `send` of them, never finishing,
    while a good client calls on its own connection. The server's stream-flood guard ends
    them: `by_count`, so many that they are over its count limits (more uploads than 4x
    --max_concurrent_calls, 64 or more on a connection); otherwise once the memory gRPC
    holds for them is over its limit. The peak within the budget + 20 % is required."""
    slots = 32  # --max_concurrent_calls: the guard acts past 4x this many uploads
    server = Server(f"--max_concurrent_calls={slots}")
    good = GoodClient(server.grpc)
    try:
        base = server.hwm_mib()
        conns = []
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
            sock.sendall(conn.data_to_send())
            sent = {}
            for _ in range(streams):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [
                    (":method", "POST"), (":scheme", "http"), (":path",
                     "/posenc.v1.PositionalEncoding/Encode"),
                    (":authority", server.grpc), ("content-type", "application/grpc"),
                    ("te", "trailers")])
                conn.send_data(sid, grpc_frame_header(declared))
                sent[sid] = 0
            sock.sendall(conn.data_to_send())
            sock.setblocking(False)
            conns.append((sock, conn, sent))
        chunk = bytes(16 << 10)
        deadline = time.monotonic() + seconds
        peak = 0.0
        ended = {}  # the attacking connections the server closed: seconds into the attack
        started = time.monotonic()
        while time.monotonic() < deadline:
            progress = False
            for sock, conn, sent in conns:
                try:
                    data = sock.recv(1 << 20)
                    if data == b"":
                        ended.setdefault(sock.fileno(), time.monotonic() - started)
                        sent.clear()
                        continue
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.StreamReset):
                            sent.pop(event.stream_id, None)
                except BlockingIOError:
                    pass
                except (ConnectionError, h2.exceptions.ProtocolError):
                    ended.setdefault(sock.fileno(), time.monotonic() - started)
                    sent.clear()
                for sid in list(sent):
                    if sent[sid] >= send:
                        continue
                    try:
                        window = min(conn.local_flow_control_window(sid), len(chunk),
                                     send - sent[sid])
                    except (h2.exceptions.StreamClosedError, KeyError):
                        sent.pop(sid, None)
                        continue
                    if window <= 0:
                        continue
                    conn.send_data(sid, chunk[:window])
                    sent[sid] += window
                    progress = True
                try:
                    pending = conn.data_to_send()
                    if pending:
                        sock.setblocking(True)
                        sock.settimeout(1)
                        sock.sendall(pending)
                        sock.setblocking(False)
                except (OSError, socket.timeout):
                    sent.clear()
            peak = max(peak, server.hwm_mib())
            if not progress:
                time.sleep(0.01)
        total = sum(sum(s.values()) for _, _, s in conns)
        peak = server.hwm_mib()
        limit = BUDGET / MIB * 1.2
        label = f"incomplete uploads, {connections}x{streams} streams"
        good.finish()
        print(f"  {label}: {total / MIB:.0f} MiB in streams still open, peak RSS {peak:.0f} MiB "
              f"(from {base:.0f}), budget {BUDGET / MIB:.0f} MiB; good client {good.ok} "
              f"answers, errors {good.errors[:3]}")
        check(peak <= limit, f"{label}: peak RSS {peak:.0f} MiB <= {limit:.0f} MiB")
        check(good.ok >= 100, f"{label}: the good client was answered ({good.ok})")
        # The guard ends the attacking connections 0.2-0.6 s in. The good client's
        # errors are printed above, not judged (gRPC's quota reclaimer may reach it
        # before the guard acts). By count it ends stalled connections while more than
        # 4x the slots are uploading, so up to that many uploads (one connection of 128
        # here) may be left running; by memory, all of them.
        need = connections - (4 * slots) // streams if by_count else connections
        flooded = metric(server, "posenc_transport_flood_connections_ended_total")
        check(flooded >= need and len(ended) >= need,
              f"{label}: the guard ended the attacking connections ({flooded:.0f} counted, "
              f"{len(ended)} of {connections} closed, at least {need} needed; at "
              f"{sorted(round(t, 1) for t in ended.values())} s)")
        rss = vm_kib(server.proc.pid, "VmRSS") / 1024
        check(rss <= BUDGET / MIB,
              f"{label}: RSS {rss:.0f} MiB once reclaimed <= {BUDGET / MIB:.0f} MiB")
        for sock, _, _ in conns:
            sock.close()
        # The server still answers.
        with grpc.insecure_channel(server.grpc) as ch:
            stub = posenc_pb2_grpc.PositionalEncodingStub(ch)
            stub.Encode(encode_request(MIB), timeout=30)
            check(True, f"{label}: the server answers after the uploads")
    finally:
        good.finish()
        server.stop()


def slowloris(idle_sockets=24):
    """Idle sockets on /metrics that never finish a request, then a scrape."""
    server = Server()
    try:
        idle = []
        for _ in range(idle_sockets):
            s = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never ends the headers
            idle.append(s)
        time.sleep(0.2)
        start = time.monotonic()
        s = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        body = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                body += data
        except socket.timeout:
            pass
        took = time.monotonic() - start
        print(f"  slowloris: scrape with {idle_sockets} idle sockets took {took:.2f} s")
        check(b"posenc_build_info" in body and took < 5,
              f"a scrape with {idle_sockets} idle sockets answered in {took:.2f} s (< 5 s)")
        for s in idle:
            s.close()
    finally:
        server.stop()


def many_incomplete_uploads():
    incomplete_uploads(connections=8, streams=128, by_count=True)


def thin_incomplete_uploads():
    incomplete_uploads(connections=32, streams=3)


for case in (gzip_bomb, incomplete_uploads, many_incomplete_uploads, thin_incomplete_uploads,
             slowloris):
    try:
        case()
    except Exception as e:  # a case that breaks is a failure, not a crash of the test
        check(False, f"{case.__name__}: {type(e).__name__}: {e}")
sys.exit(1 if failures else 0)
