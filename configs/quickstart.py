r"""The quickstart: the embedded default pipeline in one command.

    python -m launch.main --config=configs/quickstart.py --workdir=workdirs/quickstart
    python -m launch.main --config=configs/quickstart.py:tiny --workdir=/tmp/quickstart  # CI smoke

Embedded corpus (the standard library's source and pydoc topics; nothing downloaded) -> BPE
tokenizer -> target LM -> draft LM (same tokenizer) -> benchmark of every registered method
against autoregressive decoding -> report. Outputs in the workdir: target/ and draft/
(training workdirs; `sj.load_model(<workdir>/target)` loads the model), bench/ (the
benchmark's results.json, report.md, plots/), report.md and results.json (the summary).
Running it again resumes: finished stages restore from their checkpoints.

Knobs: `--config.target.train.num_steps=...`, `--config.draft.model.num_layers=...`,
`--config.bench.methods='("draft_model",)'`; `--config.target_path=<dir>` reuses a trained
target (the draft is trained with its tokenizer).

Expected on a 2-core x86 CPU (this project's shared dev box, nothing else heavy running):
  default  ~TBD min. target 6x384 (11M params, 400 steps of 16x128 tokens): eval loss ~TBD;
           draft 2x128 (0.9M): eval loss ~TBD; decode cost target/draft ~TBD x at batch 1.
           draft_model N=4 at T=0, batch 1: tau ~TBD, speedup ~TBD x.
  tiny     ~TBD s. 2x64 target and 1x32 draft, 40 steps each, 16-token generations: only
           checks that every stage runs and that the numbers are sane (tau >= 1).
"""

import ml_collections

from configs import train_lm
from specjax.bench import default_config as bench_default_config
from specjax.bench.methods import registered_methods


def _shared_data(config: ml_collections.ConfigDict) -> None:
    """Target, draft and bench read the same corpus and the same train/eval split."""
    for part in (config.target, config.draft, config.bench):
        for key in ("source", "eval_fraction", "seed"):
            part.data[key] = config.data.get_ref(key)


def get_config(arg=None):
    """The quickstart config: "default" (None) or "tiny"."""
    variant = arg or "default"
    if variant not in ("default", "tiny"):
        raise ValueError(f"configs/quickstart.py: unknown variant {variant!r}; use default, tiny")
    config = ml_collections.ConfigDict()
    config.task = "quickstart"
    config.data = dict(source="embedded", eval_fraction=0.05, seed=0)
    config.target_path = ""  # a trained target (training workdir or HF dir) to reuse
    config.target = train_lm.get_config("target")
    config.draft = train_lm.get_config("draft")
    config.bench = bench_default_config()
    # Every registered method; the autoregressive baseline is timed alongside each one.
    config.bench.methods = tuple(m for m in registered_methods() if m != "autoregressive")
    if variant == "tiny":
        _tiny(config)
    _shared_data(config)
    return config


def _tiny(config: ml_collections.ConfigDict) -> None:
    """Seconds per stage: tiny models on a slice of the corpus, short generations."""
    config.target = train_lm.get_config("tiny")
    config.target.model.update(num_layers=2, hidden_size=64, head_dim=16, intermediate_size=128)
    config.draft = train_lm.get_config("tiny")
    config.draft.model.update(num_layers=1)
    config.bench.update(
        batch_sizes=(1,),
        temperatures=(0.0,),
        max_new_tokens=16,
        prompt_tokens=16,
        num_prompts=1,
        repeats=1,
        tau_vs_n=(4,),  # = num_speculative_tokens: reuses the compiled draft_model program
    )
