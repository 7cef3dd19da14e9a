r"""Ablation: EAGLE-2's dynamic tree budget (total_tokens x top_k x depth) with an EAGLE-3 drafter.

    python -m launch.sweep --config=configs/ablations/eagle_tree_budget.py \
        --workdir=workdirs/ablations/eagle_tree_budget

Runs task=bench (eagle3 against autoregressive, T=0, batch 1) on the quickstart's target and
its EAGLE-3 drafter (`--config.bench.heads.eagle3=<dir>` for another) once per point.
Writes sweep.md, sweep.csv and sweep.png in the workdir.

tau and step cost per setting on the quickstart pair: experiments/eagle_trees.py,
experiments/LOG.md 2026-12-01 ("scored by the law"); with the quickstart's drafter tau goes
3.0 (depth 4, 8 drafts) to 4.3 (the paper's 7 / 10 / 60), while the step cost grows faster
on this CPU (16 drafts at depth 5 gave the best speed).
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
        {"bench.dynamic_tree.depth": d, "bench.dynamic_tree.top_k": k,
         "bench.dynamic_tree.total_tokens": n}
        for d, k, n in POINTS
    ]  # fmt: skip
