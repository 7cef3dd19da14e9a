r"""Ablation: EAGLE-3's training-time-test length (1, 2, 3, 5, 7 unrolled steps).

    python -m launch.sweep --config=configs/ablations/eagle_ttt.py \
        --workdir=workdirs/ablations/eagle_ttt

Each point trains an EAGLE-3 drafter on the quickstart's target (`--config.target=<dir>` for
another) with `configs/train_eagle.py`'s recipe and a different unroll; the summary of each
run holds the held-out top-1 agreement per drafting step, so the sweep shows how far ahead a
drafter trained with n steps stays accurate when fed its own outputs.
"""

from configs import train_eagle
from configs.ablations.common import QUICKSTART


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    if arg not in (None, "tiny"):
        raise ValueError(f"unknown ablation variant {arg!r}; use None or 'tiny'")
    config = train_eagle.get_config("tiny" if arg == "tiny" else None)
    config.target = f"{QUICKSTART}/target"
    config.train.num_steps = 30 if arg == "tiny" else 200
    return config


def get_sweep():
    return [{"ttt_steps": n} for n in (1, 2, 3, 5, 7)]
