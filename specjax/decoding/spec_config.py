"""`speculative_config`: vLLM's key names, validated into a frozen dataclass before compiling.

    {"method": "draft_model", "model": draft, "num_speculative_tokens": 4}
    {"method": "draft_model", "model": draft, "num_speculative_tokens": 3,
     "draft_tree": {"depth": 3, "width": 2}}
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
     "prompt_lookup_max": 3}
    {"method": "medusa", "model": heads, "num_speculative_tokens": 4,
     "draft_tree": "mc_sim_7b_63"}
    {"method": "eagle3", "model": drafter, "num_speculative_tokens": 5,
     "draft_tree": {"dynamic": {"top_k": 4, "total_tokens": 16}}}
    {"method": "lookahead", "lookahead_window": 4, "ngram_size": 4, "max_candidates": 4}

Keys shared with vLLM's `--speculative-config`: method, model, num_speculative_tokens,
prompt_lookup_min, prompt_lookup_max. specjax's own: verification, allow_lossy, draft_tree,
typical_epsilon, typical_delta, draft_weight_dtype (a draft's matmul weights read rounded to
bfloat16: half the bytes a drafting forward reads on the CPU kernel, still lossless since
the target verifies; `kernels.WEIGHT_DTYPES`), and lookahead's lookahead_window, ngram_size,
max_candidates, seed_pool_from_prompt, lookahead_advance (vLLM has no lookahead; its
candidate length is ngram_size - 1, so num_speculative_tokens is not needed).

What each method accepts is its proposer's declaration (`proposers.base.Capabilities`, read
through the `PROPOSERS` registry): which `model` it needs, the tree kinds it fills, how a
tree's depth relates to num_speculative_tokens, how "auto" verification resolves, and its own
keys (parsed by the method's own code). Nothing here names a method. `resolve` parses a config
once into the `Speculative` the engine takes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specjax.decoding import trees
from specjax.decoding.proposers import PROPOSERS
from specjax.decoding.proposers.base import MAX_SPECULATIVE_TOKENS, Capabilities, OwnKeys
from specjax.decoding.proposers.eagle_tree import DynamicTree

# Lookahead's defaults, read by the bench and experiments from here (lookahead owns them).
from specjax.decoding.proposers.lookahead import lookahead_defaults  # noqa: F401
from specjax.decoding.proposers.ngram_trie import NgramTrie
from specjax.kernels import check_weight_dtype
from specjax.validate import check_int, check_real

METHODS = tuple(PROPOSERS)  # as registered when imported; `parse` reads PROPOSERS itself
VERIFICATIONS = ("auto", "greedy", "probabilistic", "one_hot", "strict", "typical")
# The keys every method reads; a method's own keys (`Capabilities.keys`) come on top.
COMMON_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "verification",
    "allow_lossy",
    "draft_tree",
    "typical_epsilon",
    "typical_delta",
    "draft_weight_dtype",
)
# What the error for a missing `model` says each kind is.
_MODEL_WHAT = {"draft_lm": "a specjax Model", "heads": "draft heads (sj.load_draft)"}


def capabilities(method: str) -> Capabilities:
    """The declaration of a registered method (`PROPOSERS[method].CAPABILITIES`)."""
    return PROPOSERS[method].CAPABILITIES


def methods_where(pred) -> tuple[str, ...]:
    """The registered methods whose declaration satisfies `pred`, in registry order."""
    return tuple(m for m, cls in PROPOSERS.items() if pred(cls.CAPABILITIES))


def keys() -> tuple[str, ...]:
    """Every key a speculative_config may hold: the common ones, then each method's own."""
    own = [k for cls in dict.fromkeys(PROPOSERS.values()) for k in cls.CAPABILITIES.keys]
    clash = sorted(set(own) & set(COMMON_KEYS))
    if clash:
        raise ValueError(f"a method declares common speculative_config keys {clash} as its own")
    return (*COMMON_KEYS, *dict.fromkeys(own))


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """The validated, hashable part of a speculative_config (the draft model travels apart)."""

    method: str
    num_speculative_tokens: int
    verification: str  # resolved: never "auto"
    tree: trees.Tree | DynamicTree | NgramTrie
    allow_lossy: bool = False
    typical_epsilon: float = 0.09
    typical_delta: float = 0.3
    draft_weight_dtype: str | None = None  # the draft's weights as read (kernels.WEIGHT_DTYPES)
    # Set by a method's own keys (`OwnKeys.fields`); the defaults elsewhere.
    prompt_lookup_min: int = 1  # ngram
    prompt_lookup_max: int = 3
    lookahead_window: int = 0  # lookahead: W, N, G, pool seeding, advance
    ngram_size: int = 0
    max_candidates: int = 0
    seed_pool_from_prompt: bool = True
    lookahead_advance: str = "level"

    @property
    def is_chain(self) -> bool:
        """A static chain (a dynamic tree is never treated as one: its shape is data)."""
        return not self.is_dynamic and self.tree.num_drafts == self.tree.max_depth

    @property
    def is_dynamic(self) -> bool:
        """The tree is built by the proposer every step (its topology is data)."""
        return isinstance(self.tree, DynamicTree | NgramTrie)


@dataclasses.dataclass(frozen=True, eq=False)
class Speculative:
    """A speculative_config parsed once: what `sj.generate` hands the engine.

    `resolve` makes it from the user's dict before any file is read; `specjax.api` then puts
    the loaded draft in `draft`, and the engine takes it as is (a raw dict given straight to
    `specjax.decoding.engine.generate` is resolved there, once).

    Attributes:
      config: the validated SpecConfig ("auto" verification resolved at `temperature`).
      draft: what `model` held, loaded: a Model or Decoder (draft LM), draft heads, or None;
        a checkpoint path until `specjax.api` loads it.
      temperature: the sampling temperature `config` was resolved at.
    """

    config: SpecConfig
    draft: Any
    temperature: float

    def check_temperature(self, temperature: float) -> None:
        """Refuse a call at a temperature this config was not resolved for: "auto" resolves
        (and "greedy" is allowed) differently at T=0 and at T>0."""
        if (temperature == 0) != (self.temperature == 0):
            raise ValueError(
                f"speculative_config was resolved at temperature={self.temperature} "
                f"(verification={self.config.verification!r}) but this call samples at "
                f"temperature={temperature}: resolve it again at this temperature "
                "(spec_config.resolve) or pass the dict"
            )


def resolve(spec, *, temperature: float) -> Speculative:
    """`spec` parsed into a `Speculative` at `temperature`; one already parsed is checked
    against `temperature` and returned as is (never parsed twice)."""
    if isinstance(spec, Speculative):
        spec.check_temperature(temperature)
        return spec
    config = parse(spec, temperature=temperature)
    return Speculative(config, spec.get("model"), float(temperature))


def _int(key: str, value, lo: int, hi: int | None = None) -> int:
    return check_int(f"speculative_config[{key!r}]", value, lo, hi)


def _dynamic(spec, k: int) -> DynamicTree:
    if not isinstance(spec, dict):
        raise ValueError(
            f"speculative_config['draft_tree']['dynamic']={spec!r} must be a dict with top_k "
            "and total_tokens"
        )
    unknown = set(spec) - {"top_k", "total_tokens", "score_temperature"}
    if unknown:
        raise ValueError(
            f"speculative_config['draft_tree']['dynamic'] has unknown keys {sorted(unknown)}; "
            "allowed: top_k, total_tokens, score_temperature (the depth is "
            "num_speculative_tokens)"
        )
    top_k = _int("draft_tree.dynamic.top_k", spec.get("top_k", 4), 1)
    total = _int("draft_tree.dynamic.total_tokens", spec.get("total_tokens", 16), 1)
    score_t = spec.get("score_temperature")
    if score_t is not None:
        score_t = check_real(
            "speculative_config['draft_tree.dynamic.score_temperature']", score_t, 0.0,
            lo_open=True, note="None = the decode's own law, sharpened at T=0",
        )  # fmt: skip
    return DynamicTree(top_k, k, total, score_t)


# Named dynamic trees: EAGLE-2's paper setting (Li et al. 2024b: 60 draft tokens, depth 6
# expansions + the root's = 7 levels, top-k 10, candidates scored by the drafter's plain
# log-softmax). specjax's default dynamic tree differs: smaller (CPU-sized) and, at T=0,
# scored under a sharpened law (eagle_tree.GREEDY_SCORE_TEMPERATURE); see
# eagle_tree.DynamicTree.
DYNAMIC_PRESETS = {"eagle2_paper": {"top_k": 10, "depth": 7, "total_tokens": 60, "score": 1.0}}


def _tree(raw: dict, k: int) -> trees.Tree | DynamicTree:
    spec = raw.get("draft_tree")
    if spec is None:
        return trees.chain(k)
    if isinstance(spec, str) and spec in DYNAMIC_PRESETS:
        p = DYNAMIC_PRESETS[spec]
        if k != p["depth"]:
            raise ValueError(
                f"speculative_config['draft_tree']={spec!r} drafts depth {p['depth']}; set "
                f"num_speculative_tokens={p['depth']} (got {k})"
            )
        return DynamicTree(p["top_k"], p["depth"], p["total_tokens"], p["score"])
    if isinstance(spec, dict) and "dynamic" in spec:
        if set(spec) != {"dynamic"}:
            raise ValueError(
                "speculative_config['draft_tree'] with 'dynamic' takes no other keys, got "
                f"{sorted(spec)}"
            )
        return _dynamic(spec["dynamic"], k)
    if isinstance(spec, dict):
        unknown = set(spec) - {"depth", "width"}
        if unknown:
            raise ValueError(
                f"speculative_config['draft_tree'] has unknown keys {sorted(unknown)}; "
                "allowed: depth, width (or dynamic)"
            )
        depth = _int("draft_tree.depth", spec.get("depth", k), 1, MAX_SPECULATIVE_TOKENS)
        width = _int("draft_tree.width", spec.get("width", 2), 1)
        tree = trees.topk_tree(depth, width)
    else:
        try:
            tree = trees.get_tree(spec)
        except ValueError as e:
            raise ValueError(f"speculative_config['draft_tree']: {e}") from e
    if tree.max_depth > MAX_SPECULATIVE_TOKENS:
        raise ValueError(
            f"speculative_config['draft_tree'] has depth {tree.max_depth}; at most "
            f"{MAX_SPECULATIVE_TOKENS} is supported"
        )
    depths = [0]
    for p in tree.parents[1:]:
        depths.append(depths[p] + 1)
    late = next((j for j in range(1, len(depths)) if depths[j] < depths[j - 1]), None)
    if late is not None:
        raise ValueError(
            f"speculative_config['draft_tree']: node {late} (depth {depths[late]}) comes after "
            f"node {late - 1} (depth {depths[late - 1]}); trees must be breadth-first (every "
            "node of depth d before any of depth d + 1), as trees.from_choices builds them"
        )
    return tree


def parse(raw: dict, *, temperature: float) -> SpecConfig:
    """Validate a speculative_config dict. Raises ValueError naming key, value and allowed range.

    Every rule is read from the method's declaration (`capabilities(method)`); no method is
    named here.

    Args:
      raw: the user's dict.
      temperature: the sampling temperature (resolves verification="auto").
    """
    if not isinstance(raw, dict):
        raise ValueError(f"speculative_config must be a dict, got {type(raw).__name__}")
    allowed = keys()
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ValueError(f"speculative_config has unknown keys {unknown}; allowed: {list(allowed)}")
    method = raw.get("method")
    if method not in PROPOSERS:
        raise ValueError(
            f"speculative_config['method']={method!r} is invalid; allowed: {tuple(PROPOSERS)}"
        )
    caps = capabilities(method)
    _refuse_others_keys(raw, method, caps)
    own = caps.parse_keys(raw) if caps.parse_keys is not None else OwnKeys({})
    k = _num_speculative_tokens(raw, method, caps, own)
    _check_model(raw, method, caps)
    draft_weight_dtype = check_weight_dtype(
        "speculative_config['draft_weight_dtype']", raw.get("draft_weight_dtype")
    )
    if draft_weight_dtype is not None and caps.model == "none":
        raise ValueError(
            f"speculative_config['draft_weight_dtype'] sets the draft model's weights; "
            f"method={method!r} has none: leave it unset"
        )
    tree = _method_tree(raw, method, caps, own, k)
    allow_lossy = raw.get("allow_lossy", False)
    if not isinstance(allow_lossy, bool):
        raise ValueError(f"speculative_config['allow_lossy']={allow_lossy!r} must be True or False")
    mode = _verification(raw, method, caps, tree, temperature, allow_lossy)
    eps = raw.get("typical_epsilon", 0.09)
    delta = raw.get("typical_delta", 0.3)
    for key, val in (("typical_epsilon", eps), ("typical_delta", delta)):
        check_real(f"speculative_config[{key!r}]", val, 0.0)
    ignored = [key for key in ("typical_epsilon", "typical_delta") if key in raw]
    if mode != "typical" and ignored:
        raise ValueError(
            f"speculative_config keys {ignored} set Medusa's typical acceptance; "
            f"verification={mode!r} ignores them: leave them unset (or use 'typical')"
        )
    return SpecConfig(
        method=method,
        num_speculative_tokens=k,
        verification=mode,
        tree=tree,
        allow_lossy=allow_lossy,
        typical_epsilon=float(eps),
        typical_delta=float(delta),
        draft_weight_dtype=draft_weight_dtype,
        **own.fields,
    )


def _refuse_others_keys(raw: dict, method: str, caps: Capabilities) -> None:
    """Another method's own keys are refused by their owner's name (nothing ignores them)."""
    for cls in dict.fromkeys(PROPOSERS.values()):
        theirs = cls.CAPABILITIES
        given = [key for key in theirs.keys if key in raw and key not in caps.keys]
        if given:
            raise ValueError(
                f"speculative_config keys {given} are {theirs.keys_owner}'s; method={method!r} "
                "ignores them: leave them unset"
            )


def _num_speculative_tokens(raw: dict, method: str, caps: Capabilities, own: OwnKeys) -> int:
    """N: required (1..MAX_SPECULATIVE_TOKENS), or the depth a method's own keys fix."""
    if caps.depth == "own_keys":
        if own.tree is None:
            raise TypeError(f"{method!r}'s parse_keys returned no tree (its depth is 'own_keys')")
        k = own.tree.max_depth
        if "num_speculative_tokens" in raw and raw["num_speculative_tokens"] != k:
            raise ValueError(
                f"speculative_config['num_speculative_tokens']={raw['num_speculative_tokens']!r} "
                f"does not match the depth {k} that method={method!r}'s own keys fix; leave it "
                "unset"
            )
        return k
    if "num_speculative_tokens" not in raw:
        raise ValueError(
            "speculative_config['num_speculative_tokens'] is required "
            f"(1..{MAX_SPECULATIVE_TOKENS})"
        )
    return _int("num_speculative_tokens", raw["num_speculative_tokens"], 1, MAX_SPECULATIVE_TOKENS)


def _check_model(raw: dict, method: str, caps: Capabilities) -> None:
    if caps.model != "none" and raw.get("model") is None:
        raise ValueError(
            f"speculative_config['model'] is required for method={method!r} "
            f"({_MODEL_WHAT[caps.model]} or a checkpoint directory)"
        )
    if caps.model == "none" and raw.get("model") is not None:
        raise ValueError(f"speculative_config['model'] must be unset for method={method!r}")


def _method_tree(raw: dict, method: str, caps: Capabilities, own: OwnKeys, k: int):
    """The tree this method drafts: its own keys' or draft_tree's, checked against the tree
    kinds it fills and its depth rule."""
    given = raw.get("draft_tree") is not None
    if given and caps.depth == "own_keys":
        raise ValueError(
            f"speculative_config['draft_tree'] is not used by method={method!r} (its tree is "
            f"sized by its own keys {list(caps.keys)})"
        )
    if caps.depth == "own_keys":
        return own.tree
    if given and not {"static", "dynamic"} & set(caps.trees):
        takers = methods_where(lambda c: bool({"static", "dynamic"} & set(c.trees)))
        raise ValueError(
            f"speculative_config['draft_tree'] is only supported for methods {takers}, "
            f"not {method!r}"
        )
    tree = _tree(raw, k)
    kind = "dynamic" if isinstance(tree, DynamicTree) else "static"
    if given and kind not in caps.trees:
        takers = methods_where(lambda c: kind in c.trees)
        what = (
            "={'dynamic': ...} (EAGLE-2's dynamic tree)"
            if kind == "dynamic"
            else f"={raw['draft_tree']!r} (a static tree)"
        )
        raise ValueError(
            f"speculative_config['draft_tree']{what} is only supported for methods {takers}, "
            f"not {method!r}"
        )
    if caps.depth == "equal" and tree.max_depth != k:
        raise ValueError(
            f"speculative_config['draft_tree'] has depth {tree.max_depth} but "
            f"num_speculative_tokens={k}: method={method!r} drafts the tree's depth, so the two "
            "must agree (set num_speculative_tokens to the tree's depth)"
        )
    if caps.depth == "at_most" and tree.max_depth > k:
        raise ValueError(
            f"speculative_config['draft_tree'] has depth {tree.max_depth}, deeper than "
            f"num_speculative_tokens={k} (which bounds the deepest path: the drafting steps or "
            "heads used)"
        )
    return tree


def _verification(raw, method, caps: Capabilities, tree, temperature, allow_lossy) -> str:
    """The verification rule: "auto" resolved by the declaration and T, then checked."""
    mode = raw.get("verification", "auto")
    if mode not in VERIFICATIONS:
        raise ValueError(
            f"speculative_config['verification']={mode!r} is invalid; allowed: {VERIFICATIONS}"
        )
    dynamic = isinstance(tree, DynamicTree | NgramTrie)
    if mode == "auto":
        chain = tree.num_drafts == tree.max_depth
        auto = caps.auto_probabilistic
        sampled = auto == "always" or (chain and auto == "chains")
        mode = "greedy" if temperature == 0 else ("probabilistic" if sampled else "one_hot")
    if mode == "greedy" and temperature != 0:
        raise ValueError(
            f"speculative_config['verification']='greedy' needs temperature=0, got "
            f"{temperature}: greedy acceptance at T>0 would change the output law"
        )
    if mode == "probabilistic" and (not caps.sampled_drafts or dynamic):
        what = (
            f"method={method!r}"
            if not caps.sampled_drafts
            else "a dynamic tree (each node's top-k)"
        )
        raise ValueError(
            f"speculative_config['verification']='probabilistic' needs sampled drafts; "
            f"{what} drafts deterministically: use 'one_hot' or 'strict'"
        )
    if mode == "typical" and dynamic:
        where = f"method={method!r}" if caps.depth == "own_keys" else "draft_tree={'dynamic': ...}"
        raise ValueError(
            "speculative_config['verification']='typical' (Medusa's rule) needs a static tree; "
            f"it is not available with {where}"
        )
    if mode == "typical" and not allow_lossy:
        raise ValueError(
            "speculative_config['verification']='typical' is lossy (Medusa's typical "
            "acceptance changes the output distribution): set allow_lossy=True"
        )
    return mode
