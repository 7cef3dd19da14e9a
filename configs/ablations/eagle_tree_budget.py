r"""Ablation: EAGLE-2's dynamic tree budget (total_tokens x top_k x depth) with an EAGLE-3 drafter.

    python -m launch.sweep --config=configs/ablations/eagle_tree_budget.py \
        --workdir=workdirs/ablations/eagle_tree_budget

Runs task=bench (eagle3 against autoregressive, T=0, batch 1) on the quickstart's target and
its EAGLE-3 drafter (`--config.bench.heads.eagle3=<dir>` for another) once per point; the
depth is num_speculative_tokens. Writes sweep.md, sweep.csv and sweep.png in the workdir.

tau per setting on the quickstart pair (experiments/eagle_trees.py, experiments/LOG.md
2026-12-01): the dynamic tree reaches 2.8-3.65 and keeps few deep nodes with this drafter
(its probabilities follow a broad target law), below a static tree of the same budget.
"""

from configs.ablations.common import QUICKSTART, bench_config

POINTS = (  # (depth, top_k, total_tokens)
    (4, 2, 6), (4, 4, 8), (4, 4, 16), (5, 4, 16), (6, 4, 24), (6, 6, 32), (7, 10, 60),
)  # fmt: skip


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.draft = ""
    config.bench.heads.eagle3 = f"{QUICKSTART}/eagle3"
    config.bench.methods = ("eagle3",)
    return config


def get_sweep():
    return [
        {"bench.num_speculative_tokens": d, "bench.dynamic_tree.top_k": k,
         "bench.dynamic_tree.total_tokens": n}
        for d, k, n in POINTS
    ]  # fmt: skip
