"""The benchmark's method registry: a name -> a `speculative_config` for `sj.generate`.

A method is a function `fn(cfg, drafts) -> dict | None` registered under a name; it reads
what it needs from the benchmark config (`num_speculative_tokens`, `draft_tree`,
`prompt_lookup_min`, `medusa_tree`, ...) and from `drafts` (a `Drafts`: the draft LM and the
trained head sets, each None when the run has none) and returns the `speculative_config` to
pass to `generate`, or None for plain autoregressive decoding.

    @register_method("medusa", needs_heads="medusa")
    def _medusa(cfg, drafts):
        return {"method": "medusa", "model": drafts.head("medusa"), ...}

`depth_key` names the config field that plays the role of N (the draft depth) for that
method, so that sweeps (tau vs N in the harness, N = 1..n_max in the picker) can vary it
without knowing the method: "num_speculative_tokens" for chains and Medusa (heads used),
"draft_tree.depth" for the top-k tree. `needs_draft` / `needs_heads` make a missing draft
model or head set a clear error before anything runs. `nodes(cfg, n)` gives the draft nodes
the target verifies per step at depth n (default n: a chain), the width cost that the
picker's acceptance model does not see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from specjax.decoding import trees
from specjax.decoding.spec_config import lookahead_defaults
from specjax.kernels import check_weight_dtype

# ml_collections is imported inside `method_knobs` and `with_depth`, not here: the registry
# and the timing helpers run where only jax, flax, optax and orbax are installed
# (experiments/device_check.py on a bare accelerator machine).
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


@dataclasses.dataclass(frozen=True)
class Drafts:
    """What the methods draft with: the draft LM and trained head sets (None when absent).

    Attributes:
      model: the draft LM (`draft_model`, `draft_tree`).
      heads: (slot, heads) pairs, e.g. ("medusa", MedusaHeads); a slot per head family.
    """

    model: object | None = None
    heads: tuple = ()

    def head(self, slot: str):
        """The head set in `slot`, or None."""
        return dict(self.heads).get(slot)


def as_drafts(drafts) -> Drafts:
    """A Drafts, or a bare draft model (or None) taken as Drafts(model=...)."""
    return drafts if isinstance(drafts, Drafts) else Drafts(model=drafts)


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered method: its builder and what it needs."""

    name: str
    fn: Callable
    needs_draft: bool = False
    depth_key: str | None = "num_speculative_tokens"  # None: the method has no N
    nodes: Callable | None = None  # (cfg, n) -> draft nodes per step; None: n (a chain)
    needs_heads: str | None = None  # the head slot it drafts with ("medusa"), if any

    def num_nodes(self, cfg, n: int) -> int:
        """Draft nodes the target verifies per step at depth n."""
        return int(n) if self.nodes is None else int(self.nodes(cfg, n))


_REGISTRY: dict[str, Method] = {}


def register_method(
    name: str,
    *,
    needs_draft: bool = False,
    depth_key: str | None = "num_speculative_tokens",
    nodes: Callable | None = None,
    needs_heads: str | None = None,
):
    """Decorator: register `fn(cfg, drafts) -> speculative_config | None` under `name`.

    Args:
      name: the method's name in `cfg.methods`.
      needs_draft: the method drafts with the separate draft model (`cfg.draft`).
      needs_heads: the head slot it drafts with (`cfg.heads.<slot>`), e.g. "medusa".
      depth_key: dotted config field holding the draft depth N; None if it has none.
      nodes: `(cfg, n) -> int` draft nodes verified per step at depth n; None = n (chain).
    Returns:
      The decorator (which returns `fn` unchanged).
    """

    def decorator(fn):
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"benchmark method {name!r} is already registered")
        _REGISTRY[name] = Method(name, fn, needs_draft, depth_key, nodes, needs_heads)
        return fn

    return decorator


def registered_methods() -> tuple[str, ...]:
    """The registered method names, in registration order."""
    return tuple(_REGISTRY)


def get_method(name: str) -> Method:
    """The registered method `name`; ValueError listing the registered ones otherwise."""
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown benchmark method {name!r}; registered methods: {list(_REGISTRY)}"
        )
    return _REGISTRY[name]


def check_methods(names, drafts) -> None:
    """Fail early: every name registered, and a draft model or head set present where one is
    needed. `drafts`: a Drafts (or a bare draft model / None); paths count as present."""
    if isinstance(names, str):
        raise ValueError(f"methods must be a list of names, got the string {names!r}")
    drafts = as_drafts(drafts)
    for method in [get_method(name) for name in names]:  # every name first, then the drafts
        if method.needs_draft and drafts.model is None:
            raise ValueError(
                f"benchmark method {method.name!r} needs a draft model: set the config's `draft` "
                "to a checkpoint directory (or pass draft=Model)"
            )
        if method.needs_heads and drafts.head(method.needs_heads) is None:
            slot = method.needs_heads
            raise ValueError(
                f"benchmark method {method.name!r} needs {slot} heads: set the config's "
                f"`heads.{slot}` to a heads directory or head-training workdir (or pass "
                f"heads={{'{slot}': heads}})"
            )


def with_depth(cfg, name: str, n: int):
    """A copy of `cfg` whose draft-depth field for method `name` is `n`."""
    key = get_method(name).depth_key
    if key is None:
        raise ValueError(f"benchmark method {name!r} has no draft depth to vary")
    return with_value(cfg, key, int(n))


def with_value(cfg, key: str, value):
    """A copy of `cfg` with its dotted `key` (e.g. "dynamic_tree.depth") set to `value`."""
    import ml_collections  # not at the top: see the note there

    cfg = ml_collections.ConfigDict(cfg).copy_and_resolve_references()
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[leaf] = value
    return cfg


def depth_of(cfg, name: str) -> int:
    """The draft depth N that method `name` runs with under `cfg` (0 for autoregressive)."""
    key = get_method(name).depth_key
    if key is None:
        return 0
    node = cfg
    for part in key.split("."):
        node = node[part]
    return int(node)


def speculative_config(name: str, cfg, drafts) -> dict | None:
    """The `speculative_config` for method `name` under `cfg` (None = autoregressive).

    `drafts`: a Drafts, or a bare draft model (or None)."""
    drafts = as_drafts(drafts)
    check_methods([name], drafts)
    return get_method(name).fn(cfg, drafts)


# ----------------------------------------------------------------------------- built-ins


def _verification(cfg) -> dict:
    """`bench.verification` / `bench.allow_lossy` when the config sets them ("auto" = default)."""
    out = {}
    mode = cfg.get("verification", "auto")
    if mode != "auto":
        out["verification"] = str(mode)
    if cfg.get("allow_lossy", False):
        out["allow_lossy"] = True
    return out


def draft_options(cfg) -> dict:
    """`draft_weight_dtype` when the config sets one ("" = the draft's weights as stored)."""
    value = cfg.get("draft_weight_dtype", "")
    return {"draft_weight_dtype": str(value)} if value else {}


def weight_dtype(cfg, key: str = "weight_dtype") -> str | None:
    """`cfg.<key>` ("" = None) checked against `kernels.WEIGHT_DTYPES`."""
    value = cfg.get(key, "")
    return check_weight_dtype(key, None if value in ("", None) else value)


@register_method("autoregressive", depth_key=None)
def _autoregressive(cfg, drafts):
    return None


@register_method("draft_model", needs_draft=True)
def _draft_model(cfg, drafts):
    return {
        "method": "draft_model",
        "model": drafts.model,
        "num_speculative_tokens": int(cfg.num_speculative_tokens),
        **_verification(cfg),
        **draft_options(cfg),
    }


def _tree_nodes(cfg, n: int) -> int:
    width = int(cfg.draft_tree.width)
    return sum(width**d for d in range(1, int(n) + 1))


@register_method("draft_tree", needs_draft=True, depth_key="draft_tree.depth", nodes=_tree_nodes)
def _draft_tree(cfg, drafts):
    depth, width = int(cfg.draft_tree.depth), int(cfg.draft_tree.width)
    return {
        "method": "draft_model",
        "model": drafts.model,
        "num_speculative_tokens": depth,
        "draft_tree": {"depth": depth, "width": width},
        **_verification(cfg),
        **draft_options(cfg),
    }


@register_method("ngram")
def _ngram(cfg, drafts):
    return {
        "method": "ngram",
        "num_speculative_tokens": int(cfg.num_speculative_tokens),
        "prompt_lookup_min": int(cfg.prompt_lookup_min),
        "prompt_lookup_max": int(cfg.prompt_lookup_max),
        **_verification(cfg),
    }


def _lookahead_nodes(cfg, n: int) -> int:
    return int(cfg.lookahead.max_candidates) * n


@register_method("lookahead", depth_key="lookahead.candidate_length", nodes=_lookahead_nodes)
def _lookahead(cfg, drafts):
    """Lookahead decoding: `cfg.lookahead` (window, candidate_length = ngram_size - 1, the N
    of its rows, max_candidates, seed_pool_from_prompt); no draft model, no training."""
    la = cfg.lookahead
    return {
        "method": "lookahead",
        "lookahead_window": int(la.window),
        "ngram_size": int(la.candidate_length) + 1,
        "max_candidates": int(la.max_candidates),
        "seed_pool_from_prompt": bool(la.seed_pool_from_prompt),
        **_verification(cfg),
    }


def medusa_tree(cfg, n: int) -> trees.Tree:
    """Medusa's tree with n heads: `cfg.medusa_tree` cut to depth n (a chain when unset)."""
    name = cfg.get("medusa_tree", "")
    return trees.truncate(trees.get_tree(name), n) if name else trees.chain(n)


@register_method(
    "medusa", needs_heads="medusa", nodes=lambda cfg, n: medusa_tree(cfg, n).num_drafts
)
def _medusa(cfg, drafts):
    k = int(cfg.num_speculative_tokens)
    return {
        "method": "medusa",
        "model": drafts.head("medusa"),
        "num_speculative_tokens": k,
        "draft_tree": medusa_tree(cfg, k),
        **_verification(cfg),
        **draft_options(cfg),
    }


def _head_chain(method: str):
    """The builder of `method`'s heads (head slot of the same name) on a chain of
    num_speculative_tokens drafts."""

    def build(cfg, drafts):
        return {
            "method": method,
            "model": drafts.head(method),
            "num_speculative_tokens": int(cfg.num_speculative_tokens),
            **_verification(cfg),
            **draft_options(cfg),
        }

    return build


register_method("medusa_chain", needs_heads="medusa")(_head_chain("medusa"))


def eagle_tree(cfg, n: int) -> trees.Tree:
    """EAGLE-1's static tree with depth n: `cfg.eagle_tree` cut to depth n (a chain if unset)."""
    name = cfg.get("eagle_tree", "")
    return trees.truncate(trees.get_tree(name), n) if name else trees.chain(n)


def _dynamic_sizes(cfg, depth: int | None = None) -> tuple[int, int, int]:
    """(depth, top_k, total_tokens) of the bench's dynamic tree `cfg.dynamic_tree` (or at
    `depth`). A depth whose candidates number fewer than total_tokens (the picker's sweep
    over small depths) offers all of them."""
    d = cfg.dynamic_tree
    depth = int(d.depth if depth is None else depth)
    k = int(d.top_k)
    return depth, k, min(int(d.total_tokens), k + (depth - 1) * k * k)


def _dynamic_tree(cfg) -> dict:
    """EAGLE-2's tree from `cfg.dynamic_tree` (top_k, total_tokens, score_temperature: None =
    the decode's own law, sharpened at T=0)."""
    _, k, total = _dynamic_sizes(cfg)
    spec = {"top_k": k, "total_tokens": total}
    if cfg.dynamic_tree.get("score_temperature") is not None:
        spec["score_temperature"] = float(cfg.dynamic_tree.score_temperature)
    return {"dynamic": spec}


def _dynamic_nodes(cfg, n: int) -> int:
    return _dynamic_sizes(cfg, n)[2]


def _eagle_dynamic(method: str):
    """The builder of `method`'s drafter (head slot of the same name) on the dynamic tree."""

    def build(cfg, drafts):
        return {
            "method": method,
            "model": drafts.head(method),
            "num_speculative_tokens": _dynamic_sizes(cfg)[0],
            "draft_tree": _dynamic_tree(cfg),
            **_verification(cfg),
            **draft_options(cfg),
        }

    return build


@register_method("eagle1", needs_heads="eagle", nodes=lambda cfg, n: eagle_tree(cfg, n).num_drafts)
def _eagle1(cfg, drafts):
    """EAGLE-1: its drafter on a static tree (`cfg.eagle_tree`)."""
    k = int(cfg.num_speculative_tokens)
    return {
        "method": "eagle",
        "model": drafts.head("eagle"),
        "num_speculative_tokens": k,
        "draft_tree": eagle_tree(cfg, k),
        **_verification(cfg),
        **draft_options(cfg),
    }


# EAGLE-2: the EAGLE-1 drafter on the dynamic tree (`cfg.dynamic_tree`, its own depth: the N
# of these rows); EAGLE-3: its drafter on the same tree.
for _name, _slot in (("eagle2", "eagle"), ("eagle3", "eagle3")):
    register_method(_name, needs_heads=_slot, depth_key="dynamic_tree.depth",
                    nodes=_dynamic_nodes)(_eagle_dynamic(_slot))  # fmt: skip


# EAGLE-3's drafter on a chain: on a CPU where every verified node costs a measurable part
# of a step, a short chain can beat the dynamic tree (BENCHMARKS.md "A Zen 4 EPYC, fourth
# session").
register_method("eagle3_chain", needs_heads="eagle3")(_head_chain("eagle3"))


# ----------------------------------------------------------------------------- knobs


def method_knobs() -> ml_collections.ConfigDict:
    """The methods and their knobs with their defaults: what the benchmark and the picker
    share (`specjax.bench.default_config`, `specjax.picker.default_config` add their own).

    Returns:
      A ConfigDict: heads (one slot per head family the registered methods draft with:
      heads.medusa / heads.eagle / heads.eagle3 = a heads directory or head-training workdir,
      "" = unset), methods (names registered here), num_speculative_tokens, draft_tree
      (depth, width), prompt_lookup_min / prompt_lookup_max, medusa_tree (a named tree cut to
      num_speculative_tokens heads, "" = a chain), eagle_tree (EAGLE-1's static tree, cut
      likewise), dynamic_tree (EAGLE-2/3's depth, top_k, total_tokens and score_temperature:
      a float placeholder, None = the decode's own law, sharpened at T=0; see
      `eagle_tree.DynamicTree`) and lookahead (window W, candidate_length = ngram_size - 1,
      the N of its rows, max_candidates G, seed_pool_from_prompt: this machine's defaults,
      `spec_config.lookahead_defaults`) and draft_weight_dtype ("" or "bfloat16": the drafts'
      weights as read, `speculative_config["draft_weight_dtype"]`).
    """
    import ml_collections  # not at the top: see the note there

    cfg = ml_collections.ConfigDict()
    slots = dict.fromkeys(m.needs_heads for m in _REGISTRY.values() if m.needs_heads)
    cfg.heads = ml_collections.ConfigDict(dict.fromkeys(slots, ""))
    cfg.methods = ("draft_model", "draft_tree", "ngram")
    # The drafts' matmul weights as read: "" = as stored, "bfloat16" = rounded (half the bytes
    # a drafting forward reads on the CPU kernel; lossless, the target verifies).
    cfg.draft_weight_dtype = ""
    cfg.num_speculative_tokens = 4
    cfg.draft_tree = ml_collections.ConfigDict(dict(depth=3, width=2))
    cfg.prompt_lookup_min = 1
    cfg.prompt_lookup_max = 3
    cfg.medusa_tree = DEFAULT_MEDUSA_TREE
    cfg.eagle_tree = DEFAULT_EAGLE_TREE
    cfg.dynamic_tree = ml_collections.ConfigDict(DEFAULT_DYNAMIC_TREE)
    cfg.dynamic_tree.score_temperature = ml_collections.config_dict.placeholder(float)
    W, N, G = lookahead_defaults()
    cfg.lookahead = ml_collections.ConfigDict(
        dict(window=W, candidate_length=N - 1, max_candidates=G, seed_pool_from_prompt=True)
    )
    return cfg
