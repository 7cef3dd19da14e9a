r"""Ablation: the number of speculative tokens N = 1..8 (draft_model chain and ngram; T=0, batch 1).

    python -m launch.sweep --config=configs/ablations/num_speculative_tokens.py \
        --workdir=workdirs/ablations/num_speculative_tokens

Runs task=bench on the quickstart's trained pair (`--config.bench.target=... --config.bench.draft=...`
for another) once per N; writes sweep.md, sweep.csv and sweep.png (speedup and tau against N)
in the workdir. Each point compiles two programs and times 3 interleaved repeats: about a
minute a point on a 2-core CPU.

Expected: tau grows with N and saturates (each extra draft is accepted with probability
alpha^i); speedup peaks at a small N (2-4) and then falls, because every drafted token costs
a draft forward and widens the verification block, accepted or not. ngram's tau stays near
1 on held-out text (few repeated n-grams), so its speedup is about 1x at every N.
"""

from configs.ablations.common import bench_config


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.methods = ("draft_model", "ngram")
    return config


def get_sweep():
    return [{"bench.num_speculative_tokens": n} for n in range(1, 9)]
