r"""Ablation: lookahead decoding's window W, n-gram size N and candidates G on the quickstart target.

    python -m launch.sweep --config=configs/ablations/lookahead_grid.py \
        --workdir=workdirs/ablations/lookahead_grid

Runs task=bench (lookahead against autoregressive, T=0, batch 1, code and prose prompts
apart in the report) on the quickstart's target once per point; nothing is trained. The N
of a row is the candidate length N - 1 (`bench.lookahead.candidate_length`). Writes
sweep.md, sweep.csv and sweep.png in the workdir. One forward per step holds 1 + G (N - 1)
candidate nodes and (N - 1) W window cells, so on a CPU every point trades tau for the cost
of a wider verify forward; results in experiments/LOG.md.
"""

from configs.ablations.common import bench_config

POINTS = (  # (W, N, G)
    (2, 3, 2), (4, 3, 4), (3, 4, 3), (4, 4, 4), (5, 4, 5), (4, 5, 4), (7, 5, 7),
)  # fmt: skip


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.draft = ""
    config.bench.methods = ("lookahead",)
    return config


def get_sweep():
    return [
        {"bench.lookahead.window": w, "bench.lookahead.candidate_length": n - 1,
         "bench.lookahead.max_candidates": g}
        for w, n, g in POINTS
    ]  # fmt: skip
