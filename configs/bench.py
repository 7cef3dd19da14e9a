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

What to expect (the quickstart's pair: a 6x384 target trained 600 steps to eval loss 4.16
and a 2x128 draft; a 2-core x86 VM, jax 0.10.2 on CPU, idle): the full grid is the
quickstart's benchmark stage, recorded in BENCHMARKS.md "Quickstart" (2026-11-29; ~4
minutes of that run's 12.2, configs/quickstart.py). T=0, batch 1: draft_model N=4 tau 2.9, 1.1x; draft_tree (depth 3, width 2) tau
3.15, 0.9x; ngram tau 2.25, 1.15x; tau vs N (draft_model) 1.73 / 2.22 / 2.91 / 3.50 for
N = 1 / 2 / 4 / 8, best speedup 1.2x at N = 1-2. At T=1 and at batch 8 every method runs at
0.5-1.0x: a speculative step costs ~3.5 autoregressive steps on this CPU. A less trained
pair (an earlier quickstart target, 300 steps, eval loss 4.41: pair Q of
docs/skill-spec-decode-picker.md, measured with other jobs on the machine) took 13 minutes
and ran at 0.44-0.78x in every cell. The small variant takes about 4 minutes. Measured
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
