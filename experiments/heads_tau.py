"""Decode tau of trained head sets on the quickstart bench's held-out prompts (no timing).

Held-out top-1 is measured teacher-forced on the trainer's eval rows; what a head set is worth
in decoding is its tau on prompts it never saw. This decodes `--prompts` held-out prompts of
each of the bench's categories (the quickstart's corpus windows, the bench's prompt length),
all of a category in one batch, T=0, `--new` tokens, and prints the mean accepted length per
category and their mean, for each head set: Medusa heads on a chain of `--medusa-depth`,
EAGLE drafters on a chain of `--eagle-depth` and on the bench's dynamic tree. Decoding is
deterministic, so two head sets compare on the same prompts without repeats.

    python experiments/heads_tau.py --target workdirs/qs4/target/hf \
        --heads workdirs/qs4/medusa workdirs/mh/r512_s1200 workdirs/qs4/eagle3
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # configs/

import specjax as sj  # noqa: E402
from configs import quickstart  # noqa: E402
from specjax.bench import methods  # noqa: E402
from specjax.bench.workload import prompts_by_category  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--heads", nargs="+", required=True, help="head or drafter directories")
    ap.add_argument("--prompts", type=int, default=12, help="held-out prompts a category")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--medusa-depth", type=int, default=4)
    ap.add_argument("--eagle-depth", type=int, default=3)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    cfg = quickstart.get_config().bench
    cfg.num_prompts = args.prompts
    prompts = prompts_by_category(cfg, target.tokenizer)
    depth, top_k, total = methods._dynamic_sizes(cfg)
    print(f"{args.prompts} held-out prompts a category ({', '.join(prompts)}), {args.new} new "
          f"tokens, T=0; tau per category and mean")  # fmt: skip
    print("| heads | shape | " + " | ".join(prompts) + " | mean |")
    print("| --- | --- | " + " | ".join("---:" for _ in prompts) + " | ---: |")
    for path in args.heads:
        heads = sj.load_draft(path, target=target)
        method = heads.config.method
        if method == "medusa":
            shapes = {f"chain {args.medusa_depth}": {"num_speculative_tokens": args.medusa_depth}}
        else:
            shapes = {
                f"chain {args.eagle_depth}": {"num_speculative_tokens": args.eagle_depth},
                f"dynamic ({depth}, {top_k}, {total})": {
                    "num_speculative_tokens": depth,
                    "draft_tree": methods._dynamic_tree(cfg),
                },
            }  # fmt: skip
        for shape, extra in shapes.items():
            spec = {"method": method, "model": heads, **extra}
            taus = [
                sj.generate(target, ps, args.new, speculative_config=spec).stats[
                    "mean_accepted_length"
                ]
                for ps in prompts.values()
            ]
            cells = " | ".join(f"{t:.2f}" for t in taus)
            print(f"| {path} | {shape} | {cells} | {statistics.mean(taus):.2f} |")


if __name__ == "__main__":
    main()
