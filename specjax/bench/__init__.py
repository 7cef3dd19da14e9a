"""Benchmarks in the manner of Spec-Bench: every method against the autoregressive baseline.

    from specjax.bench import default_config
    from specjax.bench.harness import run_bench
    cfg = default_config()
    cfg.target, cfg.draft = "workdirs/quickstart/target", "workdirs/quickstart/draft"
    results = run_bench(cfg, "workdirs/bench")   # results.json, report.md, plots/*.png

Files: `methods.py` (the registry of method name -> speculative_config, and `method_knobs`:
the methods' knobs with their defaults, shared with the picker), `workload.py` (the
models and held-out prompts a run uses, shared with the picker), `timing.py` (batches,
interleaved timing, pooled acceptance statistics, machine description), `harness.py` (the
runs), `report.py` (report.md), `plots.py` (PNG plots), `markdown.py` (the one table
writer) and `plotstyle.py` (the one plot style), `pairs.py` (self-drafts for benchmarks
without a trained pair). The speedup formulas are `specjax.speedup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specjax.bench.methods import method_knobs

# ml_collections is imported inside the config builder below, not here: the timing helpers
# and the method registry import this package, and experiments/device_check.py uses them on
# machines that have jax, flax, optax and orbax but not necessarily ml_collections.
if TYPE_CHECKING:
    import ml_collections


def default_config() -> ml_collections.ConfigDict:
    """The benchmark's knobs with their defaults.

    Returns:
      A ConfigDict: target / draft (checkpoint directories, "" = unset), weight_dtype (the
      target's weights as read: "" or "bfloat16"), heads, methods and the method knobs (`methods.method_knobs`: num_speculative_tokens, draft_tree,
      prompt_lookup_min/max, medusa_tree, eagle_tree, dynamic_tree, lookahead), the grid
      (batch_sizes x temperatures), depth_at_batch ((batch_size, N) pairs: the chains' N at
      that batch size), verify_blocks, the workload (max_new_tokens,
      prompt_tokens, num_prompts per category), repeats (timed repeats per cell, each
      interleaved with the autoregressive baseline), tau_vs_n (the draft-depth sweep of
      draft_model at batch 1, at tau_vs_n_temperature, default 0), data (where held-out
      prompts come from) and seed.
    """
    import ml_collections  # not at the top: see the note there

    cfg = ml_collections.ConfigDict()
    cfg.target = ""
    cfg.draft = ""
    cfg.update(method_knobs())  # heads, methods and each method's knobs, shared with the picker
    # The target's matmul weights as read, by every method and the AR baseline alike: "" = as
    # stored; "bfloat16" = rounded (a different model: `sj.generate(weight_dtype=...)`).
    cfg.weight_dtype = ""
    cfg.batch_sizes = (1, 8)
    # (batch_size, N) pairs: at that batch size, the methods drafting num_speculative_tokens
    # (chains, Medusa's tree cut to N heads) draft N instead; () = num_speculative_tokens at
    # every batch. A verify block costs more AR steps at a larger batch, so a served batch of
    # several rows wants a shorter draft (the picker's served-batch cost curve).
    cfg.depth_at_batch = ()
    # Block sizes of the target's verify-cost curve in the report (`bench.verify_cost`); ()
    # skips it.
    cfg.verify_blocks = (1, 2, 3, 5, 8, 12, 16, 24, 32)
    cfg.temperatures = (0.0, 1.0)
    cfg.max_new_tokens = 64
    cfg.prompt_tokens = 64
    cfg.num_prompts = 4
    cfg.repeats = 3
    cfg.tau_vs_n = (1, 2, 4, 8)
    cfg.tau_vs_n_temperature = 0.0
    # source "spec_bench": Spec-Bench's questions (categories: a subset; empty: all 13)
    cfg.data = ml_collections.ConfigDict(
        dict(source="embedded", eval_fraction=0.05, seed=0, categories=())
    )
    cfg.seed = 0
    return cfg
