#!/usr/bin/python3
"""How far RoPE and sinusoidal outputs are from float64, posenc against HF transformers' way.

For each position p, a query row q (float32, head_dim 128, standard normal) is rotated:
  - float64 reference: angles p * inv_freq and cos/sin computed in float64 (numpy);
  - HF's way: inv_freq, p * inv_freq, cos and sin in float32 (torch), as LlamaRotaryEmbedding
    and apply_rotary_pos_emb compute them;
  - posenc: an Encode call to a real server (float32 tensors; tables in float64, rounded once).
Prints the largest |output - float64| of each, per position. Sinusoidal likewise (the paper's
layout; the float32 way is `position * inv_freq` then sin/cos in float32).

  /usr/bin/python3 bench/fidelity.py [--target HOST:PORT] [--server build/server/posenc-server]

Without --target it starts the server itself. Needs numpy and torch (python3-torch) and the
posenc package (pip install ./client/python, or the build tree's build/client/python).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import posenc
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "build", "client", "python"))
    import posenc
try:
    import torch
except ImportError:
    sys.exit("fidelity.py: torch is not installed (apt-get install python3-torch)")

POSITIONS = [0, 1_000, 10_000, 100_000, 1_000_000]
HEAD_DIM = 128


def rope_reference(q, p, base):
    inv = base ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    ang = np.concatenate([p * inv, p * inv])
    half = np.concatenate([-q[HEAD_DIM // 2:], q[:HEAD_DIM // 2]]).astype(np.float64)
    return q.astype(np.float64) * np.cos(ang) + half * np.sin(ang)


def rope_hf(q, p, base):
    inv_freq = 1.0 / (base ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
    freqs = torch.tensor([float(p)], dtype=torch.float32)[:, None] @ inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    x = torch.from_numpy(q)[None, :]
    rot = torch.cat((-x[..., HEAD_DIM // 2:], x[..., :HEAD_DIM // 2]), dim=-1)
    return (x * emb.cos() + rot * emb.sin())[0].numpy()


def sin_reference(p, d):
    inv = 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    pe = np.zeros(d)
    pe[0::2], pe[1::2] = np.sin(p * inv), np.cos(p * inv)
    return pe


def sin_float32(p, d):
    inv = torch.exp(torch.arange(0, d, 2).float() * (-np.log(10000.0) / d))
    ang = torch.tensor(float(p)) * inv
    pe = torch.zeros(d)
    pe[0::2], pe[1::2] = torch.sin(ang), torch.cos(ang)
    return pe.numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target")
    parser.add_argument("--server", default=os.path.join(ROOT, "build", "server", "posenc-server"))
    args = parser.parse_args()
    server = None
    target = args.target
    if not target:
        server = subprocess.Popen([args.server, "--listen=127.0.0.1:0", "--metrics_listen=",
                                   "--threads=1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        target = re.search(r"grpc=(\S+)", server.stdout.readline()).group(1)
    try:
        client = posenc.Client(target)
        rng = np.random.default_rng(0)
        q = rng.standard_normal(HEAD_DIM).astype(np.float32)
        print("max |output - float64| per position (head_dim %d, float32 tensors)" % HEAD_DIM)
        print("| position | RoPE base 10000, HF | RoPE base 10000, posenc | RoPE base 500000, HF "
              "| RoPE base 500000, posenc | sinusoidal d=512, float32 | sinusoidal d=512, posenc |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for p in POSITIONS:
            cells = []
            for base in (10000.0, 500000.0):
                ref = rope_reference(q, p, base)
                hf = rope_hf(q, p, base)
                out = client.encode(q.reshape(1, 1, 1, HEAD_DIM), posenc.Rope(base=base),
                                    positions=p).reshape(HEAD_DIM)
                cells += [np.max(np.abs(hf - ref)), np.max(np.abs(out - ref))]
            x = np.zeros((1, 1, 512), np.float32)
            ref = sin_reference(p, 512)
            out = client.encode(x, posenc.Sinusoidal(), positions=p).reshape(512)
            cells += [np.max(np.abs(sin_float32(p, 512) - ref)), np.max(np.abs(out - ref))]
            print("| {:,} | ".format(p) + " | ".join("%.1e" % c for c in cells) + " |")
        client.close()
    finally:
        if server:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
