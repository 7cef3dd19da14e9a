"""A generate call split into its fixed part and its steps: a method against AR, alternated.

The bench's speedup is whole calls (prefill and host work included); the step cost the
verify curve predicts is the steady state. This times, per round and alternating the two
programs, a 1-token call (the prefill, the first token, the host work) and a `--new`-token
call of autoregressive decoding and of a trained drafter's method (Medusa chain or EAGLE
chain of `--depth`, T=0, batch 1, one held-out prompt), and prints the medians: the fixed
part, the whole call, the steady-state step ((long - short) / steps) and both ratios, and
the host's own share of the fixed part (`engine._setup`: validation, prompt buffers, keys,
the packed weights' cache check) timed alone.

    python experiments/call_fixed_cost.py --target workdirs/qs/target --drafter workdirs/qs/medusa
"""

from __future__ import annotations

import argparse
import statistics
import time

from decode_step_profile import held_out

import specjax as sj
from specjax.decoding import engine
from specjax.kernels import build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    drafter = sj.load_draft(args.drafter, target=target)
    method = drafter.config.method
    prompts = held_out(target, 1)[:1]
    specs = {
        "autoregressive": None,
        f"{method} chain {args.depth}": {
            "method": method,
            "model": drafter,
            "num_speculative_tokens": args.depth,
        },
    }

    def call(spec, n):
        t = time.perf_counter()
        out = sj.generate(target, prompts, n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - t, out.stats["steps"]

    for spec in specs.values():  # compile both lengths
        call(spec, 1), call(spec, args.new)

    def setup(spec):
        t = time.perf_counter()
        engine._setup(target, prompts, 1, None, [], spec, None)
        return time.perf_counter() - t

    runs = {name: [] for name in specs}
    for _ in range(args.rounds):
        for name, spec in specs.items():
            short = call(spec, 1)[0]
            long, steps = call(spec, args.new)
            host = setup(spec)
            runs[name].append((1e3 * short, 1e3 * long, 1e3 * (long - short) / steps, 1e3 * host))
    med = {k: [statistics.median(r[i] for r in v) for i in range(4)] for k, v in runs.items()}
    print("cpu:", build.cpu_description())
    print(f"prompt {len(prompts[0])} tokens, {args.new} new, median of {args.rounds} rounds")
    for name, (short, long, step, host) in med.items():
        print(f"{name}: 1-token call {short:.1f} ms (host set-up {host:.1f}), {args.new}-token "
              f"call {long:.1f} ms, step {step:.3f} ms")  # fmt: skip
    ar, spec = med["autoregressive"], med[next(k for k in med if k != "autoregressive")]
    print(f"whole-call speedup {ar[1] / spec[1]:.2f}x; a step costs {spec[2] / ar[2]:.2f} AR steps")


if __name__ == "__main__":
    main()
