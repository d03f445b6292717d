#!/usr/bin/python3
"""Runs the sidecar overlay (deploy/kubernetes/overlays/sidecar) as a real pod with
`podman kube play --network host`: the posenc container and the example app container share
the unix socket and /dev/shm through their emptyDir volumes, as on a Kubernetes node. Checks
that the manifest's own readiness and liveness exec probes pass, that the app container
reaches posenc over the socket, inline and through shared memory, that /metrics counts those
calls, and that stopping the pod takes under 3 s (the app exits on SIGTERM, posenc drains)
with posenc's exit status 0.

The manifest is played as kustomize renders it, unchanged: its ConfigMap reaches posenc as
POSENC_* variables, and under host networking posenc's metrics are on the host's port 9464
and its loopback HTTP port 8000 (which must be free). Only the image may be swapped, when
IMAGE is not the manifest's own.

Not part of ctest: it needs podman and the image (scripts/container_test.sh builds
localhost/posenc:test; CONTAINER_IMAGE names another). Usage: scripts/kube_play_test.py
[IMAGE] (default: the manifest's image, localhost/posenc:dev). Exit 0 pass, 1 fail.
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


def with_image(docs, image):
    """The rendered documents with every container's image set to `image` (when given)."""
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    if image:
        for c in deployment["spec"]["template"]["spec"]["containers"]:
            c["image"] = image
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
    image = sys.argv[1] if len(sys.argv) > 1 else None
    docs = manifests_test.rendered(os.path.join(ROOT, "deploy", "kubernetes"), "overlays/sidecar")
    if manifests_test.failures:
        print("FAIL: rendering: %s" % manifests_test.failures)
        return 1
    deployment = with_image(docs, image)
    spec = deployment["spec"]["template"]["spec"]
    posenc = next(c for c in spec["containers"] if c["name"] == "posenc")
    for c in spec["containers"]:
        if podman("image", "exists", c["image"], check=False).returncode != 0:
            print("FAIL: no image %s (scripts/container_test.sh builds one; pass it as IMAGE)"
                  % c["image"])
            return 1
    # Under --network host the pod's TCP listeners are the host's: they must be free.
    binds = {}
    for arg in posenc["args"]:
        m = re.match(r"--(\w+_listen)=([\d.]+):(\d+)", arg.split("#")[0].strip())
        if m:
            binds[m.group(1)] = (m.group(2), int(m.group(3)))
    for flag, (host, port) in binds.items():
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                print("FAIL: %s:%d (--%s) is in use on this host; the manifest's posenc binds "
                      "it under --network host" % (host, port, flag))
                return 1
    metrics_port = binds["metrics_listen"][1]
    pod = deployment["metadata"]["name"] + "-pod-0"
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
        start = time.monotonic()
        podman("pod", "stop", "-t", str(grace), pod, timeout=grace + 30)
        stopped_in = time.monotonic() - start
        if stopped_in >= 3:
            print("FAIL: the pod took %.1f s to stop (a container that ignores SIGTERM waits "
                  "out the grace period)" % stopped_in)
            ok = False
        for c in spec["containers"]:
            code = podman("inspect", pod + "-" + c["name"], "--format",
                          "{{.State.ExitCode}}").stdout.strip()
            if code != "0":
                print("FAIL: container %s exited %s on pod stop, not 0" % (c["name"], code))
                ok = False
    finally:
        podman("kube", "down", manifest, check=False, timeout=120)
        os.unlink(manifest)
    if ok:
        print("PASS: the committed sidecar pod runs under podman kube play (image %s): probes "
              "pass, the app reaches posenc over the socket and shared memory, the pod stops "
              "in %.1f s with exit 0" % (posenc["image"], stopped_in))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
