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

Measured on this project's dev box: a 2-core x86 VM ("Intel Xeon Processor"), jax 0.10.2 on
CPU, nothing else running (load average ~1.5, i.e. this run):
  default  12.2 min wall (20.5 CPU-min): data + BPE ~20 s a model; target 6x384 (11.0M
           params, 600 steps of 8x128 tokens) ~7 min, eval loss 4.16 (perplexity 64); draft
           2x128 (0.92M, 400 steps of 16x128) ~1.3 min, eval loss 3.78 (perplexity 44: at
           this budget the small model is further along; the target is the under-trained
           one); decode at batch 1: 2.84 vs 0.29 ms/token (c = 0.10); benchmark ~4 min.
           T=0, batch 1: draft_model N=4 tau 2.9, 1.1x; top-k tree (depth 3, width 2)
           tau 3.15, 0.9x; ngram tau 2.25, 1.15x. tau vs N (draft_model): 1.73, 2.22, 2.91,
           3.50 for N = 1, 2, 4, 8, speedup best at N = 1-2 (1.2x). At T=1 and at batch 8
           every method runs at 0.5-1.0x: a speculative step costs ~3.5 autoregressive
           steps on this CPU, so tau ~2.5 does not pay. With other jobs sharing the two
           cores (load average ~7) the same run took 44 min and timings spread by ~20%.
           Re-run on a fresh clone after the decode-step changes (README command, pip
           included): 10.8 min, same models, decode 2.03 vs 0.22 ms/token, same speedups
           within 0.05x (BENCHMARKS.md, "Quickstart").
  tiny     41 s wall (~1.5-2 min on the loaded box). 2x64 target and 1x32 draft, 40 steps
           each on 100k characters a category, 16-token generations at T=0 and T=1: checks
           that every stage runs and that the numbers are sane (tau >= 1); its speedups are
           noise around 1x.
"""

import ml_collections

from configs import train_eagle, train_lm, train_medusa
from specjax.bench import default_config as bench_default_config
from specjax.bench.methods import registered_methods


def _shared_data(config: ml_collections.ConfigDict) -> None:
    """Target, draft, heads and bench read the same corpus and the same train/eval split."""
    for part in (config.target, config.draft, config.medusa, config.eagle3, config.bench):
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
    config.draft.train.num_steps = 300
    # Medusa-1 on the target's own greedy continuations; its features computed once and
    # stored (one target pass over the rows), so each step costs the heads alone.
    config.medusa = train_medusa.get_config()
    config.medusa.features.precompute = True
    config.medusa.train.update(num_steps=150, eval_every=75, checkpoint_every=75)
    # EAGLE-3 on the same self-distilled rows (cached by the first trainer), its three layer
    # taps stored once; a shorter training-time-test unroll than the paper's 7.
    config.eagle3 = train_eagle.get_config()
    config.eagle3.ttt_steps = 3
    config.eagle3.train.update(num_steps=120, eval_every=60, checkpoint_every=60)
    config.bench = bench_default_config()
    # Every registered method whose draft the quickstart trains (EAGLE-1's drafter is not:
    # eagle1 / eagle2 need `configs/train_eagle.py` run apart); the autoregressive baseline
    # is timed in the same round-robin.
    skip = ("autoregressive", "eagle1", "eagle2")
    config.bench.methods = tuple(m for m in registered_methods() if m not in skip)
    config.bench.update(num_prompts=3, tau_vs_n=(1, 2, 4))
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
    config.medusa = train_medusa.get_config("tiny")
    config.medusa.features.precompute = True
    config.medusa.heads.num_heads = config.bench.num_speculative_tokens  # the bench's N
    config.eagle3 = train_eagle.get_config("tiny")
    config.bench.dynamic_tree.update(top_k=2, total_tokens=6)
    config.bench.update(
        batch_sizes=(1,),
        temperatures=(0.0, 1.0),
        max_new_tokens=16,
        prompt_tokens=16,
        num_prompts=1,
        repeats=1,
        tau_vs_n=(4,),  # = num_speculative_tokens: reuses the compiled draft_model program
    )
