r"""Ablation: the draft's size (layers x width) against the quickstart's fixed target.

    python -m launch.sweep --config=configs/ablations/draft_size.py \
        --workdir=workdirs/ablations/draft_size

Each point is task=quickstart with `target_path` set: the trained target is reused and only
the draft is trained (with the target's tokenizer, the quickstart's draft recipe), then
draft_model N=4 is benchmarked at T=0, batch 1. `--config.target_path=<dir>` picks another
target. Writes sweep.md, sweep.csv and sweep.png (speedup and tau against the draft's layers).

Measured (the quickstart's target; 2-core x86 VM, idle; ~1 min a point for the small ones):
  draft         eval loss   c      tau (N=4, T=0)   speedup
  1x64          3.85        0.04   2.56             1.19x
  1x128         3.59        0.06   2.30             1.14x
  2x128         3.78        0.10   2.91             ~1.1x   (the quickstart's own draft)
At this training budget shallow drafts are further along than deep ones (the target, 6x384,
is at 4.16), so eval loss is not what predicts agreement; a cheaper draft (lower c) pays
about as well as a better-agreeing one.

All five points against another trained 6x384 target (an earlier quickstart run's, passed
with `--config.target_path=<its HF dir>`; ~8 min for the sweep; experiments/LOG.md):
  draft         eval loss   c      tau (N=4, T=0)   speedup
  1x64          3.85        0.04   1.78             0.88x
  1x128         3.59        0.07   1.61             0.76x
  2x128         3.78        0.11   1.82             0.81x
  4x128         3.97        0.21   1.95             0.65x
  2x256         3.94        0.23   1.73             0.51x
The two larger drafts are undertrained at 400 steps (higher eval loss) and cost twice as
much per token, so they lose; tau barely moves with the draft's size at this budget.
"""

from configs import quickstart
from configs.ablations.common import QUICKSTART, bench_config

# (layers, width); heads of 32 dims (half as many kv heads), SwiGLU width 3x, derived below.
SIZES = ((1, 64), (1, 128), (2, 128), (4, 128), (2, 256))


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = quickstart.get_config("tiny" if arg == "tiny" else None)
    config.target_path = f"{QUICKSTART}/target"
    model = config.draft.model
    width = model.get_ref("hidden_size")
    model.update(num_heads=width // 32, num_kv_heads=width // 64, head_dim=32)
    model.intermediate_size = width * 3
    bench = bench_config(arg).bench
    bench.target, bench.draft = "", ""  # the quickstart passes its models in
    bench.methods = ("draft_model",)
    config.bench = bench
    for key in ("source", "eval_fraction", "seed"):  # prompts from the target's eval split
        config.bench.data[key] = config.data.get_ref(key)
    return config


def get_sweep():
    return [
        {"draft.model.num_layers": layers, "draft.model.hidden_size": width}
        for layers, width in SIZES
    ]
