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

What to expect (this project's 2-core shared x86 box, jax 0.10 CPU backend, the quickstart
pair: 6x384 target, 2x128 draft): the full grid takes 10-13 minutes, a third of it compiling
(5-32 s per program). tau at batch 1: draft_model 1.82 (T=0) / 2.27 (T=1), draft_tree
1.95 / 2.78, ngram 2.09 / 1.01. On this CPU nothing beats autoregressive (speedups
0.44-0.78x; best ngram at T=0, batch 8): a speculative step costs 0.5-2 target steps more
than its forward passes. The small variant takes about 4 minutes. Measured tables and
what they mean: docs/skill-spec-decode-picker.md.
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
