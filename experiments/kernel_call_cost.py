"""What one kernel call costs beyond its arithmetic: the fixed price of a custom call in a step.

A decode step of an L-layer target makes about 5 kernel calls a layer (q/k/v, attention, o,
gate/up, down) plus the LM head. Each call pays a fixed cost whatever its size: XLA's dispatch
of the custom call, and, where the product is large enough to be split, waking a pool thread
and waiting for it. This times a chain of `--calls` dependent one-row products in one jit
(each call's input is the previous call's output, so XLA cannot overlap them) at a few sizes,
against the same chain through XLA's dot and a chain of elementwise ops (XLA's own per-op
cost), and prints microseconds a call, median of `--repeats` rounds, programs alternated.

    python experiments/kernel_call_cost.py
    python experiments/kernel_call_cost.py --sizes 16 128 384 --out experiments/results/kernel_call_cost_zen4.json

Sizes: a K x K weight; 16 and 64 are below the kernel's split threshold (one thread), 128 and
up are split over the pool's threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.kernels import build


def chain(product, n_calls):
    def f(x, w):
        def body(_, x):
            return product(x, w)

        return jax.lax.fori_loop(0, n_calls, body, x)

    return jax.jit(f)


def timed(fn, args, calls):
    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 128, 384])
    ap.add_argument("--calls", type=int, default=200, help="products in the chain")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not kernels.available():
        raise SystemExit("the CPU kernel is not available on this machine")
    rng = np.random.default_rng(0)
    rows = []
    for k in args.sizes:
        w = jnp.asarray(rng.standard_normal((k, k)) / np.sqrt(k), jnp.float32)
        packed = kernels.pack(w)
        x = jnp.asarray(rng.standard_normal((1, k)), jnp.float32)
        programs = {
            "kernel": (chain(lambda x, w: jnp.tanh(kernels.matmul(x, w)), args.calls), (x, packed)),
            "xla dot": (chain(lambda x, w: jnp.tanh(x @ w), args.calls), (x, w)),
            "tanh only": (chain(lambda x, w: jnp.tanh(x + w[0]), args.calls), (x, w)),
        }
        times = {name: [] for name in programs}
        for r in range(args.repeats):
            order = list(programs) if r % 2 == 0 else list(reversed(programs))
            for name in order:
                fn, a = programs[name]
                times[name].append(timed(fn, a, 5) / args.calls * 1e6)
        row = {"K": k, "N": k, **{name: statistics.median(v) for name, v in times.items()}}
        rows.append(row)
        print(
            f"K=N={k:4d}: kernel {row['kernel']:6.2f} us a call, XLA dot {row['xla dot']:6.2f},"
            f" tanh only {row['tanh only']:6.2f}  (kernel - tanh {row['kernel'] - row['tanh only']:.2f})"
        )
    cpu = build.cpu_description()
    print("cpu:", cpu)
    if args.out:
        Path(args.out).write_text(
            json.dumps({"cpu": cpu, "rows": rows, "args": vars(args)}, indent=1)
        )


if __name__ == "__main__":
    main()
