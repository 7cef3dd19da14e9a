"""The few-row kernel's throughput by rows: where memory prices a product and where the FMAs do.

L independent products y = x @ W_l of one shape (K x N) in one jit, x of T rows, the weights
packed once (`specjax.kernels.pack`). XLA may run independent FFI calls side by side, so read
the figures as the machine's throughput (wall time of the call over L), not one product's
latency. Per T: us a product, GB/s of weights and GFLOP/s, median of `--repeats` rounds (the
T values in a fresh random order every round, `--calls` calls a timing).

    python experiments/kernel_throughput.py --shape 384 1024     # the quickstart's MLP: L3
    python experiments/kernel_throughput.py --shape 576 1536     # SmolLM2's: memory

Prints a table and the CPU's description; `--out` writes them as JSON.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs=2, default=[384, 1024], metavar=("K", "N"))
    ap.add_argument("--matrices", type=int, default=12)
    ap.add_argument("--T", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 8, 9, 12, 16])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    K, N = args.shape
    rng = np.random.default_rng(0)
    ws = [kernels.pack(jnp.asarray(rng.standard_normal((K, N)), jnp.float32))
          for _ in range(args.matrices)]  # fmt: skip
    f = jax.jit(lambda x, ws: [kernels.matmul(x, w) for w in ws])
    xs = {T: jnp.asarray(rng.standard_normal((1, T, K)), jnp.float32) for T in args.T}
    for T in args.T:
        jax.block_until_ready(f(xs[T], ws))  # compile outside the timing
    times = {T: [] for T in args.T}
    for r in range(args.repeats):
        for T in np.random.default_rng(r).permutation(args.T):
            start = time.perf_counter()
            for _ in range(args.calls):
                jax.block_until_ready(f(xs[T], ws))
            times[T].append((time.perf_counter() - start) / args.calls / args.matrices)
    rows = []
    print(f"{args.matrices} products of {K} x {N} ({args.matrices * K * N * 4 / 1e6:.0f} MB)")
    print("  T   us/product    GB/s  GFLOP/s")
    for T in args.T:
        s = statistics.median(times[T])
        row = dict(T=T, us=s * 1e6, gb_s=K * N * 4 / s / 1e9, gflop_s=2 * T * K * N / s / 1e9)
        rows.append(row)
        print(f"{T:3d} {row['us']:12.1f} {row['gb_s']:7.1f} {row['gflop_s']:8.1f}")
    cpu = build.cpu_description()
    print("cpu:", cpu)
    if args.out:
        Path(args.out).write_text(json.dumps(dict(shape=[K, N], rows=rows, cpu=cpu), indent=1))


if __name__ == "__main__":
    main()
