#!/usr/bin/python3
"""posenc-server against a Python peer: grpcio and PyTorch serving the same Encode.

The peer is what a team would write in an afternoon instead of posenc: a grpcio server of
posenc.v1.PositionalEncoding's Encode that adds the paper's sinusoidal encoding with torch
(the float64 table cached per shape and rounded to float32 once, the add in float32 on the
request's own bytes). `compare` starts posenc-server and the peer in turn and drives each
with `posenc-bench --target` (one call at a time, the same requests), then prints calls/s of
both and their ratio per payload.

  /usr/bin/python3 bench/torch_peer.py compare [--build=build] [--calls=300]
  /usr/bin/python3 bench/torch_peer.py serve [--listen=127.0.0.1:0] [--build=build]

Needs python3-torch, python3-grpcio and the Python stubs (ninja -C build posenc_python).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
from concurrent import futures

CELLS = ["Encode 4 KiB x1", "Encode 16 KiB x1", "Encode 64 KiB x1", "Encode 256 KiB x1",
         "Encode 1 MiB x1", "Encode 4 MiB x1"]


def serve(args):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sys.path.insert(0, os.path.join(args.build, "client", "python"))
    import grpc
    import torch
    from posenc.v1 import posenc_pb2 as pb
    from posenc.v1 import posenc_pb2_grpc as pb_grpc

    tables = {}

    def table(seq, d):
        if (seq, d) not in tables:
            pos = torch.arange(seq, dtype=torch.float64)[:, None]
            angles = pos * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
            pe = torch.zeros(seq, d, dtype=torch.float64)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d // 2])
            tables[(seq, d)] = pe.to(torch.float32)
        return tables[(seq, d)]

    class Peer(pb_grpc.PositionalEncodingServicer):
        def Encode(self, request, context):
            shape = list(request.input.shape)
            x = torch.frombuffer(bytearray(request.input.data), dtype=torch.float32)
            x = x.view(shape)
            x += table(shape[-2], shape[-1])
            return pb.EncodeResponse(request_id=request.request_id, output=pb.Tensor(
                shape=shape, dtype=request.input.dtype, data=x.numpy().tobytes()))

    limit = [("grpc.max_receive_message_length", 64 << 20),
             ("grpc.max_send_message_length", 64 << 20)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=limit)
    pb_grpc.add_PositionalEncodingServicer_to_server(Peer(), server)
    port = server.add_insecure_port(args.listen)
    server.start()
    host = args.listen.rsplit(":", 1)[0]
    print(f"torch-peer listening grpc={host}:{port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop(1)


def start(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        m = re.search(r"listening grpc=(\S+)", line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"did not start: {cmd}")


def drive(bench, address, calls):
    rows = {}
    for cell in CELLS:
        out = subprocess.run([bench, f"--target={address}", f"--calls={calls}",
                              f"--filter={cell}"], check=True, capture_output=True, text=True)
        row = json.loads(out.stdout)["drive"][0]
        rows[cell] = (row["calls"] / row["seconds"], row["p50_ms"])
    return rows


def compare(args):
    bench = os.path.join(args.build, "bench", "posenc-bench")
    servers = {
        "posenc": [os.path.join(args.build, "server", "posenc-server"), "--listen=127.0.0.1:0",
                   "--metrics_listen=", "--http_listen="],
        "peer": [sys.executable, os.path.abspath(__file__), "serve", f"--build={args.build}"],
    }
    results = {}
    for name, cmd in servers.items():
        proc, address = start(cmd)
        try:
            drive(bench, address, max(20, args.calls // 10))  # warm-up
            results[name] = drive(bench, address, args.calls)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print("| cell | posenc calls/s | peer calls/s | posenc / peer | posenc p50 ms | peer p50 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for cell in CELLS:
        (p, p50), (q, q50) = results["posenc"][cell], results["peer"][cell]
        print(f"| {cell} | {p:.0f} | {q:.0f} | {p / q:.2f} | {p50:.3f} | {q50:.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["serve", "compare"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    serve(args) if args.mode == "serve" else compare(args)


if __name__ == "__main__":
    main()
