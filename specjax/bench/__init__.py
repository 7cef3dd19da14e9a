"""Benchmarks in the manner of Spec-Bench: every method against the autoregressive baseline.

    from specjax.bench import default_config
    from specjax.bench.harness import run_bench
    cfg = default_config()
    cfg.target, cfg.draft = "workdirs/quickstart/target", "workdirs/quickstart/draft"
    results = run_bench(cfg, "workdirs/bench")   # results.json, report.md, plots/*.png

Files: `methods.py` (the registry of method name -> speculative_config), `workload.py` (the
models and held-out prompts a run uses, shared with the picker), `timing.py` (batches,
interleaved timing, pooled acceptance statistics, machine description), `harness.py` (the
runs), `report.py` (report.md), `plots.py` (PNG plots), `markdown.py` (the one table
writer) and `plotstyle.py` (the one plot style), `pairs.py` (self-drafts for benchmarks
without a trained pair). The speedup formulas are `specjax.speedup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specjax.decoding.spec_config import lookahead_defaults

# ml_collections is imported inside the config builders below, not here: the timing helpers
# and the method registry import this package, and experiments/device_check.py uses them on
# machines that have jax, flax, optax and orbax but not necessarily ml_collections.
if TYPE_CHECKING:
    import ml_collections

# Medusa's default sparse tree in benchmarks and the quickstart (specjax.decoding.trees).
DEFAULT_MEDUSA_TREE = "medusa_k4_8"  # chosen by measurement: BENCHMARKS.md "Medusa"
# EAGLE-1's static tree (the reference's default, cut to num_speculative_tokens) and the
# dynamic tree's sizes for EAGLE-2/3 on this CPU (its depth is num_speculative_tokens).
DEFAULT_EAGLE_TREE = "eagle1_25"
# The dynamic tree has its own depth (the N of the eagle2 / eagle3 rows): its best budget is
# deeper than the grid's N. Chosen by measurement (LOG 2026-12-01, "scored by the law").
DEFAULT_DYNAMIC_TREE = {"depth": 5, "top_k": 4, "total_tokens": 16}


def lookahead_config() -> ml_collections.ConfigDict:
    """Lookahead's bench knobs, this machine's defaults (`spec_config.lookahead_defaults`):
    window W, candidate_length = ngram_size - 1 (the N of its rows), max_candidates G,
    seed_pool_from_prompt."""
    import ml_collections  # not at the top: see the note there

    W, N, G = lookahead_defaults()
    return ml_collections.ConfigDict(
        dict(window=W, candidate_length=N - 1, max_candidates=G, seed_pool_from_prompt=True)
    )


def dynamic_tree_config() -> ml_collections.ConfigDict:
    """`DEFAULT_DYNAMIC_TREE` plus score_temperature (a float placeholder: None = the decode's
    own law, sharpened at T=0; see `eagle_tree.DynamicTree`)."""
    import ml_collections  # not at the top: see the note there

    cfg = ml_collections.ConfigDict(DEFAULT_DYNAMIC_TREE)
    cfg.score_temperature = ml_collections.config_dict.placeholder(float)
    return cfg


def default_config() -> ml_collections.ConfigDict:
    """The benchmark's knobs with their defaults.

    Returns:
      A ConfigDict: target / draft (checkpoint directories, "" = unset), heads (one slot
      per head family: heads.medusa / heads.eagle / heads.eagle3 = a heads directory or
      head-training workdir), methods
      (names registered in `specjax.bench.methods`), the method knobs (num_speculative_tokens,
      draft_tree, prompt_lookup_min/max, medusa_tree: a named tree cut to
      num_speculative_tokens heads, "" = a chain; eagle_tree: EAGLE-1's static tree, cut
      likewise; dynamic_tree: EAGLE-2/3's depth, top_k, total_tokens and
      score_temperature; lookahead: window, candidate_length, max_candidates,
      seed_pool_from_prompt), the grid (batch_sizes x temperatures), the
      workload (max_new_tokens, prompt_tokens, num_prompts per category), repeats (timed
      repeats per cell, each interleaved with the autoregressive baseline), tau_vs_n (the
      draft-depth sweep of draft_model at batch 1, at tau_vs_n_temperature, default 0), data (where held-out prompts
      come from) and seed.
    """
    import ml_collections  # not at the top: see the note there

    cfg = ml_collections.ConfigDict()
    cfg.target = ""
    cfg.draft = ""
    cfg.heads = ml_collections.ConfigDict(dict(medusa="", eagle="", eagle3=""))
    cfg.methods = ("draft_model", "draft_tree", "ngram")
    cfg.num_speculative_tokens = 4
    cfg.draft_tree = ml_collections.ConfigDict(dict(depth=3, width=2))
    cfg.prompt_lookup_min = 1
    cfg.prompt_lookup_max = 3
    cfg.medusa_tree = DEFAULT_MEDUSA_TREE
    cfg.eagle_tree = DEFAULT_EAGLE_TREE
    cfg.dynamic_tree = dynamic_tree_config()
    cfg.lookahead = lookahead_config()
    cfg.batch_sizes = (1, 8)
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
