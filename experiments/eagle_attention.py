"""The EAGLE drafter's attention: the cache-attention kernel against XLA's batched dots.

Decoding on the CPU, the drafter's cached forward runs its attention through the kernel
(`decoder.attend_cache`) when its weights are laid out. `--old` makes it take XLA's path
instead (patching `EagleHead.laid_out` before anything compiles); run both in alternating
processes and compare each method's time over autoregressive decoding in the same process
(AR does not change). One held-out prompt, `--new` tokens minus a 1-token call, median of
`--repeats`:

    for i in 1 2 3; do for v in --old ""; do
      python experiments/eagle_attention.py --target workdirs/quickstart/target \\
          --drafter workdirs/quickstart/eagle3 $v
    done; done

Prints one line per run: ms per call of AR, the EAGLE chain of 4 and the dynamic tree
(depth 4, top-k 2, 6 nodes), and each over AR.
"""

from __future__ import annotations

import argparse
import statistics
import time

from medusa_cost import held_out

import specjax as sj


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--old", action="store_true", help="XLA's attention in the drafter")
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.old:
        sj.EagleHead.laid_out = lambda self: False
    target = sj.load_model(args.target)
    drafter = sj.load_draft(args.drafter, target=target)
    prompts = held_out(target, 1)[:1]
    base = {"method": drafter.config.method, "model": drafter, "num_speculative_tokens": 4}
    specs = {
        "ar": None,
        "chain4": base,
        "dynamic": {**base, "draft_tree": {"dynamic": {"top_k": 2, "total_tokens": 6}}},
    }

    def call(spec, n):
        start = time.perf_counter()
        sj.generate(target, prompts, n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - start

    for spec in specs.values():  # compile
        call(spec, args.new), call(spec, 1)
    ms = {k: [] for k in specs}
    for _ in range(args.repeats):
        for k, spec in specs.items():
            ms[k].append(1e3 * (call(spec, args.new) - call(spec, 1)))
    med = {k: statistics.median(v) for k, v in ms.items()}
    print("old" if args.old else "new",
          "  ".join(f"{k} {v:.1f} ms ({v / med['ar']:.2f} AR)" for k, v in med.items()))  # fmt: skip


if __name__ == "__main__":
    main()
