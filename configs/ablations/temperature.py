r"""Ablation: the sampling temperature T in {0, 0.5, 1.0} (draft_model chain N=4 and the top-k tree).

    python -m launch.sweep --config=configs/ablations/temperature.py \
        --workdir=workdirs/ablations/temperature

Runs task=bench on the quickstart's trained pair once per temperature (greedy verification
at T=0, rejection sampling above); writes sweep.md, sweep.csv and sweep.png in the workdir.

Measured (the quickstart's pair; 2-core x86 VM, idle; 90 s in all):
  T                     0.0    0.5    1.0
  draft_model tau, x    2.91   2.41   2.48
                        1.17x  1.00x  1.00x
  draft_tree tau, x     3.15   2.30   2.75
                        0.89x  0.69x  0.78x
Greedy agreement is highest; at T>0 two sampled distributions agree less often, and the
tree's extra branches cost more than they add on this CPU.
"""

from configs.ablations.common import bench_config


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.methods = ("draft_model", "draft_tree")
    return config


def get_sweep():
    return [{"bench.temperatures": (t,)} for t in (0.0, 0.5, 1.0)]
