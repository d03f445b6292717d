#!/usr/bin/python3
"""Shared memory through the Open Inference Protocol as stock Triton clients use it.

Against a real posenc-server started with --shm, the vendored, unchanged tritonclient.grpc and
tritonclient.http (tests/third_party/tritonclient) send every combination of an input inline
or in a registered region and an output inline (HTTP: binary data and JSON data), in its own
region, or named over the input's own range (in place). Each answer must equal the all-inline
answer, read the way the stock client reads it (as_numpy, or the region the output named), and
the input's region must be unchanged unless an output named that same range. Also: a graph
model's input by shared memory, and the refusal of an output range that overlaps the input's
without being it.

Usage: triton_shm_test.py BUILD_DIR SOURCE_DIR
"""
import importlib
import json
import mmap
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

BUILD, SRC = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="posenc_triton_shm_")
FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def load_clients():
    """The vendored clients; tritonclient.grpc's generated modules (Triton ships them in its
    wheel) are protoc's output for proto/inference, whose names and numbers are Triton's."""
    sys.path.insert(0, os.path.join(SRC, "tests", "support"))
    from oip_test_support import inference_stubs
    inference_stubs(SRC, WORK)
    sys.path.insert(0, os.path.join(SRC, "tests", "third_party"))
    sys.modules["tritonclient.grpc.service_pb2"] = importlib.import_module(
        "inference.grpc_service_pb2")
    sys.modules["tritonclient.grpc.service_pb2_grpc"] = importlib.import_module(
        "inference.grpc_service_pb2_grpc")
    sys.modules["tritonclient.grpc.model_config_pb2"] = importlib.import_module(
        "inference.model_config_pb2")
    return (importlib.import_module("tritonclient.grpc"),
            importlib.import_module("tritonclient.http"))


class Server:
    def __init__(self, *flags):
        self.log = open(os.path.join(WORK, "server.log"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "server", "posenc-server"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", "--http_listen=127.0.0.1:0", "--threads=1"]
            + list(flags), stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            self.log.seek(0)
            m = re.search(r"grpc=\S+:(\d+) metrics=\S+:(\d+) http=\S+:(\d+)", self.log.read())
            if m:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("posenc-server did not start")
        self.grpc, self.http = int(m.group(1)), int(m.group(3))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


class Region:
    """A POSIX shm object of `size` bytes, mapped here; the server maps it too."""

    def __init__(self, key, size):
        self.key, self.size = key, size
        fd = os.open("/dev/shm/" + key, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, size)
        self.map = mmap.mmap(fd, size)
        os.close(fd)

    def write(self, offset, array):
        raw = np.ascontiguousarray(array).tobytes()
        self.map[offset:offset + len(raw)] = raw

    def read(self, offset, nbytes):
        return bytes(self.map[offset:offset + nbytes])

    def close(self):
        self.map.close()
        os.unlink("/dev/shm/" + self.key)


# ---- the cases: (model, inputs {name: array}, outputs, parameters) --------------------------

RNG = np.random.default_rng(36)
CASES = [
    ("rope", {"input": RNG.standard_normal((1, 4, 2, 8)).astype(np.float32),
              "key": RNG.standard_normal((1, 4, 1, 8)).astype(np.float32)},
     ["output", "key_output"], {"config": json.dumps({"base": 500000})}),
    ("sinusoidal", {"input": RNG.standard_normal((2, 3, 8)).astype(np.float32)}, ["output"], {}),
    ("alibi", {"scores": RNG.standard_normal((1, 2, 3, 5)).astype(np.float32)}, ["output"],
     {"config": json.dumps({"num_heads": 2}), "query_length": 3, "key_length": 5}),
]
SOURCE = {"output": "input", "key_output": "key"}  # the input each output is computed over


def source_of(name, arrays):
    return SOURCE[name] if SOURCE[name] in arrays else "scores"


def datatype(array):
    return {np.float32: "FP32", np.int64: "INT64", np.float64: "FP64"}[array.dtype.type]


def make_inputs(lib, arrays, in_shm, region, layout):
    inputs = []
    for name, array in arrays.items():
        name_of_source = "scores" if name == "scores" else name
        inp = lib.InferInput(name, list(array.shape), datatype(array))
        if in_shm:
            region.write(layout[name_of_source], array)
            inp.set_shared_memory("io", array.nbytes, offset=layout[name_of_source])
        else:
            inp.set_data_from_numpy(array, **({} if lib.__name__.endswith("grpc") else
                                              {"binary_data": True}))
        inputs.append(inp)
    return inputs


def make_outputs(lib, names, out_mode, binary, arrays, layout):
    """out_mode: "inline", "region" (its own range) or "in_place" (the input's range)."""
    outputs = []
    for name in names:
        kwargs = {} if lib.__name__.endswith("grpc") else {"binary_data": binary}
        out = lib.InferRequestedOutput(name, **kwargs)
        src = source_of(name, arrays)
        nbytes = arrays[src].nbytes
        if out_mode == "region":
            out.set_shared_memory("io", nbytes, offset=layout["out_" + name])
        elif out_mode == "in_place":
            out.set_shared_memory("io", nbytes, offset=layout[src])
        outputs.append(out)
    return outputs


def layout_of(arrays, names):
    """Byte offsets in the region: each input, then each output's own range."""
    layout, at = {}, 0
    for name, array in arrays.items():
        layout[name] = at
        at += array.nbytes
    for name in names:
        layout["out_" + name] = at
        at += arrays[source_of(name, arrays)].nbytes
    return layout, at


def answers(result, names, out_mode, arrays, region, layout):
    got = {}
    for name in names:
        src = source_of(name, arrays)
        if out_mode == "inline":
            got[name] = result.as_numpy(name)
        else:
            offset = layout["out_" + name] if out_mode == "region" else layout[src]
            raw = region.read(offset, arrays[src].nbytes)
            got[name] = np.frombuffer(raw, np.float32).reshape(arrays[src].shape)
    return got


def run_combinations(lib, client, region, expected):
    label = lib.__name__.split(".")[-1]
    for model, arrays, names, params in CASES:
        layout, _ = layout_of(arrays, names)
        for in_shm in (False, True):
            for out_mode in ("inline", "region", "in_place"):
                if out_mode == "in_place" and not in_shm:
                    continue  # no input range to name
                for binary in ((True, False) if label == "http" and out_mode == "inline"
                               else (True,)):
                    what = "%s %s input %s, output %s%s" % (
                        label, model, "shm" if in_shm else "inline", out_mode,
                        "" if binary else " (JSON data)")
                    region.map[:] = b"\0" * region.size
                    inputs = make_inputs(lib, arrays, in_shm, region, layout)
                    before = {n: region.read(layout[n], a.nbytes) for n, a in arrays.items()}
                    outputs = make_outputs(lib, names, out_mode, binary, arrays, layout)
                    try:
                        result = client.infer(model, inputs, outputs=outputs, parameters=params)
                    except Exception as err:  # noqa: BLE001
                        check(False, "%s: %s" % (what, err))
                        continue
                    try:
                        got = answers(result, names, out_mode, arrays, region, layout)
                    except Exception as err:  # noqa: BLE001  (as_numpy on a missing answer)
                        check(False, "%s: the stock client cannot read the answer: %r"
                              % (what, err))
                        continue
                    for name in names:
                        want = expected[model][name]
                        check(got[name] is not None and got[name].shape == want.shape
                              and np.array_equal(got[name], want),
                              "%s: %s differs from the all-inline answer" % (what, name))
                    for name, array in arrays.items():
                        now = region.read(layout[name], array.nbytes)
                        if out_mode != "in_place":
                            check(now == before[name],
                                  "%s: the region of input %s was written" % (what, name))


def inline_answers(grpc_lib, client):
    expected = {}
    for model, arrays, names, params in CASES:
        inputs = make_inputs(grpc_lib, arrays, False, None, {})
        outputs = [grpc_lib.InferRequestedOutput(n) for n in names]
        result = client.infer(model, inputs, outputs=outputs, parameters=params)
        expected[model] = {n: result.as_numpy(n) for n in names}
        check(not np.array_equal(expected[model][names[0]],
                                 arrays["scores" if model == "alibi" else "input"]),
              "%s: the inline answer is its input" % model)
    return expected


def default_outputs(lib, client, region, expected):
    """No outputs listed (all of the model's): every one inline, the input's region kept."""
    label = lib.__name__.split(".")[-1]
    model, arrays, names, params = CASES[0]
    layout, _ = layout_of(arrays, names)
    inputs = make_inputs(lib, arrays, True, region, layout)
    before = region.read(0, layout["out_" + names[0]])
    try:
        result = client.infer(model, inputs, parameters=params)
        for name in names:
            check(np.array_equal(result.as_numpy(name), expected[model][name]),
                  "%s %s, default outputs: %s differs" % (label, model, name))
    except Exception as err:  # noqa: BLE001
        check(False, "%s %s, default outputs: %r" % (label, model, err))
    check(region.read(0, len(before)) == before,
          "%s %s, default outputs: an input region was written" % (label, model))


def graph_and_overlap(lib, client, region):
    """A graph model's input by shared memory; an output over part of an input's range."""
    edges = np.array([[0, 1], [1, 2], [2, 3], [3, 0]], np.int64)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    params = {"num_nodes": 4, "k": 2}
    label = lib.__name__.split(".")[-1]
    ins = [lib.InferInput("edges", [4, 2], "INT64"), lib.InferInput("input", [4, 3], "FP32")]
    ins[0].set_data_from_numpy(edges)
    ins[1].set_data_from_numpy(x)
    want = client.infer("graph_laplacian", ins, parameters=params).as_numpy("output")
    region.write(0, x)
    ins[1] = lib.InferInput("input", [4, 3], "FP32")
    ins[1].set_shared_memory("io", x.nbytes)
    try:
        got = client.infer("graph_laplacian", ins, parameters=params).as_numpy("output")
    except Exception as err:  # noqa: BLE001
        got = None
        check(False, "%s graph_laplacian, input by shared memory: %s" % (label, err))
    check(got is not None and np.array_equal(got, want),
          "%s graph_laplacian: the output for an input by shared memory differs" % label)
    check(region.read(0, x.nbytes) == x.tobytes(), "%s graph: input region written" % label)
    # An output that overlaps the input's range without being it.
    a = CASES[1][1]["input"]
    region.write(0, a)
    inp = lib.InferInput("input", list(a.shape), "FP32")
    inp.set_shared_memory("io", a.nbytes)
    out = lib.InferRequestedOutput("output")
    out.set_shared_memory("io", a.nbytes, offset=16)
    try:
        client.infer("sinusoidal", [inp], outputs=[out])
        check(False, "%s: an output overlapping the input's range was accepted" % label)
    except Exception as err:  # noqa: BLE001
        check("overlaps" in str(err), "%s overlap: %s" % (label, err))
    check(region.read(0, a.nbytes) == a.tobytes(), "%s overlap: input region written" % label)


def raw_answers_are_protobufs_bytes(port):
    """ModelInfer's and ModelStreamInfer's answers are written by hand around their tensors
    (wire_format.h): the raw bytes, parsed by stock protobuf and serialized again, must be the
    same bytes. Small and large (own-slice) raw outputs, a query and a key output each."""
    import grpc
    from inference import grpc_service_pb2 as pb
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=None)
    for seq in (2, 300):
        q = RNG.standard_normal((1, seq, 2, 16)).astype(np.float32)
        k = RNG.standard_normal((1, seq, 1, 16)).astype(np.float32)
        request = pb.ModelInferRequest(model_name="rope", id="raw-%d" % seq)
        for name, array in (("input", q), ("key", k)):
            request.inputs.add(name=name, datatype="FP32", shape=array.shape)
            request.raw_input_contents.append(array.tobytes())
        raw = call(request)
        parsed = pb.ModelInferResponse()
        parsed.ParseFromString(raw)
        check(parsed.SerializeToString() == raw,
              "rope seq %d: ModelInfer's bytes are protobuf's serialization" % seq)
        check([len(c) for c in parsed.raw_output_contents] == [q.nbytes, k.nbytes],
              "rope seq %d: both outputs arrive whole" % seq)
        check(parsed.id == "raw-%d" % seq, "rope seq %d: the id comes back" % seq)
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=None)
        for raw in stream(iter([request, request])):
            streamed = pb.ModelStreamInferResponse()
            streamed.ParseFromString(raw)
            check(streamed.SerializeToString() == raw and not streamed.error_message
                  and streamed.infer_response == parsed,
                  "rope seq %d: ModelStreamInfer's bytes are protobuf's, as ModelInfer's" % seq)
    channel.close()


def main():
    grpc_lib, http_lib = load_clients()
    server = Server("--shm")
    key = "posenc_t36_%d" % os.getpid()
    region = Region(key, 4096)
    try:
        gclient = grpc_lib.InferenceServerClient("127.0.0.1:%d" % server.grpc)
        hclient = http_lib.InferenceServerClient("127.0.0.1:%d" % server.http)
        expected = inline_answers(grpc_lib, gclient)
        raw_answers_are_protobufs_bytes(server.grpc)
        for lib, client in ((grpc_lib, gclient), (http_lib, hclient)):
            client.register_system_shared_memory("io", "/" + key, region.size)
            run_combinations(lib, client, region, expected)
            default_outputs(lib, client, region, expected)
            graph_and_overlap(lib, client, region)
            client.unregister_system_shared_memory("io")
    finally:
        region.close()
        check(server.stop() == 0, "the server exits 0")
        shutil.rmtree(WORK, ignore_errors=True)
    if FAILURES:
        print("%d failures" % len(FAILURES))
        sys.exit(1)
    print("PASS: tritonclient.grpc and tritonclient.http, every input/output placement")


if __name__ == "__main__":
    main()
