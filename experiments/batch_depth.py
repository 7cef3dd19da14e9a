"""Chain depth at a served batch: which N pays when B rows decode together.

At batch 1 a verify block of 1 + N rows costs about one decode step; at batch 8 the target's
products already carry 8 rows, so each drafted token adds rows the FMAs must compute. This
times whole `sj.generate` calls of `--batch` held-out prompts (the quickstart bench's corpus
windows, 64 tokens each, `--new` new tokens, no stop ids, T=0) for autoregressive decoding,
Medusa chains of N = 1..4, EAGLE-3 chains of N = 1..3 and ngram N = 2, in a fresh random
order every round (`--rounds`, after one compiling call each), and prints tau, the median ms
a call and the speedup against autoregressive decoding of the same rounds.

    cd experiments && python batch_depth.py --target ../workdirs/qs/target/hf \
        --medusa ../workdirs/qs/medusa --eagle3 ../workdirs/qs/eagle3 --batch 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from decode_step_profile import held_out

import specjax as sj
from specjax.kernels import build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--medusa", required=True)
    ap.add_argument("--eagle3", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    medusa = sj.load_draft(args.medusa, target=target)
    eagle3 = sj.load_draft(args.eagle3, target=target)
    prompts = held_out(target, args.batch)[: args.batch]
    specs = {"autoregressive": None}
    for n in (1, 2, 3, 4):
        specs[f"medusa chain {n}"] = {"method": "medusa", "model": medusa,
                                      "num_speculative_tokens": n}  # fmt: skip
    for n in (1, 2, 3):
        specs[f"eagle3 chain {n}"] = {"method": "eagle3", "model": eagle3,
                                      "num_speculative_tokens": n}  # fmt: skip
    specs["ngram 2"] = {"method": "ngram", "num_speculative_tokens": 2}

    def run(spec):
        return sj.generate(target, prompts, args.new, stop_token_ids=[], speculative_config=spec)

    taus = {
        name: run(spec).stats.get("mean_accepted_length") or 1.0 for name, spec in specs.items()
    }
    times = {name: [] for name in specs}
    names = list(specs)
    for r in range(args.rounds):
        for i in np.random.default_rng(r).permutation(len(names)):
            t = time.perf_counter()
            run(specs[names[i]])
            times[names[i]].append(time.perf_counter() - t)
    ar = statistics.median(times["autoregressive"])
    print("cpu:", build.cpu_description())
    print(f"batch {args.batch}, {args.new} new tokens a row, T=0, median of {args.rounds} rounds")
    print("| setting | tau | ms a call | speedup |")
    print("| --- | ---: | ---: | ---: |")
    for name in specs:
        ms = statistics.median(times[name])
        print(f"| {name} | {taus[name]:.2f} | {ms * 1e3:.1f} | {ar / ms:.2f}x |")


if __name__ == "__main__":
    main()
