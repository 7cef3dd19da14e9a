"""What the ablation configs share: a lean benchmark of the quickstart's trained pair.

The target and draft default to the quickstart's models (train them first with
`python -m launch.main --config=configs/quickstart.py --workdir=workdirs/quickstart`);
another pair is `--config.bench.target=<dir> --config.bench.draft=<dir>` (a training
workdir or an HF directory each).
"""

import ml_collections

from configs import bench

QUICKSTART = "workdirs/quickstart"


def bench_config(arg=None) -> ml_collections.ConfigDict:
    """A task=bench config: batch 1, T=0, one method grid cell per point, no tau-vs-N pass.

    Args:
      arg: None, or "tiny" (8 new tokens, one prompt a category, one repeat: for tests).
    Returns:
      The config; the ablation file sets its methods and what it sweeps.
    """
    if arg not in (None, "tiny"):
        raise ValueError(f"unknown ablation variant {arg!r}; use None or 'tiny'")
    config = bench.get_config()
    config.bench.target = f"{QUICKSTART}/target"
    config.bench.draft = f"{QUICKSTART}/draft"
    config.bench.update(batch_sizes=(1,), temperatures=(0.0,), tau_vs_n=(), repeats=3)
    if arg == "tiny":
        config.bench.update(max_new_tokens=8, prompt_tokens=16, num_prompts=1, repeats=1)
    return config
