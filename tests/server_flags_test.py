#!/usr/bin/python3
"""posenc-server's flags: every flag --help lists is in docs/operations.md's flags table and the
other way round, and each can come from the environment as POSENC_<NAME> with the command
line winning. Usage: server_flags_test.py BUILD_DIR SOURCE_DIR"""
import os
import re
import signal
import socket
import subprocess
import sys

build, source = sys.argv[1], sys.argv[2]
server = os.path.join(build, "server", "posenc-server")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, env_extra, timeout=10):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    env.update(env_extra)
    return subprocess.run([server] + args, env=env, capture_output=True, text=True,
                          timeout=timeout)


# --help lists each flag at the start of a line: "  --name".
help_text = run(["--help"], {}).stdout
help_flags = set(re.findall(r"^  --([a-z_]+)", help_text, re.M))
check(len(help_flags) >= 20, f"--help lists {len(help_flags)} flags")

readme = open(os.path.join(source, "docs", "operations.md"), encoding="utf-8").read()
section = readme.split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
readme_flags = set()
for line in section.splitlines():
    if line.startswith("| `--"):
        readme_flags.update(re.findall(r"`--([a-z_]+)`", line.split("|")[1]))
check(help_flags - readme_flags == set(),
      f"every --help flag is in the docs/operations.md table (missing: {sorted(help_flags - readme_flags)})")
check(readme_flags - help_flags == set(),
      f"every docs/operations.md flag is in --help (missing: {sorted(readme_flags - help_flags)})")

# A bad value from the environment names the variable and exits 2.
bad = run([], {"POSENC_THREADS": "x"})
check(bad.returncode == 2 and "POSENC_THREADS (--threads) 'x'" in bad.stderr,
      f"POSENC_THREADS=x: exit {bad.returncode}, {bad.stderr.strip()!r}")
bad = run(["--listen=127.0.0.1:0", "--metrics_listen=", "--http_listen="],
          {"POSENC_MAX_MESSAGE_BYTES": "100"})
check(bad.returncode != 0 and "--max_message_bytes=100 is under 4096" in bad.stderr,
      f"POSENC_MAX_MESSAGE_BYTES=100 is refused: {bad.stderr.strip()!r}")
bad = run([], {"POSENC_LISTEN": "unix-abstract:posenc-test", "POSENC_METRICS_LISTEN": "",
                "POSENC_HTTP_LISTEN": ""})
check(bad.returncode != 0 and "--listen_allow_abstract" in bad.stderr,
      f"unix-abstract refused without --listen_allow_abstract: {bad.stderr.strip()!r}")

# A port another socket holds is named with its flag; every flag is checked before any port
# is bound, so a bad flag is reported even while the ports are taken.
holder = socket.socket()
holder.bind(("127.0.0.1", 0))
holder.listen()
busy = holder.getsockname()[1]
try:
    for flag, args in (("--listen", [f"--listen=127.0.0.1:{busy}", "--metrics_listen="]),
                       ("--metrics_listen", ["--listen=127.0.0.1:0",
                                             f"--metrics_listen=127.0.0.1:{busy}"])):
        bad = run(args + ["--http_listen="], {})
        want = f"posenc-server: port {busy} on 127.0.0.1 is in use ({flag})"
        check(bad.returncode == 1 and bad.stderr.strip() == want,
              f"{flag} on a busy port: exit {bad.returncode}, {bad.stderr.strip()!r}")
    taken = [f"--listen=127.0.0.1:{busy}", f"--metrics_listen=127.0.0.1:{busy}",
             "--http_listen="]
    for flag, want in (("--max_message_bytes=100", "--max_message_bytes=100 is under 4096"),
                       ("--table=t=/nonexistent/t.npy", "--table=t=/nonexistent/t.npy"),
                       ("--tls_cert=/nonexistent/c.pem", "--tls_cert needs --tls_key"),
                       ("--threads=x", "--threads")):
        bad = run(taken + [flag], {})
        check(bad.returncode != 0 and want in bad.stderr and "in use" not in bad.stderr,
              f"{flag} is refused before the busy ports are bound: {bad.stderr.strip()!r}")
finally:
    holder.close()

# POSENC_KERNEL (--kernel): a value that names no implementation, or an instruction set this
# CPU lacks, is refused at start with the choices or the reason.
bad = run([], {"POSENC_KERNEL": "loop"})
check(bad.returncode == 2 and "POSENC_KERNEL (--kernel) 'loop' is not one of auto, scalar, "
      "avx2, avx512, onednn" in bad.stderr,
      f"POSENC_KERNEL=loop: exit {bad.returncode}, {bad.stderr.strip()!r}")
cpu_flags = set()
with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
    for line in cpuinfo:
        if line.startswith("flags"):
            cpu_flags = set(line.split(":", 1)[1].split())
            break
has_avx512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags
if not has_avx512:
    bad = run(["--kernel=avx512"], {})
    check(bad.returncode == 2 and "--kernel 'avx512' is not an instruction set this CPU has"
          in bad.stderr, f"--kernel=avx512 without AVX-512: exit {bad.returncode}, "
          f"{bad.stderr.strip()!r}")

# The command line wins over the environment; the environment fills the rest.
env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
env.update({"POSENC_THREADS": "x", "POSENC_METRICS_LISTEN": "", "POSENC_HTTP_LISTEN": "",
            "POSENC_LOG_REQUESTS": "true", "POSENC_LISTEN": "127.0.0.1:0",
            "POSENC_KERNEL": "scalar"})
proc = subprocess.Popen([server, "--threads=1"], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
try:
    line = proc.stdout.readline()
    check("grpc=127.0.0.1:" in line and "metrics=off" in line and "http=off" in line
          and "threads=1" in line,
          f"started from the environment and the command line: {line.strip()!r}")
finally:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
check(proc.returncode == 0, f"exit status {proc.returncode} after SIGTERM")
log = proc.stderr.read()
check("kernel=scalar" in log, f"the start log names the kernel override: {log.strip()[:300]!r}")

sys.exit(1 if failures else 0)
