r"""Ablation: the sampling temperature T in {0, 0.5, 1.0} (draft_model chain N=4 and the top-k tree).

    python -m launch.sweep --config=configs/ablations/temperature.py \
        --workdir=workdirs/ablations/temperature

Runs task=bench on the quickstart's trained pair once per temperature (greedy verification
at T=0, rejection sampling above); writes sweep.md, sweep.csv and sweep.png in the workdir.

Expected: tau falls as T rises (two sampled distributions agree less often than two
argmaxes), and the speedup with it; the tree loses its edge at T>0, where its top-k
children are deterministic drafts checked one by one against a sampled target.
"""

from configs.ablations.common import bench_config


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.methods = ("draft_model", "draft_tree")
    return config


def get_sweep():
    return [{"bench.temperatures": (t,)} for t in (0.0, 0.5, 1.0)]
