r"""Ablation: the head trainers' loss x training temperature on the real model.

    python -m launch.sweep --config=configs/ablations/distill_loss.py \
        --workdir=workdirs/ablations/distill_loss

Each point runs the SmolLM2 pipeline (`configs/smollm2.py`: heads self-distilled at T=0 and
T=1 from chat instructions, benchmarked on Spec-Bench at T=0 and T=1) with one loss:
"ce" (hard labels; EAGLE's reference soft CE), "kl" (forward KL to the target's law) or "tv"
(the acceptance loss 1 - sum min(p, q)), at training temperature 1 or 2 ("ce" has none). The
self-distilled rows are cached under each point's workdir; pass
`--config.medusa.data.cache_dir=<dir> --config.eagle3.data.cache_dir=<dir>` to share them.
Read tau per method at T=0 and T=1 in each point's report.md. For EAGLE the "ce" point and
"kl" at temperature 1 train the same drafter (soft CE and forward KL to one law differ by its
entropy, a constant: equal gradients; experiments/LOG.md 2026-12-03); for Medusa they differ
("ce" is hard labels there).
"""

from configs import smollm2


def get_config(arg=None):
    """Base run of the sweep (`arg`: None, or "short": the pipeline's smoke variant)."""
    if arg not in (None, "short"):
        raise ValueError(f"unknown ablation variant {arg!r}; use None or 'short'")
    return smollm2.get_config(arg)


def get_sweep():
    points = [{"loss_kind": "ce"}]
    points += [
        {"loss_kind": kind, "loss_temperature": t} for kind in ("kl", "tv") for t in (1.0, 2.0)
    ]
    return points
