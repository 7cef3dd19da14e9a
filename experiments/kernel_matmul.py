"""Matmul study: the packed few-row kernel against XLA's dot, T = 1..32 rows, one jit per stack.

A stack of L (up, down) pairs, x = x + tanh(x @ U) @ W_down, every product either XLA's dot on
the standard [in, out] layout or `specjax.kernels.matmul` on packed panels; times are medians
of `--repeats` calls (programs interleaved in a freshly shuffled order every repeat so that
machine load hits all alike), reported as multiples of XLA's 1-row time in the same run.

`--model ar`: D=768, F=2048, 12 pairs (151 MB fp32, the 110M bench model's MLP shapes,
streamed from memory); `--model quickstart`: D=384, F=1024, 6 pairs (19 MB);
`--model smollm2`: D=576, F=1536, 30 pairs (SmolLM2-135M's MLP, 212 MB).

    python experiments/kernel_matmul.py --model ar
    python experiments/kernel_matmul.py --model quickstart
    python experiments/kernel_matmul.py --model ar --dtype bfloat16

Writes experiments/results/kernel_matmul_<model>[_<dtype>].json (with the CPU's description).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.kernels import build

MODELS = {"ar": (768, 2048, 12), "quickstart": (384, 1024, 6), "smollm2": (576, 1536, 30)}


def stack_fn(matmul):
    def f(x, ups, downs):
        for u, d in zip(ups, downs, strict=True):
            x = x + matmul(jnp.tanh(matmul(x, u)), d)
        return x

    return jax.jit(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="ar")
    ap.add_argument("--T", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8, 12, 16, 24, 32])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--calls", type=int, default=5, help="calls per timing (their mean)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    D, F, L = MODELS[args.model]
    rng = np.random.default_rng(0)
    dt = jnp.dtype(args.dtype)
    ups = [jnp.asarray(rng.standard_normal((D, F)) * 0.02, dt) for _ in range(L)]
    downs = [jnp.asarray(rng.standard_normal((F, D)) * 0.02, dt) for _ in range(L)]
    packed = ([kernels.pack(u) for u in ups], [kernels.pack(d) for d in downs])
    jax.block_until_ready(packed)
    xla = stack_fn(lambda x, w: x @ w.astype(jnp.float32))
    ker = stack_fn(kernels.matmul)
    progs = {}
    for T in args.T:
        x = jnp.asarray(rng.standard_normal((T, D)), jnp.float32)
        progs[("xla", T)] = (xla, (x, ups, downs))
        progs[("kernel", T)] = (ker, (x, *packed))
        a = np.asarray(xla(x, ups, downs))
        b = np.asarray(ker(x, *packed))
        err = float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))
        progs[("err", T)] = err
    times = {k: [] for k in progs if k[0] != "err"}
    for fn, a in (v for k, v in progs.items() if k[0] != "err"):
        jax.block_until_ready(fn(*a))
    for _ in range(args.repeats):
        order = list(times)
        random.shuffle(order)
        for k in order:
            fn, a = progs[k]
            t0 = time.perf_counter()
            for _ in range(args.calls):
                out = fn(*a)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t0) / args.calls)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med[("xla", 1)]
    weight_bytes = 2 * L * D * F * dt.itemsize
    rows = []
    print(f"model={args.model} D={D} F={F} L={L} dtype={args.dtype} "
          f"weights={weight_bytes / 1e6:.0f} MB; XLA 1-row {base * 1e3:.3f} ms")  # fmt: skip
    print(f"{'T':>3} {'xla x1':>8} {'kernel x1':>9} {'kernel GB/s':>11} {'rel err':>9}")
    for T in args.T:
        x_r, k_r = med[("xla", T)] / base, med[("kernel", T)] / base
        gbs = weight_bytes / med[("kernel", T)] / 1e9
        rows.append({"T": T, "xla_ms": med[("xla", T)] * 1e3, "kernel_ms": med[("kernel", T)] * 1e3,
                     "xla_x1": x_r, "kernel_x1": k_r, "rel_err": progs[("err", T)]})  # fmt: skip
        print(f"{T:>3} {x_r:8.2f} {k_r:9.2f} {gbs:11.1f} {progs[('err', T)]:9.1e}")
    cpu = build.cpu_description()
    result = {"model": args.model, "shape": [D, F, L], "dtype": args.dtype, "cpu": cpu,
              "jax": jax.__version__, "repeats": args.repeats, "rows": rows}  # fmt: skip
    suffix = "" if args.dtype == "float32" else f"_{args.dtype}"
    out = Path(args.out or f"experiments/results/kernel_matmul_{args.model}{suffix}.json")
    out.write_text(json.dumps(result, indent=1))
    print("wrote", out, "| cpu:", cpu["model"], cpu["vector_extensions"], cpu["caches"])


if __name__ == "__main__":
    main()
