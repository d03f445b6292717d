#!/usr/bin/python3
"""Calls posenc's Encode from Python with grpcio: a float32 [1, 8, 16] tensor with the
sinusoidal scheme, then checks the result against a numpy reference.

Run with Debian's interpreter (python3-grpcio, python3-protobuf, python3-numpy):

    /usr/bin/python3 client/python/posenc_example.py --target 127.0.0.1:50051

Stubs: if posenc.v1.posenc_pb2 is not importable, they are generated at run time into a
temporary directory from proto/posenc/v1/posenc.proto, with `protoc` and
`grpc_python_plugin` (protobuf-compiler, protobuf-compiler-grpc) when present, else with
grpc_tools.protoc (whose bundled protoc must understand proto3 `optional`).
Exit status: 0 when the server's output matches numpy, 1 on a mismatch or RPC error.
"""
import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import grpc
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_ROOT = os.path.join(REPO_ROOT, "proto")
PROTO_FILE = os.path.join(PROTO_ROOT, "posenc", "v1", "posenc.proto")


def load_stubs():
    """Returns (posenc_pb2, posenc_pb2_grpc), generating them if needed."""
    try:
        return (importlib.import_module("posenc.v1.posenc_pb2"),
                importlib.import_module("posenc.v1.posenc_pb2_grpc"))
    except ImportError:
        pass
    out = tempfile.mkdtemp(prefix="posenc_stubs_")
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc and plugin:
        subprocess.run([protoc, "-I", PROTO_ROOT, "--python_out=" + out, "--grpc_out=" + out,
                        "--plugin=protoc-gen-grpc=" + plugin, PROTO_FILE], check=True)
    else:
        from grpc_tools import protoc as grpc_protoc  # pylint: disable=import-outside-toplevel
        if grpc_protoc.main(["grpc_tools.protoc", "-I" + PROTO_ROOT, "--python_out=" + out,
                             "--grpc_python_out=" + out, PROTO_FILE]) != 0:
            sys.exit("could not generate stubs from %s" % PROTO_FILE)
    sys.path.insert(0, out)
    return (importlib.import_module("posenc.v1.posenc_pb2"),
            importlib.import_module("posenc.v1.posenc_pb2_grpc"))


def sinusoidal_reference(seq, d_model, base=10000.0):
    """pe[p, 2i] = sin(p * base^(-2i/d)), pe[p, 2i+1] = cos(...): INTERLEAVED, PER_DIM.
    Angles in float64 and rounded once to float32, as the server does."""
    positions = np.arange(seq, dtype=np.float64)[:, None]
    i = np.arange((d_model + 1) // 2, dtype=np.float64)
    angles = positions * base ** (-2.0 * i / d_model)
    pe = np.zeros((seq, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe.astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="host:port or unix:/path")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds")
    args = parser.parse_args()

    pb, pb_grpc = load_stubs()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 16)).astype("<f4")
    request = pb.EncodeRequest(
        request_id="python-example",
        input=pb.Tensor(shape=list(x.shape), dtype=pb.FLOAT32, data=x.tobytes()),
        sinusoidal=pb.Sinusoidal(),  # defaults: base 10000, INTERLEAVED, PER_DIM, ADD
    )

    with grpc.insecure_channel(args.target) as channel:
        stub = pb_grpc.PositionalEncodingStub(channel)
        try:
            response = stub.Encode(request, timeout=args.timeout)
        except grpc.RpcError as err:
            print("Encode failed: %s: %s" % (err.code().name, err.details()), file=sys.stderr)
            return 1

    out = response.output
    if out.dtype != pb.FLOAT32:
        print("unexpected output dtype %s" % pb.DType.Name(out.dtype), file=sys.stderr)
        return 1
    y = np.frombuffer(out.data, dtype="<f4").reshape(tuple(out.shape))
    print("request_id:", response.request_id)
    print("output shape:", list(out.shape), pb.DType.Name(out.dtype))
    print("first values:", np.array2string(y.reshape(-1)[:8], precision=5))

    expected = x + sinusoidal_reference(x.shape[1], x.shape[2])[None]
    err = float(np.max(np.abs(y - expected)))
    print("max |server - numpy| = %.3g" % err)
    if y.shape != expected.shape or err > 1e-5:
        print("MISMATCH against the numpy reference", file=sys.stderr)
        return 1
    print("matches numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
