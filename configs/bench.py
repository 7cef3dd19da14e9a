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

What to expect (2-core shared x86 CPU, jax 0.10 CPU backend; a random 8-layer D=256 target
with its first 2 layers as the draft, so acceptance is not that of a trained pair): the full
grid takes about 5 minutes, most of it compiling (2-12 s per program). Tiny models on a CPU
are bound by per-step overhead, not FLOPs: draft_model reaches tau 2.5-3.5 at T=0 and runs at
about 1.0-1.5x; ngram is within noise of 1x on prose; batch 8 gains less than batch 1.
See docs/skill-spec-decode-picker.md for the measured table.
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
