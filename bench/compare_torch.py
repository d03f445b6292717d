#!/usr/bin/python3
"""Times HF transformers' formulas in PyTorch eager against posenc's kernels, same shapes.

RoPE: HF's LlamaRotaryEmbedding (cos/sin computed per call, HF's way) + apply_rotary_pos_emb
with rotate_half (NEOX), and GPT-J's rotate_every_two with its sincos (GPTJ). Sinusoidal:
the usual `x + pe[:seq]` with pe a precomputed buffer (as a module would hold it).
posenc's numbers come from `posenc-bench --kernels-only --json` run by this script, so both
sides are measured in the same session on the same machine: one row per ISA posenc-bench
ran (AVX2 everywhere, AVX-512 where present), each judged. Prints posenc's speed-up.

  /usr/bin/python3 bench/compare_torch.py [--bench build-dir/bench/posenc-bench] [--quick]

Exits 0 with a message when torch is not installed (apt-get install python3-torch).
"""
import argparse
import json
import os
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("compare_torch.py: PyTorch is not installed for this python "
          f"({sys.executable}); install python3-torch to compare. Skipping.")
    sys.exit(0)


def find_bench(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in ("build",):
        path = os.path.join(root, build, "bench", "posenc-bench")
        if os.path.exists(path):
            return path
    sys.exit("compare_torch.py: posenc-bench not found; pass --bench PATH")


def best_ms(fn, budget_s, min_reps=3):
    fn()  # warm-up
    best = float("inf")
    start = time.perf_counter()
    reps = 0
    while reps < min_reps or time.perf_counter() - start < budget_s:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        reps += 1
    return best * 1e3


# --- HF transformers, as in modeling_llama.py / modeling_rope_utils.py (default rope) ------

def hf_llama_cos_sin(x, position_ids, head_dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    attention_scaling = 1.0
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb_q(q, cos, sin, unsqueeze_dim):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


# --- HF GPT-J (modeling_gptj.py) ----------------------------------------------------------

def create_sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(),
                                inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def gptj_apply(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


def torch_cases(quick):
    sizes = [("small", (1, 128, 768), (1, 128, 12, 64))]
    if not quick:
        sizes.append(("large", (8, 2048, 4096), (4, 2048, 32, 128)))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for size, emb_shape, q_shape in sizes:
        budget = 0.2 if size == "small" else 1.0
        b, s, d = emb_shape
        for dt in ("fp32", "bf16"):
            x = torch.full(emb_shape, 0.25, dtype=dtypes[dt])
            # pe as a module buffer: computed at init, cast to the model's dtype.
            pe = create_sinusoidal_positions(s, d).to(dtypes[dt])
            yield ("sinusoidal_add", size, dt, best_ms(lambda: x + pe[:s], budget))
            del x
        bq, sq, hq, dq = q_shape
        for dt in ("fp32", "bf16"):
            q = torch.full(q_shape, 0.25, dtype=dtypes[dt])
            position_ids = torch.arange(sq)[None].expand(bq, -1)

            def neox():
                cos, sin = hf_llama_cos_sin(q, position_ids, dq)
                return apply_rotary_pos_emb_q(q, cos, sin, unsqueeze_dim=2)  # BSHD

            embed_positions = create_sinusoidal_positions(sq, dq)

            def gptj():
                sincos = embed_positions[position_ids]
                sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
                return gptj_apply(q, sin.to(q.dtype), cos.to(q.dtype))

            yield ("rope_neox", size, dt, best_ms(neox, budget))
            yield ("rope_gptj", size, dt, best_ms(gptj, budget))
            del q


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", help="path to posenc-bench")
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads and posenc kernel threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    cmd = [find_bench(args.bench), "--kernels-only", "--json", f"--threads={args.threads}"]
    if args.quick:
        cmd.append("--quick")
    posenc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    # One row per ISA posenc-bench ran (avx2 everywhere, avx512 where present).
    isas = posenc["machine"].get("isas", ["?"])
    ours = {(k["name"], k["size"], k["dtype"], k.get("isa", "?")): k
            for k in posenc["kernels"]}

    targets = {"rope_neox": 20.0, "rope_gptj": 20.0, "sinusoidal_add": 1.0}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{posenc['machine']['cpu_model']}")
    print(f"{'isa':6} {'kernel':15} {'size':6} {'dtype':5} {'shape':22} {'torch ms':>10} "
          f"{'posenc ms':>10} {'speed-up':>9} {'target':>7}")
    results = []
    for name, size, dt, torch_ms in torch_cases(args.quick):
        for isa in isas:
            k = ours.get((name, size, dt, isa))
            if k is None:
                continue
            speedup = torch_ms / k["ms"]
            target = targets[name]
            ok = speedup >= target
            results.append({"isa": isa, "name": name, "size": size, "dtype": dt,
                            "shape": k["shape"], "torch_ms": torch_ms, "posenc_ms": k["ms"],
                            "speedup": speedup, "target": target, "met": ok})
            print(f"{isa:6} {name:15} {size:6} {dt:5} {k['shape']:22} {torch_ms:10.3f} "
                  f"{k['ms']:10.3f} {speedup:8.1f}x {target:6.0f}x {'met' if ok else 'MISS'}")
    for isa in isas:
        mine = [r for r in results if r["isa"] == isa]
        print(f"{isa}: {sum(r['met'] for r in mine)} of {len(mine)} targets met")


if __name__ == "__main__":
    main()
