"""The verify-cost curve timed two ways: one host dispatch a forward (as before 2026-12-06) and
a loop of forwards in one program (`measure_verify_cost` now), on the same model, one process.

A jitted forward dispatched from the host pays the dispatch of every parameter and cache
array, about half a millisecond here, as much as a small model's forward: timing one forward
a call adds it to every block size and flattens the curve (the picker then under-prices
large blocks). Prints ms a forward and cost (T-token forward / 1-token) for both ways, the
loop twice.

    python experiments/verify_cost_dispatch.py --target workdirs/qs/target
"""

from __future__ import annotations

import argparse
import functools
import importlib

import jax
from flax import nnx

import specjax as sj
from specjax.kernels import build

vc = importlib.import_module("specjax.bench.verify_cost")  # the module, not the function


@functools.partial(jax.jit, static_argnums=0)
def _one(graphdef, params, cache, tokens, positions):
    return nnx.merge(graphdef, params)(tokens, positions, cache).logits


def _dispatched(graphdef, params, cache, tokens, positions, n):
    """n forwards, one host dispatch each (the old timing)."""
    out = None
    for _ in range(n):
        out = _one(graphdef, params, cache, tokens, positions)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="a model directory or LM workdir")
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 5, 8, 16])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    model = sj.load_model(args.target)
    loop = vc.measure_verify_cost(model, args.blocks, repeats=args.repeats)
    looped = vc._forwards
    vc._forwards = _dispatched
    try:
        old = vc.measure_verify_cost(model, args.blocks, repeats=args.repeats, calls=3)
    finally:
        vc._forwards = looped
    again = vc.measure_verify_cost(model, args.blocks, repeats=args.repeats)
    print("cpu:", build.cpu_description())
    print("blocks:", loop["blocks"])
    for name, r in [("one dispatch a forward", old), ("a loop in one program", loop),
                    ("a loop, again", again)]:  # fmt: skip
        ms = [round(s * 1e3, 3) for s in r["seconds"]]
        print(f"{name}: ms {ms}, cost {[round(c, 2) for c in r['cost']]}")


if __name__ == "__main__":
    main()
