"""What the Python integration tests of the Open Inference Protocol share: the generated
gRPC stubs of proto/inference and a real posenc-server on ports it picks."""
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time


def inference_stubs(src, work):
    """protoc's Python output for proto/inference in work/stubs, importable; returns the
    (grpc_service_pb2, grpc_service_pb2_grpc) modules."""
    out = os.path.join(work, "stubs")
    os.makedirs(out)
    proto = os.path.join(src, "proto")
    subprocess.run(["protoc", "-I", proto, "--python_out=" + out, "--grpc_python_out=" + out,
                    "--plugin=protoc-gen-grpc_python=" + (shutil.which("grpc_python_plugin")
                                                          or "/usr/bin/grpc_python_plugin"),
                    os.path.join(proto, "inference", "grpc_service.proto"),
                    os.path.join(proto, "inference", "model_config.proto")], check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("inference.grpc_service_pb2"),
            importlib.import_module("inference.grpc_service_pb2_grpc"))


class PosencServer:
    """posenc-server on port 0 for gRPC, HTTP and metrics; the start line gives the ports."""

    def __init__(self, build, work, *flags):
        self.log = open(os.path.join(work, "server%d.log" % id(self)), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(build, "server", "posenc-server"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", "--http_listen=127.0.0.1:0", "--threads=1"]
            + list(flags), stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            self.log.seek(0)
            m = re.search(r"grpc=\S+:(\d+) metrics=\S+:(\d+) http=\S+:(\d+)", self.log.read())
            if m:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("posenc-server did not start: " + self.output())
        self.grpc, self.metrics, self.http = (int(p) for p in m.groups())
        self.url = "127.0.0.1:%d" % self.http

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def rss_mib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            kib = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        return kib / 1024

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)
