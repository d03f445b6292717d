#!/usr/bin/python3
"""Runs the sidecar overlay (deploy/kubernetes/overlays/sidecar) as a real pod with
`podman kube play`: the posenc container and the example app container share the unix
socket and /dev/shm through their emptyDir volumes, as on a Kubernetes node. Checks that
the manifest's own readiness and liveness exec probes pass, that the app container reaches
posenc over the socket, inline and through shared memory, that /metrics counts those calls,
and that stopping the pod drains posenc to exit 0 within terminationGracePeriodSeconds.

Not part of ctest: it needs podman and the image (scripts/container_test.sh builds
localhost/posenc:test). Usage: scripts/kube_play_test.py [IMAGE]. Exit 0 pass, 1 fail.

Where podman 4.3 differs from a kubelet, the rendered manifest is adapted, and only there:
host networking has no port mappings (so `ports` go; /metrics moves to a free loopback
port), and podman does not expand $(VAR) in args, so this script expands them from the
ConfigMap the container's envFrom names, as the kubelet would.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import manifests_test  # noqa: E402  (the repository's kustomize renderer)

PODMAN = ["podman", "--runtime", os.environ.get("PODMAN_RUNTIME", "runc")]
NAME = "posenc-kubeplay"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expand(text, env):
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def adapt(docs, image, metrics_port):
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                  if d["kind"] == "ConfigMap"}
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["metadata"]["name"] = NAME
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        env = {}
        for ref in c.get("envFrom", []):
            env.update(configmaps[ref["configMapRef"]["name"]])
        env.update({e["name"]: e.get("value", "") for e in c.get("env", [])})
        c["image"] = image
        c.pop("ports", None)
        c["args"] = [expand(a, env) for a in c.get("args", [])]
        c["args"] = [("--metrics_listen=127.0.0.1:%d" % metrics_port)
                     if a.startswith("--metrics_listen=") else a for a in c["args"]]
    return deployment


def podman(*args, check=True, timeout=60):
    out = subprocess.run(PODMAN + list(args), capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError("podman %s: %s" % (" ".join(args), out.stderr.strip()))
    return out


def wait_for(what, fn, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if fn():
            return True
        time.sleep(0.5)
    print("FAIL: %s within %d s" % (what, seconds))
    return False


def main():
    image = sys.argv[1] if len(sys.argv) > 1 else "localhost/posenc:test"
    if podman("image", "exists", image, check=False).returncode != 0:
        print("FAIL: no image %s (run scripts/container_test.sh first)" % image)
        return 1
    docs = manifests_test.rendered(os.path.join(ROOT, "deploy", "kubernetes"), "overlays/sidecar")
    if manifests_test.failures:
        print("FAIL: rendering: %s" % manifests_test.failures)
        return 1
    metrics_port = free_port()
    deployment = adapt(docs, image, metrics_port)
    spec = deployment["spec"]["template"]["spec"]
    posenc = next(c for c in spec["containers"] if c["name"] == "posenc")
    pod = NAME + "-pod-0"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all([d for d in docs if d["kind"] == "ConfigMap"] + [deployment], f)
        manifest = f.name
    ok = True
    try:
        podman("kube", "play", "--network", "host", manifest, timeout=120)

        def probe(p):
            return podman("exec", pod + "-posenc", *p["exec"]["command"],
                          check=False).returncode == 0

        ok &= wait_for("the readiness probe passes", lambda: probe(posenc["readinessProbe"]))
        ok &= wait_for("the liveness probe passes", lambda: probe(posenc["livenessProbe"]))
        sock = "--target=unix:/var/run/posenc/posenc.sock"
        for extra in ([], ["--shm"]):
            out = podman("exec", pod + "-app", "posenc-client", "encode", sock,
                         "--shape=2,16,64", *extra, check=False)
            if out.returncode != 0:
                print("FAIL: app container encode %s: %s" % (extra, out.stderr.strip()))
                ok = False
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                      timeout=5).read().decode()
        m = re.search(r'^posenc_requests_total\{code="OK",method="Encode",scheme="sinusoidal"\}'
                      r" (\d+)", text, re.M)
        if not m or int(m.group(1)) < 2:
            print("FAIL: /metrics counts %s OK Encode calls, not >= 2" % (m and m.group(1)))
            ok = False
        shm = re.search(r'^posenc_processed_bytes_total\{direction="in",transport="shm"\} (\S+)',
                        text, re.M)
        if not shm or float(shm.group(1)) <= 0:
            print("FAIL: no bytes counted through shared memory")
            ok = False
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        podman("pod", "stop", "-t", str(grace), pod, timeout=grace + 30)
        code = podman("inspect", pod + "-posenc", "--format", "{{.State.ExitCode}}").stdout
        if code.strip() != "0":
            print("FAIL: posenc exited %s on pod stop, not 0" % code.strip())
            ok = False
    finally:
        podman("kube", "down", manifest, check=False, timeout=120)
        os.unlink(manifest)
    if ok:
        print("PASS: the sidecar pod runs under podman kube play (image %s): probes pass, the "
              "app reaches posenc over the socket and shared memory, stop drains to exit 0"
              % image)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
