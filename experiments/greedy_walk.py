"""The greedy acceptance walk: a scan over the block's nodes against the vectorised walk.

`verify._walk_greedy` used to be a `lax.scan` over nodes 1..P (inside the decode loop's
while body: one more nested loop a step, P iterations of a few small ops each). It is now a
scatter-min of the matching children and Dmax gathers. This times both in one process on the
quickstart's trained pair: per round and per walk (alternated, programs recompiled from a
persistent cache after `jax.clear_caches()`), a 1-token call and a `--new`-token call of each
method at T=0, batch 1, one held-out prompt; it prints the median steady-state step
((long - short) / steps) of each method under each walk, the same in AR steps of that
walk's round (AR does not walk: it is the control), and their ratio. The tokens of both
walks must agree (checked, exits non-zero otherwise).

    cd experiments && python greedy_walk.py --workdir ../workdirs/qs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
from decode_step_profile import held_out

import specjax as sj
from specjax.bench import methods
from specjax.decoding import trees
from specjax.decoding import verify as vf
from specjax.kernels import build

VECTOR = vf._walk_greedy


def scan_walk(target_ids, x, valid, parents, max_depth):
    """The walk before: one scan step per node (max_depth unused)."""
    del max_depth
    B, N = x.shape
    rows = jnp.arange(B)

    def step(c, j):
        cand = valid[:, j] & (parents[:, j] == c)
        accept = cand & (x[:, j] == target_ids[rows, c])
        return jnp.where(accept, j, c), None

    c, _ = jax.lax.scan(step, jnp.zeros((B,), jnp.int32), jnp.arange(1, N, dtype=jnp.int32))
    return c, target_ids[rows, c]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a finished quickstart workdir")
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="walk-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    target = sj.load_model(f"{args.workdir}/target")
    medusa = sj.load_draft(f"{args.workdir}/medusa", target=target)
    eagle3 = sj.load_draft(f"{args.workdir}/eagle3", target=target)
    prompts = held_out(target, 1)[:1]
    d = methods.DEFAULT_DYNAMIC_TREE
    specs = {
        "autoregressive": None,
        "ngram N=4": {"method": "ngram", "num_speculative_tokens": 4},
        "medusa chain 4": {"method": "medusa", "model": medusa, "num_speculative_tokens": 4},
        f"medusa tree {methods.DEFAULT_MEDUSA_TREE}": {
            "method": "medusa",
            "model": medusa,
            "num_speculative_tokens": 4,
            "draft_tree": trees.truncate(trees.get_tree(methods.DEFAULT_MEDUSA_TREE), 4),
        },
        "eagle3 dynamic tree": {
            "method": "eagle3",
            "model": eagle3,
            "num_speculative_tokens": d["depth"],
            "draft_tree": {"dynamic": {"top_k": d["top_k"], "total_tokens": d["total_tokens"]}},
        },
    }
    walks = {"scan": scan_walk, "vector": VECTOR}

    def call(spec, n):
        t = time.perf_counter()
        out = sj.generate(target, prompts, n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - t, out

    steps = {(w, m): [] for w in walks for m in specs}
    tokens = {}
    for r in range(args.rounds + 1):  # round 0 compiles both walks (later: from the cache)
        order = list(walks) if r % 2 else list(walks)[::-1]  # neither walk always first
        for walk in order:
            vf._walk_greedy = walks[walk]
            jax.clear_caches()
            for name, spec in specs.items():
                call(spec, 1), call(spec, args.new)  # compile / load this walk's programs
                short = call(spec, 1)[0]
                long, out = call(spec, args.new)
                tokens.setdefault(name, {})[walk] = out.tokens
                if r:
                    steps[walk, name].append(1e3 * (long - short) / out.stats["steps"])
    vf._walk_greedy = VECTOR
    print("cpu:", build.cpu_description())
    print(f"prompt {len(prompts[0])} tokens, {args.new} new, median of {args.rounds} rounds, T=0")
    print("Step in ms, and in AR steps of the same walk's round (median of the per-round ratios)")
    print(
        "| method | scan walk | vectorised | scan, AR steps | vectorised, AR steps | scan / vec |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in specs:
        a, b = (statistics.median(steps[w, name]) for w in walks)
        ra, rb = (
            statistics.median(
                x / y for x, y in zip(steps[w, name], steps[w, "autoregressive"], strict=True)
            )
            for w in walks
        )
        print(f"| {name} | {a:.3f} | {b:.3f} | {ra:.2f} | {rb:.2f} | {ra / rb:.2f} |")
    same = all(t["scan"] == t["vector"] for t in tokens.values())
    print("same tokens under both walks:", same)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
