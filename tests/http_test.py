#!/usr/bin/python3
"""The Open Inference Protocol's HTTP/REST binding against a real posenc-server.

- Every model over HTTP, bit for bit against the gRPC binding's ModelInfer answer for the
  same request, with the stock tritonclient.http (tests/third_party) in JSON and binary, and
  with curl in JSON and binary; FP32 and BF16 where the model takes floats.
- The metadata endpoints, and the Http* method labels in /metrics.
- Bad input: malformed JSON, a header length past the body, binary sizes that do not add
  up, an unknown model, data that does not match its shape, a body over the limit (413
  before the body is sent), slow-loris headers, a stalled and a trickled body; each the right status
  and a message naming the field, and the server still answering afterwards.
- Drain: an infer still uploading at SIGTERM finishes (200); new calls get 503; exit 0.

Usage: http_test.py BUILD_DIR SOURCE_DIR
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

BUILD, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tests", "third_party"))
import tritonclient.http as triton  # noqa: E402  (the vendored, unchanged client)

WORK = tempfile.mkdtemp(prefix="posenc_http_test_")
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
from oip_test_support import PosencServer, inference_stubs  # noqa: E402
FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def load_stubs():
    return inference_stubs(SRC, WORK)


def Server(*flags):  # noqa: N802
    return PosencServer(BUILD, WORK, *flags)


def request(server, method, path, body=b"", headers=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", server.http, timeout=timeout)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def error_of(data):
    try:
        return json.loads(data)["error"]
    except Exception:  # noqa: BLE001
        return "<not an error body: %r>" % data[:200]


# ---- the models, one request each ----------------------------------------------------------

BF16 = "BF16"


def bf16_bytes(x):
    """float32 -> bfloat16 bytes, rounding to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def bf16_to_f32(raw):
    return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


rng = np.random.default_rng(7)
# Values exactly representable in bfloat16, so the JSON and the binary BF16 inputs are the
# same tensor.
def floats(*shape):
    return bf16_to_f32(bf16_bytes(rng.standard_normal(shape).astype(np.float32))).reshape(shape)


TABLE = rng.standard_normal((16, 8)).astype(np.float32)

# model -> (inputs [(name, datatype, array)], parameters, float inputs may be BF16)
CASES = {
    "sinusoidal": ([("input", "FP32", floats(2, 5, 8))], {"position_offset": 3}, True),
    "learned": ([("input", "FP32", floats(1, 4, 8))],
                {"config": json.dumps({"table": "pos", "overflow": "CLAMP"})}, True),
    "rope": ([("input", "FP32", floats(1, 4, 2, 8)), ("key", "FP32", floats(1, 4, 1, 8))],
             {"config": json.dumps({"base": 500000}), "position_offset": 5}, True),
    "hierarchical": ([("input", "FP32", floats(1, 4, 8))],
                     {"config": json.dumps({"levels": [{"ids": [0, 1, 2, 3]},
                                                       {"ids": [0, 0, 1, 1], "scale": 0.5}]})},
                     True),
    "continuous": ([("input", "FP32", floats(1, 4, 8)),
                    ("position_values", "FP64", np.array([0.0, 0.25, 1.5, 7.75]))],
                   {"config": json.dumps({"value_scale": 2.0})}, True),
    "alibi": ([], {"query_length": 3, "key_length": 5,
                   "config": json.dumps({"num_heads": 6, "mode": "SYMMETRIC"})}, False),
    "t5": ([], {"query_length": 3, "key_length": 6,
                "config": json.dumps({"bidirectional": True, "num_buckets": 8,
                                      "max_distance": 16})}, False),
    "graph_laplacian": ([("edges", "INT64", np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 0]],
                                                     dtype=np.int64))],
                        {"num_nodes": 5, "k": 2, "normalized": True}, False),
}
NP = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32}


def wire_bytes(datatype, array):
    return bf16_bytes(array) if datatype == BF16 else np.ascontiguousarray(
        array, dtype=NP[datatype]).tobytes()


def with_dtype(inputs, bf16):
    return [(n, BF16 if bf16 and d == "FP32" else d, a) for n, d, a in inputs]


def grpc_answer(stub, pb, model, inputs, params):
    """{output name: (datatype, shape, raw bytes)} from the gRPC ModelInfer."""
    req = pb.ModelInferRequest(model_name=model, id="grpc-" + model)
    for name, datatype, array in inputs:
        t = req.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        req.raw_input_contents.append(wire_bytes(datatype, array))
    for k, v in params.items():
        p = req.parameters[k]
        if isinstance(v, bool):
            p.bool_param = v
        elif isinstance(v, int):
            p.int64_param = v
        else:
            p.string_param = v
    resp = stub.ModelInfer(req, timeout=30)
    return {o.name: (o.datatype, list(o.shape), resp.raw_output_contents[i])
            for i, o in enumerate(resp.outputs)}


def as_raw(datatype, values):
    """JSON output data -> little-endian bytes of `datatype`."""
    a = np.asarray(values, dtype=np.float64 if datatype in ("FP32", "BF16", "FP64") else np.int64)
    if datatype == BF16:
        return bf16_bytes(a.astype(np.float32))
    return a.astype(NP[datatype]).tobytes()


def compare(where, got, want):
    check(set(got) == set(want), "%s: outputs %s, gRPC gave %s" % (where, sorted(got), sorted(want)))
    for name, (datatype, shape, raw) in want.items():
        if name not in got:
            continue
        g = got[name]
        check(g[0] == datatype and list(g[1]) == shape,
              "%s: %s is %s %s, gRPC %s %s" % (where, name, g[0], g[1], datatype, shape))
        check(g[2] == raw, "%s: %s differs from the gRPC answer (%d vs %d bytes)"
              % (where, name, len(g[2]), len(raw)))


def via_tritonclient(client, model, inputs, params, binary):
    ins = []
    for name, datatype, array in inputs:
        i = triton.InferInput(name, list(array.shape), datatype)
        if datatype == BF16:  # tritonclient sends BF16 from float32 arrays, binary only
            i.set_data_from_numpy(array.astype(np.float32), binary_data=True)
        else:
            i.set_data_from_numpy(array.astype(NP[datatype]), binary_data=binary)
        ins.append(i)
    r = client.infer(model, ins, parameters=params, request_id="http-" + model,
                     outputs=None if binary is None else None)
    resp = r.get_response()
    check(resp.get("id") == "http-" + model, "%s: the response id is %r" % (model, resp.get("id")))
    out = {}
    for o in resp["outputs"]:
        a = r.as_numpy(o["name"])
        if o["datatype"] == BF16:
            raw = bf16_bytes(a)  # tritonclient widens bfloat16 to float32, exactly
        else:
            raw = np.ascontiguousarray(a, dtype=NP[o["datatype"]]).tobytes()
        out[o["name"]] = (o["datatype"], o["shape"], raw)
    return out


def via_tritonclient_outputs(client, model, inputs, params, binary_out):
    """tritonclient asking for every output in binary (or JSON) explicitly."""
    ins = []
    for name, datatype, array in inputs:
        i = triton.InferInput(name, list(array.shape), datatype)
        i.set_data_from_numpy(array.astype(np.float32 if datatype == BF16 else NP[datatype]),
                              binary_data=True)
        ins.append(i)
    meta = client.get_model_metadata(model)
    names = [o["name"] for o in meta["outputs"]]
    if model == "rope" and not any(n == "key" for n, _, _ in inputs):
        names = ["output"]
    outs = [triton.InferRequestedOutput(n, binary_data=binary_out) for n in names]
    r = client.infer(model, ins, parameters=params, outputs=outs)
    out = {}
    for o in r.get_response()["outputs"]:
        check(("parameters" in o and "binary_data_size" in o["parameters"]) == binary_out,
              "%s: output %s binary=%s not honoured" % (model, o["name"], binary_out))
        a = r.as_numpy(o["name"])
        raw = bf16_bytes(a) if o["datatype"] == BF16 else np.ascontiguousarray(
            a, dtype=NP[o["datatype"]]).tobytes()
        out[o["name"]] = (o["datatype"], o["shape"], raw)
    return out


def infer_body(inputs, params, binary, binary_output):
    """A KServe v2 infer body (JSON header + binary data) as curl would send it."""
    header = {"id": "curl", "parameters": dict(params), "inputs": []}
    if binary_output:
        header["parameters"]["binary_data_output"] = True
    blobs = []
    for name, datatype, array in inputs:
        t = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = wire_bytes(datatype, array)
            t["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            t["data"] = array.reshape(-1).tolist()
        header["inputs"].append(t)
    head = json.dumps(header).encode()
    return head, b"".join(blobs)


def parse_infer_answer(headers, data):
    hl = headers.get("Inference-Header-Content-Length")
    head = json.loads(data if hl is None else data[:int(hl)])
    offset = 0 if hl is None else int(hl)
    out = {}
    for o in head["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            raw = data[offset:offset + size]
            offset += size
        else:
            raw = as_raw(o["datatype"], o["data"])
        out[o["name"]] = (o["datatype"], o["shape"], raw)
    return head, out


def via_curl(server, model, inputs, params, binary):
    head, blob = infer_body(inputs, params, binary, binary_output=binary)
    path = os.path.join(WORK, "body")
    with open(path, "wb") as f:
        f.write(head + blob)
    cmd = ["curl", "-sS", "-D", os.path.join(WORK, "headers"), "-o", os.path.join(WORK, "answer"),
           "-w", "%{http_code}", "-H", "Content-Type: application/octet-stream",
           "--data-binary", "@" + path,
           "http://%s/v2/models/%s/infer" % (server.url, model)]
    if binary:
        cmd[cmd.index("--data-binary"):cmd.index("--data-binary")] = [
            "-H", "Inference-Header-Content-Length: %d" % len(head)]
    code = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    with open(os.path.join(WORK, "answer"), "rb") as f:
        data = f.read()
    headers = {}
    with open(os.path.join(WORK, "headers")) as f:
        for line in f:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip()] = v.strip()
    check(code == "200", "curl %s: HTTP %s %s" % (model, code, data[:300]))
    if code != "200":
        return {}
    return parse_infer_answer(headers, data)[1]


def test_models(server, pb, stub):
    client = triton.InferenceServerClient(server.url)
    index = {m["name"] for m in client.get_model_repository_index()}
    for model in sorted(index - set(CASES)):
        print("note: model %s has no HTTP case here" % model)
    for model, (inputs, params, floats_ok) in CASES.items():
        check(model in index, "repository index lacks %s" % model)
        for bf16 in ([False, True] if floats_ok else [False]):
            ins = with_dtype(inputs, bf16)
            where = "%s %s" % (model, "BF16" if bf16 else "FP32")
            want = grpc_answer(stub, pb, model, ins, params)
            compare(where + " tritonclient binary", via_tritonclient(client, model, ins, params, True), want)
            compare(where + " tritonclient binary outputs",
                    via_tritonclient_outputs(client, model, ins, params, True), want)
            if not bf16:  # tritonclient sends BF16 only in binary
                compare(where + " tritonclient JSON",
                        via_tritonclient(client, model, ins, params, False), want)
            compare(where + " tritonclient JSON outputs",
                    via_tritonclient_outputs(client, model, ins, params, False), want)
            compare(where + " curl binary", via_curl(server, model, ins, params, True), want)
            compare(where + " curl JSON", via_curl(server, model, ins, params, False), want)
    # ALiBi's causal mask is -infinity, which only binary data can carry.
    params = {"query_length": 3, "key_length": 5,
              "config": json.dumps({"num_heads": 4, "mode": "CAUSAL"})}
    want = grpc_answer(stub, pb, "alibi", [], params)
    compare("alibi CAUSAL curl binary", via_curl(server, "alibi", [], params, True), want)


def test_body_sizes(server, pb, stub):
    """Bodies parsed where they arrive and on either lane of the work pool answer alike."""
    cases = [
        ("a small binary body (parsed and run on the I/O thread)", floats(1, 16, 64), True),
        ("a binary body over 330 KiB (the work pool)", floats(1, 96, 1024), True),
        ("a binary body over 1 MiB (the bulk lane)", floats(2, 160, 1024), True),
        ("a JSON body over 16 KiB (the work pool)", floats(1, 16, 256), False),
    ]
    for where, x, binary in cases:
        ins = [("input", "FP32", x)]
        want = grpc_answer(stub, pb, "sinusoidal", ins, {"position_offset": 5})
        compare(where, via_curl(server, "sinusoidal", ins, {"position_offset": 5}, binary), want)


def test_metadata(server):
    client = triton.InferenceServerClient(server.url)
    check(client.is_server_live() and client.is_server_ready(), "server live and ready")
    check(client.is_model_ready("rope") and client.is_model_ready("rope", "1"), "rope ready")
    meta = client.get_server_metadata()
    check(meta["name"] == "posenc" and "binary_tensor_data" in meta["extensions"],
          "server metadata: %s" % meta)
    rope = client.get_model_metadata("rope")
    check(rope["versions"] == ["1"] and [i["name"] for i in rope["inputs"]][:2] == ["input", "key"],
          "rope metadata: %s" % rope)
    config = client.get_model_config("graph_laplacian")
    check(config["name"] == "graph_laplacian" and config["input"][0]["dims"] == [-1, 2],
          "graph_laplacian config: %s" % config)
    status, _, data = request(server, "GET", "/v2/models/bert")
    check(status == 404 and "bert" in error_of(data), "unknown model metadata: %s %s" % (status, data))
    status, _, data = request(server, "GET", "/v2/models/rope/versions/2/ready")
    check(status == 404, "rope version 2 is not served: %s %s" % (status, data))
    status, _, data = request(server, "DELETE", "/v2/models/rope/infer")
    check(status == 405, "DELETE on infer: %s" % status)
    status, _, data = request(server, "GET", "/v2/systemsharedmemory/status")
    check(status == 400 and "--shm" in error_of(data),
          "shm status with --shm off: %s %s" % (status, data))
    status, _, data = request(server, "POST", "/v2/systemsharedmemory/region/r/register",
                              json.dumps({"key": "posenc_missing", "offset": 0, "byte_size": 64}))
    check(status == 400 and "--shm" in error_of(data),
          "shm register with --shm off: %s %s" % (status, data))


def as_user(uid, call):
    """call() in a child process running as `uid`; its result (picklable) comes back."""
    import pickle
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setuid(uid)
            result = call()
        except BaseException as e:  # noqa: B036 - reported to the parent
            result = ("error", repr(e), b"")
        os.write(write, pickle.dumps(result))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_shm(pb, stub):
    """A region registered over HTTP serves an infer whose input and output are in it; it
    belongs to the user of the HTTP client (another user's client does not see it)."""
    server = Server("--shm")
    try:
        key = "posenc_http_test_%d" % os.getpid()
        x = floats(1, 4, 8)
        size = x.nbytes
        fd = os.open("/dev/shm/" + key, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 2 * size)
        os.pwrite(fd, x.tobytes(), 0)
        status, _, data = request(server, "POST", "/v2/systemsharedmemory/region/io/register",
                                  json.dumps({"key": key, "offset": 0, "byte_size": 2 * size}))
        check(status == 200, "shm register: %s %s" % (status, data))
        status, _, data = request(server, "GET", "/v2/systemsharedmemory/region/io/status")
        check(status == 200 and json.loads(data)[0]["byte_size"] == 2 * size and
              "key" not in json.loads(data)[0], "shm status: %s" % data)
        if os.getuid() == 0:  # another user's HTTP client on this host: none of it
            other = as_user(65534, lambda: request(server, "GET",
                                                   "/v2/systemsharedmemory/region/io/status"))
            check(other[0] == 404, "another user's HTTP client sees the region: %s" % (other,))
            other = as_user(65534, lambda: request(server, "GET", "/v2/systemsharedmemory/status"))
            check(other[0] == 200 and json.loads(other[2]) == [],
                  "another user's HTTP client lists: %s" % (other,))
        body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4, 8],
                            "parameters": {"shared_memory_region": "io",
                                           "shared_memory_byte_size": size}}],
                "outputs": [{"name": "output", "parameters": {
                    "shared_memory_region": "io", "shared_memory_byte_size": size,
                    "shared_memory_offset": size}}]}
        status, _, data = request(server, "POST", "/v2/models/sinusoidal/infer", json.dumps(body))
        check(status == 200, "infer through shm: %s %s" % (status, data))
        want = grpc_answer(stub, pb, "sinusoidal", [("input", "FP32", x)], {})
        got = os.pread(fd, size, size)
        check(got == want["output"][2], "the shm output differs from the gRPC answer")
        status, _, data = request(server, "POST", "/v2/systemsharedmemory/region/io/unregister")
        check(status == 200, "shm unregister: %s %s" % (status, data))
        status, _, data = request(server, "GET", "/v2/systemsharedmemory/region/io/status")
        check(status == 404, "status of an unregistered region: %s %s" % (status, data))
        os.close(fd)
        os.unlink("/dev/shm/" + key)
    finally:
        check(server.stop() == 0, "the --shm server exits 0")


def infer(server, model, body, headers=None):
    return request(server, "POST", "/v2/models/%s/infer" % model, body, headers)


def expect_error(server, what, status, needle, model, body, headers=None):
    got, _, data = infer(server, model, body, headers)
    message = error_of(data)
    check(got == status and needle in message,
          "%s: want %d naming %r, got %d %r" % (what, status, needle, got, message))


def test_bad_input(server):
    x = np.zeros((1, 2, 4), dtype=np.float32)
    good = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2, 4],
                        "data": x.reshape(-1).tolist()}]}
    expect_error(server, "malformed JSON", 400, "not valid JSON", "sinusoidal", b'{"inputs": [')
    expect_error(server, "not an object", 400, "JSON object", "sinusoidal", b'[1, 2]')
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2, 4],
                                   "parameters": {"binary_data_size": 32}}]}).encode()
    expect_error(server, "header length past the body", 400, "Inference-Header-Content-Length",
                 "sinusoidal", head + x.tobytes(),
                 {"Inference-Header-Content-Length": str(len(head) + 100)})
    expect_error(server, "header length not a number", 400, "Inference-Header-Content-Length",
                 "sinusoidal", head + x.tobytes(), {"Inference-Header-Content-Length": "12x"})
    expect_error(server, "binary shorter than binary_data_size", 400, "binary_data_size",
                 "sinusoidal", head + x.tobytes()[:20],
                 {"Inference-Header-Content-Length": str(len(head))})
    expect_error(server, "binary longer than binary_data_size", 400, "binary_data_size",
                 "sinusoidal", head + x.tobytes() + b"extra",
                 {"Inference-Header-Content-Length": str(len(head))})
    head16 = head.replace(b'"binary_data_size": 32', b'"binary_data_size": 16')
    expect_error(server, "binary size that does not fit the shape", 400, "input 'input'",
                 "sinusoidal", head16 + x.tobytes()[:16],
                 {"Inference-Header-Content-Length": str(len(head16))})
    expect_error(server, "unknown model", 404, "bert", "bert", json.dumps(good))
    bad = json.loads(json.dumps(good))
    bad["inputs"][0]["data"] = bad["inputs"][0]["data"][:7]
    expect_error(server, "shape/data mismatch", 400, "inputs[0] ('input').data", "sinusoidal",
                 json.dumps(bad))
    bad["inputs"][0]["data"] = ["a"] * 8
    expect_error(server, "data not numbers", 400, "inputs[0] ('input').data[0]", "sinusoidal",
                 json.dumps(bad))
    bad = json.loads(json.dumps(good))
    bad["inputs"][0]["shape"] = [1, -2, 4]
    expect_error(server, "negative dimension", 400, "inputs[0] ('input').shape[1]", "sinusoidal",
                 json.dumps(bad))
    bad["inputs"][0]["shape"] = [1, 2, 4]
    bad["inputs"][0]["datatype"] = "FP8"
    expect_error(server, "unknown datatype", 400, "inputs[0] ('input').datatype", "sinusoidal",
                 json.dumps(bad))
    bad = json.loads(json.dumps(good))
    bad["inputs"][0]["name"] = "query"
    expect_error(server, "unknown input", 400, "query", "sinusoidal", json.dumps(bad))
    bad = json.loads(json.dumps(good))
    bad["parameters"] = {"config": "{\"base\": -1}"}
    expect_error(server, "bad scheme parameter", 400, "base", "sinusoidal", json.dumps(bad))
    bad = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2, 4],
                       "data": [[[0] * 4] * 2] * 1}]}  # nested data is row-major
    got, _, data = infer(server, "sinusoidal", json.dumps(bad))
    check(got == 200, "nested data arrays: %s %s" % (got, data[:200]))
    deep = b'{"inputs":[{"name":"input","datatype":"FP32","shape":[1],"data":' + b"[" * 5000 + \
        b"]" * 5000 + b"}]}"
    expect_error(server, "deeply nested data", 400, "nested deeper", "sinusoidal", deep)
    # The server still answers correctly after all of that.
    got, _, data = infer(server, "sinusoidal", json.dumps(good))
    check(got == 200 and json.loads(data)["outputs"][0]["data"][1] == 1.0,
          "a good request after the bad ones: %s %s" % (got, data[:200]))


def read_response(sock, timeout):
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        m = re.search(rb"Content-Length: (\d+)", head, re.I)
        while m and len(rest) < int(m.group(1)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head, rest
    except socket.timeout:
        return data, b""


def test_limits():
    """--max_message_bytes, --http_read_timeout: 413 before the body, slow clients cut off."""
    server = Server("--max_message_bytes=1048576", "--http_read_timeout=1s")
    try:
        # 413 from the Content-Length alone: not a byte of the body is sent.
        s = socket.create_connection(("127.0.0.1", server.http))
        start = time.monotonic()
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 104857600\r\n\r\n")
        head, body = read_response(s, 5)
        check(head.startswith(b"HTTP/1.1 413") and b"--max_message_bytes" in body and
              time.monotonic() - start < 2, "over the limit: %r %r" % (head[:40], body[:200]))
        s.close()
        # Chunked bodies are counted as they come.
        s = socket.create_connection(("127.0.0.1", server.http))
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        try:
            for _ in range(20):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except OSError:
            pass
        head, body = read_response(s, 5)
        check(head.startswith(b"HTTP/1.1 413"), "chunked over the limit: %r" % head[:40])
        s.close()
        # Slow-loris headers: one byte at a time is cut off at the read timeout, and the
        # server answers others meanwhile.
        s = socket.create_connection(("127.0.0.1", server.http))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 6:
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(0.2)
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except OSError:
                closed = True
                break
            if time.monotonic() - start > 0.5:
                status, _, _ = request(server, "GET", "/v2/health/live", timeout=2)
                check(status == 200, "a probe during a slow-loris client")
        check(closed and time.monotonic() - start < 4,
              "slow-loris headers closed after %.1fs" % (time.monotonic() - start))
        s.close()
        # A body that stalls: 408 at the read timeout.
        s = socket.create_connection(("127.0.0.1", server.http))
        start = time.monotonic()
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"inputs\":")
        head, body = read_response(s, 6)
        check(head.startswith(b"HTTP/1.1 408") and b"read timeout" in body and
              time.monotonic() - start < 4, "a stalled body: %r %r after %.1fs"
              % (head[:40], body[:200], time.monotonic() - start))
        s.close()
        # A body trickled a byte at a time, each within the read timeout: cut off (408) at
        # the body's deadline all the same.
        s = socket.create_connection(("127.0.0.1", server.http))
        start = time.monotonic()
        s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1000\r\n\r\n")
        head = b""
        s.settimeout(0.3)
        while time.monotonic() - start < 6 and not head:
            try:
                s.sendall(b" ")
                head = s.recv(4096)
            except socket.timeout:
                pass
            except OSError:
                break
        check(head.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 4,
              "a trickled body: %r after %.1fs" % (head[:60], time.monotonic() - start))
        s.close()
        status, _, data = request(server, "GET", "/v2/health/ready")
        check(status == 200, "ready after the slow clients")
    finally:
        check(server.stop() == 0, "the limits server exits 0")


def test_drain(pb, stub):
    """An infer uploading at SIGTERM completes; calls after it get 503; exit 0."""
    server = Server("--shutdown_grace=20s")
    x = floats(1, 64, 64)
    want = grpc_answer(stub, pb, "sinusoidal", [("input", "FP32", x)], {})
    head, blob = infer_body([("input", "FP32", x)], {}, True, True)
    body = head + blob
    s = socket.create_connection(("127.0.0.1", server.http))
    s.sendall(b"POST /v2/models/sinusoidal/infer HTTP/1.1\r\nHost: x\r\n"
              b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
              % (len(head), len(body)) + body[:len(body) // 2])
    time.sleep(0.3)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    status, headers, data = request(server, "GET", "/v2/health/ready")
    check(status == 503, "ready during the drain: %s" % status)
    status, _, data = infer(server, "sinusoidal", json.dumps({"inputs": []}))
    check(status == 503 and "shutting down" in error_of(data),
          "a new infer during the drain: %s %s" % (status, data[:200]))
    check(server.proc.poll() is None, "the server waits for the call still uploading")
    s.sendall(body[len(body) // 2:])
    rhead, rbody = read_response(s, 10)
    check(rhead.startswith(b"HTTP/1.1 200"), "the accepted call: %r %r" % (rhead[:60], rbody[:200]))
    if rhead.startswith(b"HTTP/1.1 200"):
        hl = int(re.search(rb"Inference-Header-Content-Length: (\d+)", rhead, re.I).group(1))
        compare("drained call", parse_infer_answer({"Inference-Header-Content-Length": hl},
                                                   rbody)[1], want)
    s.close()
    check(server.proc.wait(timeout=30) == 0, "exit 0 after the drain")


def test_metrics(server):
    text = subprocess.run(["curl", "-sS", "http://127.0.0.1:%d/metrics" % server.metrics],
                          capture_output=True, text=True, check=True).stdout
    counts = {}
    for line in text.splitlines():
        m = re.match(r"posenc_requests_total\{(.*)\} (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            counts[(labels["method"], labels["scheme"], labels["code"])] = float(m.group(2))
    for key in (("HttpInfer", "rope", "OK"), ("HttpInfer", "graph_laplacian", "OK"),
                ("HttpInfer", "none", "NOT_FOUND"), ("HttpInfer", "sinusoidal", "INVALID_ARGUMENT"),
                ("HttpModelMetadata", "none", "OK"), ("HttpModelConfig", "none", "OK")):
        check(counts.get(key, 0) > 0, "posenc_requests_total%s is %s" % (key, counts.get(key)))


def main():
    import grpc
    pb, pb_grpc = load_stubs()
    table = os.path.join(WORK, "pos.npy")
    np.save(table, TABLE)
    server = Server("--table=pos=" + table)
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel("127.0.0.1:%d" % server.grpc))
        test_models(server, pb, stub)
        test_body_sizes(server, pb, stub)
        test_metadata(server)
        test_bad_input(server)
        test_metrics(server)
        test_shm(pb, stub)
        test_limits()
        test_drain(pb, stub)
    finally:
        code = server.stop()
        check(code == 0, "posenc-server exits 0 on SIGTERM (got %s)" % code)
        if FAILURES:
            print(server.output()[-3000:])
        shutil.rmtree(WORK, ignore_errors=True)
    if FAILURES:
        print("FAILED: %d checks" % len(FAILURES))
        sys.exit(1)
    print("PASS: HTTP/REST binding (every model against gRPC via tritonclient.http and curl, "
          "metadata, shared memory, bad input, limits, slow clients, drain)")


if __name__ == "__main__":
    main()
