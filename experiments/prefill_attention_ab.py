"""The prefill's attention on the kernel or on XLA's dots: a 1-token call, alternated.

`kernels.MAX_ATTENTION_ROWS` (the longest query block the attention kernel takes; a prefill is
longer and goes to XLA's batched dots) set to each of `--rows` in turn, the compiled programs
dropped and rebuilt at each switch (`jax.clear_caches()`), and a 1-token `sj.generate` call
(the prefill of one held-out prompt and the first token) timed `--calls` times; per round and
setting the median, `--rounds` rounds. Checks that the tokens of a longer call agree.

    cd experiments && python prefill_attention_ab.py --target ../workdirs/qs/target/hf
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
from decode_step_profile import held_out

import specjax as sj
from specjax import kernels
from specjax.kernels import build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--rows", type=int, nargs="+", default=[kernels.MAX_ATTENTION_ROWS, 64])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=15)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    prompts = held_out(target, 1)[:1]
    call = lambda n: sj.generate(target, prompts, n, stop_token_ids=[])  # noqa: E731
    runs, tokens = {r: [] for r in args.rows}, {}
    for _ in range(args.rounds):
        for rows in args.rows:
            kernels.MAX_ATTENTION_ROWS = rows
            jax.clear_caches()
            tokens[rows] = call(64).tokens
            times = []
            for _ in range(args.calls):
                t = time.perf_counter()
                call(1)
                times.append(time.perf_counter() - t)
            runs[rows].append(1e3 * statistics.median(times))
    print("cpu:", build.cpu_description())
    print(f"prompt {len(prompts[0])} tokens; 1-token call ms per round, then the median")
    for rows, ms in runs.items():
        print(
            f"MAX_ATTENTION_ROWS={rows}: {[round(m, 2) for m in ms]} -> {statistics.median(ms):.2f}"
        )
    print("same tokens:", len({str(t) for t in tokens.values()}) == 1)


if __name__ == "__main__":
    main()
