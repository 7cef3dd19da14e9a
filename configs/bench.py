"""Benchmark every speculative method against autoregressive decoding (Spec-Bench style).

Command (a trained pair from configs/quickstart.py):

    python -m launch.main --config=configs/bench.py \
        --config.bench.target=workdirs/quickstart/target \
        --config.bench.draft=workdirs/quickstart/draft \
        --workdir=workdirs/bench

`--config=configs/bench.py:small` is the quick variant (batch 1, T=0, one repeat, 32 new
tokens, tau-vs-N over 1, 2, 4). Methods are names registered in `specjax/bench/methods.py`
(`--config.bench.methods="('draft_model','ngram')"`); method knobs, the grid and the
workload are the keys of `specjax.bench.default_config()`.

Writes <workdir>/results.json, report.md (tables: method x batch x temperature with tau,
tokens/s and speedup; acceptance by position; tau vs N; compile times; machine; command)
and plots/{speedup,acceptance,tau_vs_n}.png.

What to expect (the quickstart's pair since 2026-12-01: a 6x384 target trained 400 steps to
eval loss 4.42, a 2x128 draft, Medusa-1 heads and an EAGLE-3 drafter; a 2-core x86 VM, jax
0.10.2 on CPU, idle): the grid is the quickstart's benchmark stage, recorded in
BENCHMARKS.md "Quickstart" (6.3 minutes of that run's 17.2). T=0, batch 1: medusa tau 3.10,
1.51x; medusa_chain 2.70, 1.39x; ngram 2.17, 1.18x; eagle3 (dynamic tree) 2.98, 0.77x;
draft_model N=4 1.97, 0.93x. At T=1 only draft_model pays (1.20x); at batch 8 nothing does
(best ngram 0.94x). The earlier 600-step pair (eval loss 4.16; 2026-11-29) gave draft_model
tau 2.9 / 1.1x and ngram 2.25 / 1.15x at T=0, batch 1.
The small variant takes about 4 minutes. Measured
tables and what they mean: docs/skill-spec-decode-picker.md.
"""

import ml_collections

from specjax.bench import default_config


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The benchmark config; arg "small" gives the quick variant.

    Args:
      arg: None (full grid) or "small".
    Returns:
      ConfigDict with task="bench" and bench=`specjax.bench.default_config()`.
    """
    config = ml_collections.ConfigDict()
    config.task = "bench"
    config.bench = default_config()
    if arg == "small":
        config.bench.batch_sizes = (1,)
        config.bench.temperatures = (0.0,)
        config.bench.repeats = 1
        config.bench.max_new_tokens = 32
        config.bench.tau_vs_n = (1, 2, 4)
    elif arg:
        raise ValueError(f"configs/bench.py: unknown variant {arg!r}; use '' or 'small'")
    return config
