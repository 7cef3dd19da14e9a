"""Medusa on a trained pair: tau per tree and verification rule, and what one step costs.

`--what tau`: tau and acceptance by position at batch 1 on held-out prompts (the benchmark's
workload: `--prompts` per category of 64 tokens, 64 new tokens, no stop ids) for a chain of
each head's top-1 and for every tree in `--trees`, greedy at T=0 and, at T=1, the default
one-hot rule on top-k drafts against `probabilistic` (nodes sampled from each head's law).
Several head sets can be compared (`--heads a b`: e.g. heads distilled at T=0 and at T=1).

`--what cost`: wall milliseconds per decode step at T=0 (fastest of `--repeats` calls of
`--new` tokens minus fastest 1-token call, interleaved, over the steps taken), for
autoregressive decoding and Medusa with K = 1..4 heads as a chain and with each tree, at
`--batch`; the step in autoregressive steps; the heads' own share (their forward alone, 64
calls in one jitted loop, `specjax.picker.measure_head_cost`); and with `--dsum`, the same
with the few-row projections written as a sum of chunked products (experiments/
verify_matmul.py), to price that formulation end to end.

    python experiments/medusa_cost.py --what tau --target workdirs/quickstart/target \\
        --heads workdirs/quickstart/medusa
    python experiments/medusa_cost.py --what cost --target workdirs/quickstart/target \\
        --heads workdirs/quickstart/medusa --batch 1
    python experiments/medusa_cost.py --what cost ... --batch 8

Writes experiments/results/medusa_{tau,cost}[<tag>].json and prints tables.
"""

from __future__ import annotations

import argparse
import time

import common
import jax
import jax.numpy as jnp

import specjax as sj
from specjax import data
from specjax.bench.markdown import table
from specjax.bench.timing import pool_stats
from specjax.decoding import trees
from specjax.picker import measure_head_cost

TREES = ("medusa_k4_8", "medusa_k4_16", "medusa_k4_32", "mc_sim_7b_63")


def held_out(target, per_category: int) -> list[list[int]]:
    ds = data.load_text_dataset("embedded")
    _, eval_ds = data.split_dataset(ds, 0.05, 0)
    return [ids for _, ids in data.held_out_prompts(eval_ds, target.tokenizer, per_category, 64, 0)]


def medusa(heads, k: int, tree=None, verification=None) -> dict:
    cfg = {"method": "medusa", "model": heads, "num_speculative_tokens": k}
    if tree:
        cfg["draft_tree"] = tree
    if verification:
        cfg["verification"] = verification
    return cfg


def tau_table(args) -> dict:
    target = sj.load_model(args.target)
    prompts = held_out(target, args.prompts)
    rows = []
    for path in args.heads:
        heads = sj.load_draft(path, target=target)
        settings = [(0.0, None, tree) for tree in (None, *args.trees)]
        settings += [(1.0, mode, tree) for mode in ("one_hot", "probabilistic")
                     for tree in (None, *args.trees)]  # fmt: skip
        for temperature, mode, tree in settings:
            sampling = sj.SamplingParams(temperature=temperature, seed=0)
            cfg = medusa(heads, 4, tree, mode)
            stats = [sj.generate(target, [p], 64, sampling, [], speculative_config=cfg).stats
                     for p in prompts]  # fmt: skip
            pooled = pool_stats(stats)
            rows.append(dict(
                heads=path, temperature=temperature, verification=mode or "greedy",
                tree=tree or "chain", nodes=trees.get_tree(tree).num_drafts if tree else 4,
                tau=pooled["tau"], acceptance_by_position=pooled["acceptance_by_position"],
            ))  # fmt: skip
            print(rows[-1]["heads"], temperature, rows[-1]["verification"], rows[-1]["tree"],
                  f"{pooled['tau']:.2f}")  # fmt: skip
    cells = [[r["heads"], f"{r['temperature']:g}", r["verification"], r["tree"], r["nodes"],
              f"{r['tau']:.2f}", " / ".join(f"{u:.2f}" for u in r["acceptance_by_position"])]
             for r in rows]  # fmt: skip
    print(table(["heads", "T", "verification", "tree", "drafts", "tau", "acceptance by position"],
                cells, "lrllrrl"))  # fmt: skip
    return dict(rows=rows, prompts=len(prompts))


def ms_per_step(target, prompts, spec, new: int, repeats: int) -> tuple[float, int]:
    """Wall ms per step: the fastest `new`-token call minus the fastest 1-token call (prefill
    and host work cancel), over the steps taken; the two interleaved, `repeats` times each.
    The fastest, not the median: on a shared machine interference only ever adds time."""

    def call(n):
        start = time.perf_counter()
        out = sj.generate(target, prompts, n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - start, out.stats["steps"]

    _, steps = call(new)  # compiles; greedy, so every call takes the same steps
    call(1)
    longs, shorts = [], []
    for _ in range(repeats):
        longs.append(call(new)[0])
        shorts.append(call(1)[0])
    return 1e3 * (min(longs) - min(shorts)) / steps, steps


def _dsum_linear(chunk: int):
    """nnx.Linear.__call__ with 2-8 rows as a sum of `chunk`-wide partial products."""
    from flax import nnx

    plain = nnx.Linear.__call__

    def call(self, x):
        rows = x.size // x.shape[-1]
        d_in = x.shape[-1]
        if not 2 <= rows <= 8 or d_in % chunk:
            return plain(self, x)
        w = self.kernel[...]  # [D, F]
        n = d_in // chunk
        xs = x.reshape(rows, n, chunk)  # [T, n, c]
        y = jnp.einsum("tnc,ncf->ntf", xs, w.reshape(n, chunk, -1)).sum(0)  # [T, F]
        if self.bias is not None:
            y = y + self.bias[...]
        return y.reshape(*x.shape[:-1], -1)

    return plain, call


def cost_table(args) -> dict:
    from flax import nnx

    target = sj.load_model(args.target)
    heads = sj.load_draft(args.heads[0], target=target)
    prompts = held_out(target, 1)[:1] * args.batch
    specs = [("autoregressive", None, 0)]
    specs += [(f"chain K={k}", medusa(heads, k), k) for k in range(1, 5)]
    specs += [
        (tree, medusa(heads, 4, tree), trees.get_tree(tree).num_drafts) for tree in args.trees
    ]
    variants = [("matmul", None)]
    if args.dsum:
        variants.append((f"dsum{args.dsum}", _dsum_linear(args.dsum)))
    rows, base = [], {}
    for variant, patch in variants:
        if patch:
            nnx.Linear.__call__ = patch[1]
        try:
            for name, spec, nodes in specs:
                ms, steps = ms_per_step(target, prompts, spec, args.new, args.repeats)
                base.setdefault(variant, ms)
                rows.append(dict(variant=variant, method=name, drafts=nodes, ms_per_step=ms,
                                 steps=steps, ar_steps=ms / base[variant]))  # fmt: skip
                print(variant, name, f"{ms:.2f} ms, {ms / base[variant]:.2f} AR steps")
        finally:
            if patch:
                nnx.Linear.__call__ = patch[0]
    target_step_s = base["matmul"] / 1e3
    share = {k: measure_head_cost(heads, k, target_step_s, args.repeats, batch=args.batch)
             for k in range(1, 5)}  # fmt: skip
    cells = [[r["variant"], r["method"], r["drafts"], f"{r['ms_per_step']:.2f}",
              f"{r['ar_steps']:.2f}x"] for r in rows]  # fmt: skip
    print(table(["projections", "method", "drafts", "ms / step", "x AR step"], cells, "llrrr"))
    print(table(["heads used", "heads ms", "x AR step"],
                [[k, f"{v['heads_step_s'] * 1e3:.3f}", f"{v['c'] * k:.3f}"] for k, v in share.items()],
                "rrr"))  # fmt: skip
    return dict(batch=args.batch, new=args.new, rows=rows,
                heads_share={k: dict(v, ar_steps=v["c"] * k) for k, v in share.items()})  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", choices=["tau", "cost"], required=True)
    parser.add_argument("--target", required=True, help="the target's directory or LM workdir")
    parser.add_argument("--heads", nargs="+", required=True, help="heads dirs / workdirs")
    parser.add_argument("--trees", nargs="*", default=list(TREES))
    parser.add_argument("--prompts", type=int, default=4, help="held-out prompts per category")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--new", type=int, default=257)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dsum", type=int, default=0, help="also time the dsum<c> projections")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    result = tau_table(args) if args.what == "tau" else cost_table(args)
    result.update(machine=common.machine(), command=common.command(), jax=jax.__version__)
    print("written:", common.save_json(f"medusa_{args.what}{args.tag}", result))


if __name__ == "__main__":
    main()
