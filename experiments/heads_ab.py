"""Head sets of one method against each other on one target: tau and step, alternated.

E.g. Medusa heads with their own LM heads against heads that share the target's: Medusa-1
gives each of its K heads a trained [D, V] LM head; `shared_lm_head` makes them read the
target's one (vLLM's `original_lm_head`). On a small target the K copies are a large part of
a step's bytes (on the quickstart's 6x384 target with V = 2048, 4 x 3.1 MB against the
target's 44 MB). Or EAGLE-3 drafters over the whole vocabulary and a draft vocabulary.

This times, in one process and alternating, autoregressive decoding and each head set's chain
(depth `--depth`) and tree (Medusa: the bench's sparse tree cut to `--depth`; EAGLE: the
dynamic tree `--dynamic depth,top_k,total_tokens`), T=0, batch 1, on the held-out prompts:
per round a 1-token call and a `--new`-token call of each, and prints tau, the steady-state
step ((long - short) / steps) in AR steps of the same round, the whole-call speedup, and the
speedup per step (tau / step).

    cd experiments && python heads_ab.py --target ../workdirs/qs/target \
        --heads own=../workdirs/qs/medusa shared=../workdirs/qs_shared/medusa
    cd experiments && python heads_ab.py --target ../workdirs/qs2/target --depth 3 \
        --dynamic 4,2,6 --heads v2048=../workdirs/qs2/eagle3 v512=../workdirs/qs_e512/eagle3
"""

from __future__ import annotations

import argparse
import statistics
import time

from decode_step_profile import held_out

import specjax as sj
from specjax.bench import methods
from specjax.decoding import trees
from specjax.kernels import build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--heads", nargs="+", required=True, help="name=heads_dir ...")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--dynamic", default="5,4,16", help="EAGLE: depth,top_k,total_tokens")
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    prompts = held_out(target, 1)[: args.prompts]
    medusa_tree = trees.truncate(trees.get_tree(methods.DEFAULT_MEDUSA_TREE), args.depth)
    depth, top_k, total = (int(v) for v in args.dynamic.split(","))
    specs = {"autoregressive": None}
    for item in args.heads:
        name, path = item.split("=", 1)
        heads = sj.load_draft(path, target=target)
        method = heads.config.method
        base = {"method": method, "model": heads, "num_speculative_tokens": args.depth}
        specs[f"{name}, chain {args.depth}"] = base
        if method == "medusa":
            specs[f"{name}, tree {methods.DEFAULT_MEDUSA_TREE}"] = {
                **base,
                "draft_tree": medusa_tree,
            }
        else:
            dynamic = {"dynamic": {"top_k": top_k, "total_tokens": total}}
            specs[f"{name}, dynamic d{depth} k{top_k} n{total}"] = {
                **base,
                "num_speculative_tokens": depth,
                "draft_tree": dynamic,
            }

    def call(spec, prompt, n):
        t = time.perf_counter()
        out = sj.generate(target, [prompt], n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - t, out.stats

    for spec in specs.values():  # compile both lengths
        call(spec, prompts[0], 1), call(spec, prompts[0], args.new)
    rows = {name: [] for name in specs}  # per round and prompt: (short, long, steps, tau)
    for r in range(args.rounds):
        order = list(specs) if r % 2 == 0 else list(specs)[::-1]
        for prompt in prompts:
            for name in order:
                short = call(specs[name], prompt, 1)[0]
                long, stats = call(specs[name], prompt, args.new)
                rows[name].append(
                    (short, long, stats["steps"], stats["mean_accepted_length"] or 1.0)
                )
    print("cpu:", build.cpu_description())
    print(f"{len(prompts)} held-out prompts, {args.new} new tokens, T=0, batch 1, "
          f"{args.rounds} rounds alternated")  # fmt: skip
    print("| setting | tau | step (AR steps) | speedup per step | whole-call speedup |")
    print("| --- | ---: | ---: | ---: | ---: |")
    ar = rows["autoregressive"]
    for name, rs in rows.items():
        tau = statistics.mean(x[3] for x in rs)
        step = statistics.median(
            ((lo - sh) / st) / ((alo - ash) / ast)
            for (sh, lo, st, _), (ash, alo, ast, _) in zip(rs, ar, strict=True)
        )
        whole = statistics.median(a[1] / x[1] for x, a in zip(rs, ar, strict=True))
        print(f"| {name} | {tau:.2f} | {step:.2f} | {tau / step:.2f}x | {whole:.2f}x |")


if __name__ == "__main__":
    main()
