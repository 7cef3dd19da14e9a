"""What a benchmark or a pick runs on: the models and the held-out prompts.

Shared by the harness (`harness.run_bench`) and the picker (`specjax.picker.pick`), which
both take a config with `target` / `draft` paths and the workload keys (`data`,
`num_prompts`, `prompt_tokens`, `seed`).
"""

from __future__ import annotations

from specjax import data
from specjax.bench import spec_bench
from specjax.bench.methods import Drafts, check_methods, weight_dtype, with_value
from specjax.heads import check_heads_fit
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.models import Model, as_model, check_same_vocabulary


def _head_slots(cfg, heads) -> dict:
    """{slot: heads object or path}: given heads win over the config's `heads.<slot>` paths."""
    slots = {k: v for k, v in (cfg.get("heads") or {}).items() if v}
    slots.update({k: v for k, v in (heads or {}).items() if v is not None})
    return slots


def check_inputs(cfg, draft=None, heads=None) -> None:
    """Every method in cfg.methods registered and given what it drafts with, before loading."""
    slots = tuple(_head_slots(cfg, heads).items())
    weight_dtype(cfg), weight_dtype(cfg, "draft_weight_dtype")  # "" or "bfloat16"
    check_methods(cfg.methods, Drafts(draft if draft is not None else (cfg.draft or None), slots))
    depths_at_batch(cfg)


def depths_at_batch(cfg) -> dict[int, int]:
    """{batch_size: N} from `cfg.depth_at_batch` ((batch_size, N) pairs), checked: positive
    integers, each batch size one of `cfg.batch_sizes` and named once."""
    pairs = cfg.get("depth_at_batch", ()) or ()
    if not pairs:  # the picker's config times one batch_size and has neither key
        return {}
    batches = tuple(int(b) for b in cfg.batch_sizes)
    depths = {}
    for pair in pairs:
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        if not ok or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair
        ):
            raise ValueError(
                f"depth_at_batch: {pair!r} is not a (batch_size, num_speculative_tokens) pair "
                "of positive integers, e.g. depth_at_batch=((8, 2),)"
            )
        batch, n = pair
        if batch not in batches:
            raise ValueError(
                f"depth_at_batch names batch size {batch}, which the run does not time: "
                f"batch_sizes is {batches} (add it there, or drop the pair)"
            )
        if batch in depths:
            raise ValueError(f"depth_at_batch names batch size {batch} twice: {tuple(pairs)!r}")
        depths[batch] = n
    return depths


def at_batch(cfg, batch_size: int):
    """`cfg` as the run's cells at `batch_size` use it: num_speculative_tokens replaced where
    `cfg.depth_at_batch` names that batch size (a copy; `cfg` itself when it does not)."""
    n = depths_at_batch(cfg).get(int(batch_size))
    return cfg if n is None else with_value(cfg, "num_speculative_tokens", n)


def resolve_models(cfg, target=None, draft=None, heads=None) -> tuple[Model, Model | None, Drafts]:
    """(target, draft, drafts for timed calls): given objects win over the config's paths.

    Args:
      cfg: a config with `target` and `draft` paths and `heads.<slot>` paths ("" = unset).
      target, draft: optional Models (or Decoders) used instead of the paths.
      heads: optional {slot: heads} used instead of `cfg.heads.<slot>`.
    Returns:
      The target, the draft (None when there is none), and the Drafts the timed calls use:
      the draft stripped of its tokenizer (its vocabulary already checked against the
      target's) and every head set, checked against the target.
    """
    if target is None:
        if not cfg.target:
            raise ValueError("no target model: set the config's `target` to a checkpoint directory")
        target = load_model(cfg.target)
    target = as_model(target)
    if target.tokenizer is None:
        raise ValueError("the target model needs a tokenizer (held-out prompts are tokenised)")
    loaded = {}
    for slot, value in _head_slots(cfg, heads).items():
        loaded[slot] = load_draft(value, target=target) if isinstance(value, str) else value
        check_heads_fit(loaded[slot], target)
    if draft is None and cfg.draft:
        draft = load_model(cfg.draft)
    timed = None
    if draft is not None:
        draft = as_model(draft)
        check_same_vocabulary(target, draft)
        timed = Model(draft.module, None, draft.source)
    return target, draft, Drafts(timed, tuple(sorted(loaded.items())))


def prompts_by_category(cfg, tokenizer) -> dict[str, list[list[int]]]:
    """{category: prompt ids}: `cfg.num_prompts` held-out prompts of each category.

    `cfg.data.source = "spec_bench"`: Spec-Bench's questions (`specjax.bench.spec_bench`),
    chat-templated, at most `cfg.prompt_tokens` long, in `cfg.data.categories` (empty: all).
    Any other source: `prompt_tokens`-token windows of the corpus's held-out split.
    """
    if cfg.data.source == "spec_bench":
        return spec_bench.prompts_by_category(
            tokenizer, int(cfg.num_prompts), int(cfg.prompt_tokens), int(cfg.seed),
            tuple(cfg.data.get("categories") or ()) or None,
        )  # fmt: skip
    ds = data.load_text_dataset(cfg.data.source)
    _, eval_ds = data.split_dataset(ds, cfg.data.eval_fraction, cfg.data.seed)
    grouped: dict[str, list[list[int]]] = {}
    for category, ids in data.held_out_prompts(
        eval_ds, tokenizer, cfg.num_prompts, cfg.prompt_tokens, cfg.seed
    ):
        grouped.setdefault(category, []).append(ids)
    return grouped
