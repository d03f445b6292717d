#!/usr/bin/python3
"""Calls posenc through the Open Inference Protocol (KServe v2 / Triton gRPC) with grpcio:
the model "rope" on float32 queries and keys [1, 8, 2, 16], then checks the answer against
a numpy reference. Any Open Inference Protocol client works the same way.

Run with Debian's interpreter (python3-grpcio, python3-protobuf, python3-numpy):

    /usr/bin/python3 client/python/infer_example.py --target 127.0.0.1:50051

Stubs: generated at run time into a temporary directory from proto/inference/, with
`protoc --python_out --grpc_python_out --plugin=protoc-gen-grpc_python=grpc_python_plugin`
(packages protobuf-compiler and protobuf-compiler-grpc).
Exit status: 0 when the server's output matches numpy, 1 on a mismatch or RPC error.
"""
import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import grpc
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_ROOT = os.path.join(REPO_ROOT, "proto")
PROTOS = [os.path.join(PROTO_ROOT, "inference", f)
          for f in ("grpc_service.proto", "model_config.proto")]


def load_stubs():
    """Returns (grpc_service_pb2, grpc_service_pb2_grpc), generated from proto/inference/."""
    out = tempfile.mkdtemp(prefix="posenc_oip_stubs_")
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    if not protoc or not os.path.exists(plugin):
        sys.exit("needs protoc and grpc_python_plugin (protobuf-compiler, protobuf-compiler-grpc)")
    subprocess.run([protoc, "-I", PROTO_ROOT, "--python_out=" + out, "--grpc_python_out=" + out,
                    "--plugin=protoc-gen-grpc_python=" + plugin] + PROTOS, check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("inference.grpc_service_pb2"),
            importlib.import_module("inference.grpc_service_pb2_grpc"))


def rope_reference(x, positions, base):
    """NEOX rotate-half RoPE of x [batch, seq, heads, head_dim]: angles in float64, cos and
    sin rounded once to float32, the rotation in float32, as the server does."""
    d = x.shape[-1]
    inv_freq = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    cos = np.cos(angles).astype(np.float32)[None, :, None, :]
    sin = np.sin(angles).astype(np.float32)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="host:port or unix:/path")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds")
    args = parser.parse_args()
    pb, pb_grpc = load_stubs()

    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 2, 16)).astype("<f4")
    k = rng.standard_normal((1, 8, 1, 16)).astype("<f4")  # GQA: fewer key heads
    request = pb.ModelInferRequest(model_name="rope", id="python-infer")
    for name, tensor in (("input", q), ("key", k)):
        request.inputs.add(name=name, datatype="FP32", shape=tensor.shape)
        request.raw_input_contents.append(tensor.tobytes())
    request.parameters["config"].string_param = json.dumps({"base": 10000})
    request.parameters["position_offset"].int64_param = 1000

    with grpc.insecure_channel(args.target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            meta = stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=args.timeout)
            model = stub.ModelMetadata(pb.ModelMetadataRequest(name="rope"), timeout=args.timeout)
            response = stub.ModelInfer(request, timeout=args.timeout)
        except grpc.RpcError as err:
            print("call failed: %s: %s" % (err.code().name, err.details()), file=sys.stderr)
            return 1

    print("server:", meta.name, meta.version)
    print("model rope inputs:", [(t.name, t.datatype, list(t.shape)) for t in model.inputs])
    outputs = {o.name: (o, raw) for o, raw in zip(response.outputs, response.raw_output_contents)}
    positions = np.arange(1000, 1008)
    err = 0.0
    for name, x in (("output", q), ("key_output", k)):
        out, raw = outputs[name]
        y = np.frombuffer(raw, dtype="<f4").reshape(tuple(out.shape))
        print("%s: %s %s first %s" % (name, out.datatype, list(out.shape),
                                       np.array2string(y.reshape(-1)[:4], precision=5)))
        err = max(err, float(np.max(np.abs(y - rope_reference(x, positions, 10000.0)))))
    print("max |server - numpy| = %.3g" % err)
    if response.id != "python-infer" or err > 1e-5:
        print("MISMATCH against the numpy reference", file=sys.stderr)
        return 1
    print("matches numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
