"""EAGLE on a trained pair: tau and step cost per tree (chain, static, EAGLE-2's dynamic tree).

For each setting: tau and acceptance by position at batch 1 on held-out prompts (the
benchmark's workload: `--prompts` per category of 64 tokens, 64 new tokens, no stop ids), at
T=0 (greedy) and, with `--t1`, at T=1 with the default rule (chains: sampled drafts verified
probabilistically; trees: one-hot); with `--cost`, the wall milliseconds of one decode step at
T=0 (`medusa_cost.ms_per_step`: fastest `--new`-token call minus fastest 1-token call, over
the steps) beside the autoregressive step, and the implied speedup tau x AR step / step.

    python experiments/eagle_trees.py --target workdirs/quickstart/target \\
        --drafter workdirs/quickstart/eagle3 --cost

Writes experiments/results/eagle_trees[<tag>].json and prints a table.
"""

from __future__ import annotations

import argparse
import re

import common
from medusa_cost import held_out, ms_per_step

import specjax as sj
from specjax.bench.markdown import table
from specjax.bench.timing import pool_stats

CHAINS = (3, 4, 5, 6)
STATIC = ((4, "topk_4x2"), (5, "eagle1_25"))
DYNAMIC = (  # (depth, top_k, total_tokens)
    (4, 2, 6), (4, 3, 8), (5, 3, 8), (5, 4, 12), (6, 4, 12), (5, 4, 16), (6, 4, 24),
    (6, 4, 16), (7, 4, 16), (6, 6, 32), (7, 10, 60),
)  # fmt: skip


def settings(method: str, drafter):
    base = {"method": method, "model": drafter}
    for n in CHAINS:
        yield f"chain {n}", n, {**base, "num_speculative_tokens": n}
    for n, tree in STATIC:
        yield tree, n, {**base, "num_speculative_tokens": n, "draft_tree": tree}
    for d, k, total in DYNAMIC:
        tree = {"dynamic": {"top_k": k, "total_tokens": total}}
        yield f"dynamic d{d} k{k} n{total}", d, {**base, "num_speculative_tokens": d,
                                                 "draft_tree": tree}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the target's directory or LM workdir")
    parser.add_argument("--drafter", required=True, help="an EAGLE drafter dir or workdir")
    parser.add_argument("--prompts", type=int, default=4, help="held-out prompts per category")
    parser.add_argument("--t1", action="store_true", help="also tau at T=1")
    parser.add_argument("--cost", action="store_true", help="also the step cost at T=0")
    parser.add_argument("--new", type=int, default=129)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tag", default="")
    parser.add_argument("--only", default="", help="a regex: run only the settings it matches")
    args = parser.parse_args()
    target = sj.load_model(args.target)
    drafter = sj.load_draft(args.drafter, target=target)
    method = drafter.config.method
    prompts = held_out(target, args.prompts)
    ar_ms = ms_per_step(target, prompts[:1], None, args.new, args.repeats)[0] if args.cost else None
    rows = []
    for name, depth, cfg in settings(method, drafter):
        if args.only and not re.search(args.only, name):
            continue
        row = {"setting": name, "depth": depth}
        for temperature in (0.0, 1.0) if args.t1 else (0.0,):
            sampling = sj.SamplingParams(temperature=temperature, seed=0)
            stats = [sj.generate(target, [p], 64, sampling, [], speculative_config=cfg).stats
                     for p in prompts]  # fmt: skip
            pooled = pool_stats(stats)
            row[f"tau_T{temperature:g}"] = pooled["tau"]
            row[f"acceptance_T{temperature:g}"] = pooled["acceptance_by_position"]
        if args.cost:
            step_ms, _ = ms_per_step(target, prompts[:1], cfg, args.new, args.repeats)
            row.update(step_ms=step_ms, ar_steps=step_ms / ar_ms,
                       speedup=row["tau_T0"] * ar_ms / step_ms)  # fmt: skip
        rows.append(row)
        print(row)
    cols = ["setting", "tau T=0"] + (["tau T=1"] if args.t1 else [])
    cols += ["step (AR steps)", "implied speedup"] if args.cost else []
    cells = []
    for r in rows:
        cell = [r["setting"], f"{r['tau_T0']:.2f}"] + ([f"{r['tau_T1']:.2f}"] if args.t1 else [])
        if args.cost:
            cell += [f"{r['ar_steps']:.2f}", f"{r['speedup']:.2f}"]
        cells.append(cell)
    print(table(cols, cells, "l" + "r" * (len(cols) - 1)))
    common.save_json(f"eagle_trees{args.tag}", dict(
        method=method, target=args.target, drafter=args.drafter, prompts=len(prompts),
        ar_ms=ar_ms, rows=rows, machine=common.machine(),
    ))  # fmt: skip


if __name__ == "__main__":
    main()
