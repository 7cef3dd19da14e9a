r"""Ablation: the verification rule at T=1 (draft_model chain, N=4): probabilistic, strict, typical.

    python -m launch.sweep --config=configs/ablations/verification.py \
        --workdir=workdirs/ablations/verification

`probabilistic` (min(1, p/q), residual resampling) and `strict` (sample from p, accept iff
equal) are lossless; `typical` (Medusa's typical acceptance) is lossy and runs only with
`allow_lossy=True`, which its point sets.

The bench's method builders forward `bench.verification` and `bench.allow_lossy` into each
speculative_config.

Measured (2026-11-29, 2-core CPU, ~1 min; pair Q of docs/skill-spec-decode-picker.md: a
target 6x384 from an earlier quickstart configuration, 300 steps, eval loss 4.41, and the
2x128 draft, `--config.bench.target=... --config.bench.draft=...`; experiments/LOG.md):

| verification | tau | speedup vs AR |
| --- | ---: | ---: |
| probabilistic | 2.27 | 0.91x |
| strict | 1.14 | 0.52x |
| typical (lossy) | 4.67 | 1.62x |

Expected: probabilistic accepts the most of the lossless rules (strict throws away every
draft the target's own sample disagrees with, so its tau is lower); typical accepts more
than either at the price of a different output distribution.
"""

from configs.ablations.common import bench_config


def get_config(arg=None):
    """Base run of the sweep (`arg`: None or "tiny")."""
    config = bench_config(arg)
    config.bench.methods = ("draft_model",)
    config.bench.temperatures = (1.0,)
    config.bench.verification = "auto"
    config.bench.allow_lossy = False
    return config


def get_sweep():
    return [
        {"bench.verification": "probabilistic"},
        {"bench.verification": "strict"},
        {"bench.verification": "typical", "bench.allow_lossy": True},
    ]
