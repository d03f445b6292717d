#!/usr/bin/python3
"""Writes the sample files the documentation's examples read into DIR (default: build/samples
of this checkout, which git ignores), with Debian's python3-numpy:

  x.npy         embeddings [2, 16, 768] float32 (sinusoidal, learned)
  q.npy, k.npy  queries [1, 16, 28, 128] and GQA keys [1, 16, 4, 128] float32 (Qwen2.5-7B's
                heads, for `--hf-config=tests/fixtures/hf_configs/qwen2.5-7b-yarn.json`)
  s.npy         attention scores [1, 12, 1, 4096] float32 (ALiBi `--scores`)
  gpt2_wpe.npy  a learned position table [1024, 768] float32 shaped like GPT-2's wpe
                (random values, not GPT-2's weights: `--table wpe=gpt2_wpe.npy`)

    /usr/bin/python3 scripts/make_samples.py [DIR]
"""
import os
import sys

import numpy as np


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "samples")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    samples = {
        "x.npy": rng.standard_normal((2, 16, 768)),
        "q.npy": rng.standard_normal((1, 16, 28, 128)),
        "k.npy": rng.standard_normal((1, 16, 4, 128)),
        "s.npy": rng.standard_normal((1, 12, 1, 4096)),
        "gpt2_wpe.npy": 0.02 * rng.standard_normal((1024, 768)),
    }
    for name, values in samples.items():
        path = os.path.join(out, name)
        np.save(path, values.astype(np.float32))
        print("%s %s float32" % (path, list(values.shape)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
