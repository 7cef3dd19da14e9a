"""Medusa's heads as one per-group product at one row: float32 against bfloat16 panels.

G products x [1, K] @ [K, N] (`kernels.per_group_matmul`, the shape of the quickstart's four
Medusa heads' residual blocks: 4 x 384 x 384), in a loop of `--loop` inside one jit so the
weights stay in cache, beside XLA's einsum over the same weights; us a product, median of
`--repeats` calls. Where the weights sit in cache, what a bfloat16 panel costs is the
widening of its values (ALU work), not its bytes.

    python experiments/grouped_bf16.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.kernels import build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[4, 384, 384], metavar=("G", "K", "N"))
    ap.add_argument("--loop", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    G, K, N = args.shape
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((G, K, N)), jnp.float32) * 0.05
    x = jnp.asarray(rng.standard_normal((1, G, K)), jnp.float32)

    def looped(product):
        body = lambda _, h: jnp.tanh(product(h))  # noqa: E731
        return jax.jit(lambda h: jax.lax.fori_loop(0, args.loop, body, h))

    print("cpu:", build.cpu_description())
    for dtype in (None, "bfloat16"):
        packed = kernels.round_weight(kernels.pack(w), dtype)
        plain = kernels.round_weight(w, dtype)
        runs = {
            "kernel": looped(lambda h, p=packed: kernels.per_group_matmul(h, p)),
            "xla": looped(lambda h, p=plain: jnp.einsum("bgk,gkn->bgn", h, p)),
        }
        for name, f in runs.items():
            jax.block_until_ready(f(x))
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                jax.block_until_ready(f(x))
                times.append(time.perf_counter() - t)
            us = 1e6 * statistics.median(times) / args.loop
            print(f"{dtype or 'float32'} panels, {name}: {us:.1f} us a product")


if __name__ == "__main__":
    main()
