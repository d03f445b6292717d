#!/usr/bin/python3
"""posenc from Python: the sinusoidal encoding of a float32 [1, 8, 16] tensor and a RoPE
rotation from an HF config.json, each checked against a float64 numpy reference.

Build first (the build generates the Python stubs), start a server, then run as written:

    ninja -C build && build/server/posenc-server --listen=127.0.0.1:50051 &
    /usr/bin/python3 client/python/posenc_example.py --target 127.0.0.1:50051

Uses Debian's python3-grpcio and python3-numpy. The package is client/python/posenc; this
script puts that folder on sys.path itself. Exit status 0 when both results match numpy.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import posenc  # noqa: E402  (needs the sys.path line above)

REPO = os.path.dirname(os.path.dirname(HERE))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="host:port or unix:/path")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 16)).astype(np.float32)
    q = rng.standard_normal((1, 8, 32, 128)).astype(np.float32)  # [batch, seq, heads, head_dim]
    rope = posenc.Rope.from_hf_config(os.path.join(REPO, "tests/fixtures/hf_configs/mistral-7b.json"))
    try:
        with posenc.Client(args.target) as client:
            y = client.encode(x, posenc.Sinusoidal())
            q_rot = client.encode(q, rope, positions=100)
    except posenc.PosencError as err:
        print("posenc failed: %s: %s" % (err.code.name, err.details), file=sys.stderr)
        return 1

    # pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(...), in float64.
    p, i = np.arange(8.0)[:, None], np.arange(0, 16, 2)
    pe = np.zeros((8, 16))
    pe[:, 0::2], pe[:, 1::2] = np.sin(p / 1e4 ** (i / 16)), np.cos(p / 1e4 ** (i / 16))
    err_sin = np.abs(y - (x + pe)).max()
    # RoPE (rotate_half) at positions 100..107 with Mistral's theta.
    theta = rope.proto().base
    angles = np.arange(100.0, 108.0)[:, None] * theta ** (-np.arange(0, 128, 2) / 128.0)
    cos = np.concatenate([np.cos(angles)] * 2, -1)[None, :, None]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[None, :, None]
    q64 = q.astype(np.float64)
    want = q64 * cos + np.concatenate([-q64[..., 64:], q64[..., :64]], -1) * sin
    err_rope = np.abs(q_rot - want).max()
    print("sinusoidal: shape %s, max |server - numpy| = %.2g" % (list(y.shape), err_sin))
    print("rope (theta %g): shape %s, max |server - numpy| = %.2g"
          % (theta, list(q_rot.shape), err_rope))
    if err_sin > 2e-6 or err_rope > 2e-5:
        print("MISMATCH against numpy", file=sys.stderr)
        return 1
    print("matches numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
