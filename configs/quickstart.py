r"""The quickstart: the embedded default pipeline in one command.

    python -m launch.main --config=configs/quickstart.py --workdir=workdirs/quickstart
    python -m launch.main --config=configs/quickstart.py:tiny --workdir=/tmp/quickstart  # CI smoke

Embedded corpus (the standard library's source and pydoc topics; nothing downloaded) -> BPE
tokenizer -> target LM -> draft LM (same tokenizer) -> Medusa-1 heads and an EAGLE-3 drafter
on the frozen target (one self-distillation of the target feeds both) -> benchmark of every
method whose draft the quickstart trains, against autoregressive decoding -> report. Outputs
in the workdir: target/ and draft/ (training workdirs; `sj.load_model(<workdir>/target)`
loads the model), medusa/ and eagle3/ (head-training workdirs; `sj.load_draft(...)`),
distill/ (the shared self-distilled rows), bench/ (the benchmark's results.json, report.md,
plots/), report.md and results.json (the summary). Running it again resumes: finished stages
restore from their checkpoints.

Knobs: `--config.target.train.num_steps=...`, `--config.draft.model.num_layers=...`,
`--config.bench.methods='("draft_model",)'`; `--config.target_path=<dir>` reuses a trained
target (the draft is trained with its tokenizer).

Budget: the whole default run within 20 minutes on a 2-core CPU, pip install excluded (the
tiny variant within 2). Each stage's budget, and what it took on this project's dev box (a
2-core x86 VM, jax 0.10.2 on CPU, idle; fresh clone, the README's command, 2026-12-01: 17.2
min wall in all, pip included):
  stage                         budget    measured   what
  data + BPE                    0.5 min   ~0.3 min   embedded corpus, BPE of 2048
  1 target LM                   7 min     5.9 min    6x384, 400 steps of 8x128 tokens: eval 4.42
  2 draft LM                    1.5 min   1.3 min    2x128, 300 steps of 16x128: eval 4.04
  3 Medusa-1 heads              2 min     1.8 min    self-distillation (256 + 16 rows, shared),
                                                     features stored once, 150 steps; one
                                                     shared LM head over 512 ids and 400
                                                     steps since 2026-12-06; 512 rows, two
                                                     blocks, 1200 steps since 2026-12-07
                                                     (2.0 min)
  4 EAGLE-3 drafter             2 min     1.7 min    taps stored once, 120 steps, 3-step TTT;
                                                     240 steps since 2026-12-07 (2.1-2.2 min);
                                                     360 steps of a 4-step TTT since
                                                     2026-12-07 (6)
  5 benchmark + decode timing   7 min     6.3 min    6 methods x batch {1, 8} x T {0, 1}, one
                                                     AR baseline per cell, 3 prompts a category
                                                     x 3 repeats; tau vs N at N = 1, 2, 4
                                                     (with lookahead, 7 methods: 4.85 min on a
                                                     day the whole run took 12.96 min)
  Results (BENCHMARKS.md "Quickstart"): T=0, batch 1: medusa tau 3.10, 1.51x; medusa_chain
  2.70, 1.39x; ngram 2.17, 1.18x; eagle3 3.18, 0.79x (dynamic tree depth 5, 16 drafts);
  draft_model 1.97, 0.93x. At T=1 only draft_model pays (2.44, 1.20x); at batch 8 nothing
  does (best ngram 0.94x). On a day the VM ran 1.45x slower the whole run took 24.2 min.
  With the shared LM head, on a 2-core Zen 4 EPYC (2026-12-06, 12.4 min): medusa_chain
  2.50, 1.41x; ngram 2.07, 1.36x; medusa 2.82, 1.13x; eagle3 3.38, 0.61x. With EAGLE-3 over
  512 ids, its 6-node dynamic tree and eagle3_chain (13.8 min on a slower day): medusa_chain
  1.35x, ngram 1.31x, eagle3_chain 2.66, 1.04x; eagle3 2.86, 0.85x. With 400 Medusa steps
  (15.5 min on a slow day): medusa_chain 2.70, 1.58x; medusa 3.07, 1.21x; ngram 1.29x;
  eagle3_chain 1.05x; eagle3 0.97x. With the heads of 2026-12-07 (15.8-15.9 min, BENCHMARKS.md
  "A Zen 4 EPYC, sixth session"): medusa_chain 3.41-3.53, 1.59-1.90x; medusa 3.71-3.74,
  1.33-1.70x; eagle3_chain 3.10, 1.17-1.36x; eagle3 3.47, 1.05-1.30x; at batch 8
  medusa_chain 0.81-1.00x. The drafts read in bfloat16 since (BENCHMARKS.md "Weights read in
  bfloat16", a bench re-run on the same models): medusa_chain 1.86x, eagle3_chain 1.29x,
  eagle3 1.23x; alternated in one process the Medusa chain 1.62x -> 1.70x, EAGLE-3's
  dynamic tree 0.97x -> 1.10x. On a 2-core Intel Xeon (AVX-512) with the host set-up cut and
  EAGLE-3's 4-step training-time test (2026-12-07, 15.8 min; BENCHMARKS.md "An Intel Xeon,
  tenth session", the run and two bench re-runs): medusa_chain 3.71, 1.90-2.05x;
  eagle3_chain 3.50, 1.37-1.50x; eagle3 3.90, 1.30-1.41x; ngram 1.36-1.53x; at batch 8
  medusa_chain 0.85-0.89x. On a 2-core AMD EPYC Zen 3 with AVX2 only, with the chains at N = 2
  at batch 8 (2026-12-07, 23.1 min; BENCHMARKS.md "An AMD EPYC Zen 3, AVX2 only"):
  medusa_chain 3.50, 1.41x; eagle3_chain 3.29, 1.13x; ngram 1.28x; at batch 8 medusa_chain
  1.09x, ngram 1.01x.
  tiny     ~1.5 min wall. 2x64 target and 1x32 draft, 120 steps each on the synthetic
           pair-cycle corpus (`specjax.data.pair_cycle_records`, which a tiny target learns
           and then continues deterministically), tiny heads (60 steps), 8 prompts of 16
           tokens + 16 generated at T=0 and T=1: checks that every stage runs and that the
           trained heads' drafts are accepted where untrained ones' are not
           (tests/launch/test_quickstart.py); its speedups are noise around 1x.
"""

import ml_collections

from configs import train_eagle, train_lm, train_medusa
from specjax import data
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
    # One LM head for the four heads, the target's (vLLM's `original_lm_head`), cut to the
    # 512 ids the training rows use most (`truncated_vocab_size`): on this 6x384 target four
    # trained [384, 2048] copies were 12.6 MB of a step's bytes. Chain step 2.08 -> 1.61 AR
    # steps at tau 2.91 -> 2.80, whole call 1.30x -> 1.49x (experiments/heads_ab.py,
    # BENCHMARKS.md "A Zen 4 EPYC, fourth session").
    config.medusa.heads.update(shared_lm_head=True, draft_vocab_size=512)
    # Such heads train in a third of the time, so they got 400 steps (was 150): held-out
    # top-1 .726 / .680 / .656 / .616 -> .766 / .728 / .696 / .633, chain tau 2.80 -> 2.91,
    # about 0.6 min more (BENCHMARKS.md "A Zen 4 EPYC, fourth session"). Then twice the rows
    # (256 prompts a category), a second residual block and 1200 steps at 5e-3: held-out
    # top-1 -> .87 / .81 / .78 / .74, chain-4 tau on 24 held-out prompts 3.09 -> 3.57 (one
    # block at 3e-3: 3.33; 1024 rows and 2000 steps at 3e-3: 3.61, two minutes more); the
    # block adds 4 x 384 x 384 weights a step (experiments/LOG.md 2026-12-07 (2)).
    config.medusa.data.num_prompts = 256
    config.medusa.heads.num_layers = 2
    config.medusa.train.update(num_steps=1200, learning_rate=5e-3, eval_every=600,
                               checkpoint_every=600)  # fmt: skip
    # EAGLE-3 on the same self-distilled rows (cached by the first trainer), its three layer
    # taps stored once; a shorter training-time-test unroll than the paper's 7.
    config.eagle3 = train_eagle.get_config()
    # A draft vocabulary of the 512 ids the rows use most (EAGLE-3's d2t): the drafter's LM
    # head a quarter of the size, and held-out tau up (chain 3: 2.27 -> 2.62, step 2.17 ->
    # 2.00 AR steps; BENCHMARKS.md "A Zen 4 EPYC, fourth session").
    config.eagle3.head.draft_vocab_size = 512
    config.eagle3.train.update(num_steps=120, eval_every=60, checkpoint_every=60)
    # The same 512 rows as the heads (one self-distillation), 240 steps at 3e-3: held-out top-1
    # .755 / .754 / .714 -> .82 / .81 / .80, tau on 24 held-out prompts chain 3 2.70 -> 2.91,
    # the (4, 2, 6) dynamic tree 3.26 -> 3.67 (experiments/LOG.md 2026-12-07 (2)). Then a
    # 4-step training-time test (the bench drafts chains of 4: a 3-step unroll never trained
    # the fourth) and 360 steps: chain-4 tau on those prompts 3.17 -> 3.70, about 1.5 minutes
    # more (480 steps of 3: 3.59; 480 of 4: 3.82, 3 minutes more; experiments/LOG.md
    # 2026-12-07 (6)).
    config.eagle3.ttt_steps = 4
    config.eagle3.data.num_prompts = config.medusa.data.get_ref("num_prompts")
    config.eagle3.train.update(num_steps=360, learning_rate=3e-3, eval_every=180,
                               checkpoint_every=180)  # fmt: skip
    config.bench = bench_default_config()
    # Every registered method whose draft the quickstart trains (EAGLE-1's drafter is not:
    # eagle1 / eagle2 need `configs/train_eagle.py` run apart); the autoregressive baseline
    # is timed in the same round-robin.
    skip = ("autoregressive", "eagle1", "eagle2")
    config.bench.methods = tuple(m for m in registered_methods() if m not in skip)
    config.bench.update(num_prompts=3, tau_vs_n=(1, 2, 4))
    # EAGLE-2's dynamic tree at 6 nodes, not the default 16: on this 6x384 target every
    # verified node costs a measurable part of a step, and the 16-node tree's step cost
    # 5.7-7.0 AR steps for tau 3.1-3.3 (0.5x); depth 4, top-2, 6 nodes: 2.8 AR steps, tau
    # 2.96, 1.03x (BENCHMARKS.md "A Zen 4 EPYC, fourth session").
    config.bench.dynamic_tree.update(depth=4, top_k=2, total_tokens=6)
    # The drafts' weights read in bfloat16 (lossless: the target verifies in float32): the
    # Medusa chain's step 1.73 -> 1.66 AR steps, EAGLE-3's dynamic tree 3.01 -> 2.82, the
    # draft LM's chain 2.00 -> 1.87 (experiments/weight_dtype_ab.py, BENCHMARKS.md "Weights
    # read in bfloat16").
    config.bench.draft_weight_dtype = "bfloat16"
    # At batch 8 the chains draft 2, not 4: a verified row costs more there (a 24-row step of
    # the Medusa chain of 2 is ~2.1 AR steps of 8 rows), and in three runs of
    # experiments/batch_depth.py on an Intel Xeon the Medusa chain of 2 ran 0.93-1.01x where
    # the chain of 4 ran 0.75-0.91x (LOG.md 2026-12-07 (6)). The dynamic tree keeps its depth.
    config.bench.depth_at_batch = ((8, 2),)
    if variant == "tiny":
        _tiny(config)
    _shared_data(config)
    return config


def _tiny(config: ml_collections.ConfigDict) -> None:
    """Seconds per stage: tiny models on the synthetic pair-cycle corpus, short generations.

    The corpus (`specjax.data.pair_cycle_records`) is one that a tiny target learns in its
    few steps and then continues deterministically, and on which a draft one offset off is
    right 1 time in 6: trained heads get their drafts accepted and broken ones do not (on
    the embedded corpus the tiny target's greedy output is a run of spaces, which any head
    drafts).
    """
    config.data.source = data.PAIR_CYCLE
    config.target = train_lm.get_config("tiny")
    config.target.model.update(num_layers=2, hidden_size=64, head_dim=16, intermediate_size=128)
    config.draft = train_lm.get_config("tiny")
    config.draft.model.update(num_layers=1)
    # The step is cheap next to compiling and checkpointing: 120 steps at a large rate learn
    # the cycle (the target follows it at T=0) in about the time 40 took.
    for lm in (config.target, config.draft):
        lm.train.update(num_steps=120, learning_rate=1e-2, eval_every=60, checkpoint_every=60)
    config.medusa = train_medusa.get_config("tiny")
    config.medusa.features.precompute = True
    config.medusa.heads.num_heads = config.bench.num_speculative_tokens  # the bench's N
    config.eagle3 = train_eagle.get_config("tiny")
    config.eagle3.ttt_steps = 3
    for heads in (config.medusa, config.eagle3):
        heads.data.num_prompts = 16  # one category: as many rows as the embedded corpus gave
        heads.train.update(num_steps=60, learning_rate=1e-2, eval_every=30, checkpoint_every=30)
    config.bench.dynamic_tree.update(depth=4, top_k=2, total_tokens=6)
    config.bench.update(
        batch_sizes=(1,),
        depth_at_batch=(),
        temperatures=(0.0, 1.0),
        max_new_tokens=16,  # prompt + generation within the target's 32 training positions
        prompt_tokens=16,
        num_prompts=8,  # 128 tokens a cell: enough steps for acceptance by position
        repeats=1,
        tau_vs_n=(4,),  # = num_speculative_tokens: reuses the compiled draft_model program
    )
