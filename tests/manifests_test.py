#!/usr/bin/python3
"""Checks deploy/kubernetes (kustomize base + overlays standalone and sidecar) without a
cluster: parses every manifest, renders each overlay (with `kubectl kustomize` when it is
installed, and always with the small strategic-merge renderer below, and requires both to
agree), then checks the Pod Security "restricted" fields, probes, resources, ports, the
HPA/PDB/PodMonitor wiring, the grace period against --shutdown_grace, and that every flag
passed to posenc-server (as an arg, or as a POSENC_* variable of the container's environment)
exists in its --help; args hold no $(VAR), which podman kube play does not expand. Finally it
starts the real posenc-server with each overlay's rendered args (addresses moved to loopback /
a temporary socket) and environment, checks that the POSENC_* settings reached it, and runs
the overlay's probes against it: gRPC health "" and "liveness", or the sidecar's exec probes.

Usage: manifests_test.py BUILD_DIR SOURCE_DIR. Exit 0 pass, 1 fail.
"""
import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

# Flags the manifests use before posenc-server has them (the shared-memory wiring lands in
# another branch). Remove an entry once `posenc-server --help` lists it.
OVERLAYS = ("base", "overlays/standalone", "overlays/sidecar")
# Strategic-merge keys of the lists the manifests patch (Kubernetes' patchMergeKey).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name",
              "env": "name", "volumeMounts": "mountPath", "ports": "containerPort"}
# Volume types Pod Security "restricted" allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


# -- rendering --------------------------------------------------------------------------
def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def merge(base, patch):
    """Kubernetes strategic merge of `patch` into `base` (the subset these manifests use:
    maps merge, lists in MERGE_KEYS merge by key, `$patch: replace|delete`)."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = copy.deepcopy(base) if isinstance(base, dict) else {}
        for key, value in patch.items():
            if key in MERGE_KEYS and isinstance(value, list):
                out[key] = merge_list(out.get(key, []), value, MERGE_KEYS[key])
            else:
                out[key] = merge(out.get(key), value)
        return out
    return copy.deepcopy(patch)


def merge_list(base, patch, key):
    out = copy.deepcopy(base)
    for item in patch:
        index = next((i for i, b in enumerate(out) if b.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(copy.deepcopy(item))
        else:
            out[index] = merge(out[index], item)
    return out


def render(directory):
    """The resources of a kustomization (resources + strategic-merge `patches` only)."""
    kustomization = load_docs(os.path.join(directory, "kustomization.yaml"))[0]
    unsupported = set(kustomization) - {"apiVersion", "kind", "resources", "patches"}
    check(not unsupported, "%s: kustomization fields %s are not rendered by this test"
          % (directory, sorted(unsupported)))
    resources = []
    for entry in kustomization.get("resources", []):
        path = os.path.join(directory, entry)
        resources += render(path) if os.path.isdir(path) else load_docs(path)
    for entry in kustomization.get("patches", []):
        for patch in load_docs(os.path.join(directory, entry["path"])):
            ident = (patch["kind"], patch["metadata"]["name"])
            index = next((i for i, r in enumerate(resources)
                          if (r["kind"], r["metadata"]["name"]) == ident), None)
            if not check(index is not None, "%s: patch %s targets nothing" % (directory, ident)):
                continue
            if patch.get("$patch") == "delete":
                del resources[index]
            else:
                resources[index] = merge(resources[index], patch)
    return resources


def by_identity(resources):
    return {(r["kind"], r["metadata"]["name"]): r for r in resources}


def rendered(root, overlay):
    ours = render(os.path.join(root, overlay))
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", os.path.join(root, overlay)],
                             capture_output=True, text=True)
        if check(out.returncode == 0, "kubectl kustomize %s: %s" % (overlay, out.stderr)):
            theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
            check(by_identity(theirs) == by_identity(ours),
                  "%s: kubectl kustomize and this test's renderer disagree" % overlay)
    return ours


# -- checks -----------------------------------------------------------------------------
def duration_seconds(text):
    m = re.fullmatch(r"([0-9.]+)(ms|s|m)?", text)
    if not m:
        return None
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]


def container_env(container, configmaps):
    """The environment a kubelet gives the container: its envFrom ConfigMaps, then env."""
    env = {}
    for source in container.get("envFrom", []):
        name = source.get("configMapRef", {}).get("name")
        if check(name in configmaps, "envFrom ConfigMap %s is not rendered" % name):
            env.update(configmaps[name].get("data", {}))
    env.update({e["name"]: e.get("value", "") for e in container.get("env", [])})
    return env


def posenc_args(container):
    """The container's args; none may hold $(VAR), which podman kube play leaves as is."""
    args = container.get("args", [])
    for arg in args:
        check("$(" not in arg, "arg %s: $(VAR) is expanded by a kubelet but not by podman; "
              "set the flag through a POSENC_* variable instead" % arg)
    return args


def env_flags(env):
    """The flags posenc-server reads from POSENC_* variables (POSENC_CACHE_BYTES: cache_bytes)."""
    return {k[len("POSENC_"):].lower(): v for k, v in env.items() if k.startswith("POSENC_")}


def flag_map(args):
    flags = {}
    for arg in args:
        if check(arg.startswith("--") and "=" in arg, "arg %r is not --name=value" % arg):
            name, value = arg[2:].split("=", 1)
            flags[name] = value
    return flags


def check_security(where, pod):
    sc = pod.get("securityContext", {})
    check(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          "%s: pod seccompProfile must be RuntimeDefault" % where)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        check(not pod.get(key), "%s: %s is not allowed" % (where, key))
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        check(kinds <= RESTRICTED_VOLUMES, "%s: volume %s uses %s" % (where, volume["name"], kinds))
    for c in pod["containers"]:
        csc = c.get("securityContext", {})
        name = "%s container %s" % (where, c["name"])
        check(csc.get("runAsNonRoot", sc.get("runAsNonRoot")) is True, name + ": runAsNonRoot")
        check(csc.get("allowPrivilegeEscalation") is False, name + ": allowPrivilegeEscalation")
        check(csc.get("capabilities", {}).get("drop") == ["ALL"], name + ": capabilities.drop")
        check(not csc.get("capabilities", {}).get("add"), name + ": capabilities.add")
        check(csc.get("readOnlyRootFilesystem") is True, name + ": readOnlyRootFilesystem")
        check(not csc.get("privileged"), name + ": privileged")
        check(csc.get("runAsUser", sc.get("runAsUser", 1)) != 0, name + ": runs as root")
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            for what in ("cpu", "memory"):
                check(what in res.get(kind, {}), "%s: resources.%s.%s" % (name, kind, what))


def check_posenc(where, pod, annotations, posenc, flags, help_flags):
    ports = {p["name"]: p["containerPort"] for p in posenc.get("ports", [])}
    metrics_port = int(flags.get("metrics_listen", ":0").rsplit(":", 1)[1])
    annotated = annotations.get("prometheus.io/port")
    check(ports.get("metrics", annotated and int(annotated)) == metrics_port,
          "%s: port 'metrics' (or the prometheus.io/port annotation) must be --metrics_listen's"
          % where)
    http = flags.get("http_listen", "0.0.0.0:8000")
    if http and not http.startswith("127."):
        check(ports.get("http") == int(http.rsplit(":", 1)[1]),
              "%s: port 'http' must be --http_listen's" % where)
    else:
        check("http" not in ports, "%s: port 'http' names a loopback-only --http_listen" % where)
    grace = duration_seconds(flags.get("shutdown_grace", "8s"))
    check(grace is not None and pod.get("terminationGracePeriodSeconds", 30) > grace,
          "%s: terminationGracePeriodSeconds must exceed --shutdown_grace" % where)
    check(flags.get("threads") == str(posenc["resources"]["limits"]["cpu"]),
          "%s: --threads should equal the CPU limit" % where)
    unknown = set(flags) - help_flags
    check(not unknown, "%s: posenc-server has no flag %s" % (where, sorted(unknown)))


def check_tcp_probes(where, posenc, flags):
    listen_port = int(flags["listen"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in posenc.get("ports", [])}
    check(ports.get("grpc") == listen_port, "%s: port 'grpc' must be --listen's" % where)
    ready, live = posenc.get("readinessProbe", {}), posenc.get("livenessProbe", {})
    check(ready.get("grpc") == {"port": 50051, "service": ""},
          "%s: readiness must be grpc port 50051 service \"\"" % where)
    check(live.get("grpc") == {"port": 50051, "service": "liveness"},
          "%s: liveness must be grpc port 50051 service liveness" % where)


def check_sidecar(where, pod, posenc, flags):
    socket = flags["listen"][len("unix:"):] if flags["listen"].startswith("unix:") else None
    if not check(socket, "%s: posenc must listen on a unix socket" % where):
        return
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    others = [c for c in pod["containers"] if c is not posenc]
    check(others, "%s: no app container" % where)
    for c in [posenc] + others:
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        sock_volume = mounts.get(os.path.dirname(socket))
        check(sock_volume in volumes and "emptyDir" in volumes[sock_volume],
              "%s: %s must mount the socket's emptyDir at %s" % (where, c["name"],
                                                                  os.path.dirname(socket)))
        shm_volume = mounts.get("/dev/shm")
        check(shm_volume in volumes and volumes[shm_volume].get("emptyDir", {}).get("medium")
              == "Memory", "%s: %s must mount a Memory emptyDir at /dev/shm" % (where, c["name"]))
    check("shm" in flags, "%s: posenc must run with --shm" % where)
    for probe, service in (("readinessProbe", None), ("livenessProbe", "liveness")):
        cmd = posenc.get(probe, {}).get("exec", {}).get("command", [])
        check(cmd[:2] == ["posenc-client", "health"] and "--target=unix:" + socket in cmd,
              "%s: %s must run posenc-client health on the socket" % (where, probe))
        check(("--service=" + service in cmd) if service else not any(
            a.startswith("--service") for a in cmd), "%s: %s service" % (where, probe))


def check_scaling(where, docs, pod_labels, deployment):
    def selects(selector):
        return all(pod_labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    svc = docs.get(("Service", "posenc"))
    if check(svc is not None, where + ": no Service"):
        check(svc["spec"].get("clusterIP") == "None", where + ": Service must be headless")
        check(selects({"matchLabels": svc["spec"]["selector"]}), where + ": Service selector")
        check({"name": "grpc", "port": 50051, "targetPort": "grpc"} in svc["spec"]["ports"],
              where + ": Service port grpc 50051")
    hpa = docs.get(("HorizontalPodAutoscaler", "posenc"))
    if check(hpa is not None, where + ": no HPA"):
        ref = hpa["spec"]["scaleTargetRef"]
        check((ref["kind"], ref["name"]) == ("Deployment", deployment["metadata"]["name"]),
              where + ": HPA target")
        check([m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"], where + ": HPA on CPU")
        check(2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], where + ": HPA range")
    pdb = docs.get(("PodDisruptionBudget", "posenc"))
    if check(pdb is not None, where + ": no PodDisruptionBudget"):
        check(selects(pdb["spec"]["selector"]), where + ": PDB selector")
        check("maxUnavailable" in pdb["spec"] or pdb["spec"].get("minAvailable", 0) <
              (hpa or {}).get("spec", {}).get("minReplicas", 1), where + ": PDB blocks drains")
    mon = docs.get(("PodMonitor", "posenc"))
    if check(mon is not None, where + ": no PodMonitor"):
        check(mon["apiVersion"] == "monitoring.coreos.com/v1", where + ": PodMonitor apiVersion")
        check(selects(mon["spec"]["selector"]), where + ": PodMonitor selector")
        named = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        check(all(e["port"] in named for e in mon["spec"]["podMetricsEndpoints"]),
              where + ": PodMonitor port must be a named container port")


# -- the real server with each overlay's args -------------------------------------------
def run_server(build, where, flags, env, probes):
    """Starts posenc-server with `flags` (addresses already moved) as args and the
    container's environment `env`, checks that the start line shows the POSENC_* settings,
    runs each probe command (argv lists), then SIGTERM; every probe and the exit must
    succeed. The settings the start line shows are set to values unlike the server's
    defaults (threads 1, half the message limit, a 7 s grace), so that the check sees the
    variables' names read, not defaults that happen to be equal."""
    env = dict(env)
    for name, value in (("POSENC_THREADS", "1"), ("POSENC_SHUTDOWN_GRACE", "7s"),
                        ("POSENC_MAX_MESSAGE_BYTES", str(int(env.get("POSENC_MAX_MESSAGE_BYTES", 0) or 0) // 2))):
        if name in env:
            env[name] = value
    args = [os.path.join(build, "server", "posenc-server")] + [
        "--%s=%s" % kv for kv in flags.items()]
    with tempfile.TemporaryFile("w+") as out:
        server = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True,
                                  env=dict(os.environ, **env))
        try:
            line = ""
            for _ in range(100):
                out.seek(0)
                line = out.read()
                if " listening " in line or server.poll() is not None:
                    break
                time.sleep(0.1)
            if not check(" listening " in line, "%s: posenc-server did not start: %s"
                         % (where, line.strip())):
                return
            grpc_address = re.search(r" grpc=(\S+)", line).group(1)
            for name in ("threads", "max_message_bytes", "shutdown_grace"):
                value = env_flags(env).get(name)
                if value is not None and name not in flags:
                    check(re.search(r" %s=%s( |$)" % (name, re.escape(value)), line, re.M),
                          "%s: POSENC_%s=%s did not reach the server: %s"
                          % (where, name.upper(), value, line.strip()))
            for probe in probes:
                argv = [a.replace("@GRPC@", grpc_address) for a in probe]
                result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
                check(result.returncode == 0, "%s: probe %s failed: %s%s"
                      % (where, " ".join(argv[1:]), result.stdout, result.stderr))
        finally:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=30)
        check(code == 0, "%s: posenc-server exited %s after SIGTERM" % (where, code))


def exercise(build, where, flags, env, posenc, sidecar, tmp):
    flags = dict(flags, metrics_listen="127.0.0.1:0", http_listen="127.0.0.1:0")
    cli = os.path.join(build, "client", "posenc-client")
    if sidecar:
        socket = os.path.join(tmp, "posenc.sock")
        old = flags["listen"]
        flags["listen"] = "unix:" + socket
        probes = []
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = posenc[probe]["exec"]["command"]
            probes.append([cli] + [a.replace(old, flags["listen"]) for a in cmd[1:]])
    else:
        flags["listen"] = "127.0.0.1:0"
        probes = [[cli, "health", "--target=@GRPC@", "--service=" + posenc[p]["grpc"]["service"]]
                  for p in ("readinessProbe", "livenessProbe")]
    run_server(build, where, flags, env, probes)


def main():
    build, root = sys.argv[1], os.path.join(sys.argv[2], "deploy", "kubernetes")
    help_text = subprocess.run([os.path.join(build, "server", "posenc-server"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    help_flags = set(re.findall(r"--([a-z_]+)", help_text))
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith((".yaml", ".yml")):
                for doc in load_docs(os.path.join(dirpath, f)):
                    check("kind" in doc and "apiVersion" in doc, "%s: no kind/apiVersion" % f)
    with tempfile.TemporaryDirectory() as tmp:
        for overlay in OVERLAYS:
            docs = by_identity(rendered(root, overlay))
            configmaps = {n: d for (k, n), d in docs.items() if k == "ConfigMap"}
            deployment = docs.get(("Deployment", "posenc"))
            if not check(deployment is not None, overlay + ": no Deployment posenc"):
                continue
            pod = deployment["spec"]["template"]["spec"]
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            check(all(labels.get(k) == v for k, v in
                      deployment["spec"]["selector"]["matchLabels"].items()),
                  overlay + ": selector does not match the pod's labels")
            check_security(overlay, pod)
            posenc = next(c for c in pod["containers"] if c["name"] == "posenc")
            env = container_env(posenc, configmaps)
            args_flags = flag_map(posenc_args(posenc))
            flags = dict(env_flags(env), **args_flags)  # a flag on the command line wins
            annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
            check_posenc(overlay, pod, annotations, posenc, flags, help_flags)
            sidecar = overlay.endswith("sidecar")
            if sidecar:
                check_sidecar(overlay, pod, posenc, flags)
                check(("Service", "posenc") not in docs, overlay + ": no Service expected")
            else:
                check_tcp_probes(overlay, posenc, flags)
            if overlay.endswith("standalone"):
                check_scaling(overlay, docs, labels, deployment)
            if not failures:
                exercise(build, overlay, args_flags, env, posenc, sidecar, tmp)
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("PASS: %d overlays render and pass the checks; each ran against posenc-server"
          % len(OVERLAYS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
