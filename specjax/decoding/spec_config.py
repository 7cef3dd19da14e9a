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
typical_epsilon, typical_delta, and lookahead's lookahead_window, ngram_size,
max_candidates, seed_pool_from_prompt, lookahead_advance (vLLM has no lookahead; its
candidate length is ngram_size - 1, so num_speculative_tokens is not needed).
"""

from __future__ import annotations

import dataclasses

import jax

from specjax.decoding import trees
from specjax.decoding.proposers.eagle_tree import DynamicTree
from specjax.decoding.proposers.ngram_trie import NgramTrie
from specjax.decoding.topology import MAX_TREE_NODES
from specjax.validate import check_int, check_real

METHODS = ("draft_model", "ngram", "medusa", "eagle", "eagle3", "lookahead")
EAGLE_METHODS = ("eagle", "eagle3")
# Methods whose `model` is required; those that can sample their drafts (and so be verified
# `probabilistic`ly); and those whose drafts are sampled by default at T > 0 ("auto"; EAGLE
# only for chains: its trees hold each node's top-k, verified one-hot).
NEEDS_MODEL = ("draft_model", "medusa", *EAGLE_METHODS)
SAMPLED_DRAFTS = ("draft_model", "medusa", *EAGLE_METHODS)
AUTO_PROBABILISTIC = ("draft_model",)
AUTO_PROBABILISTIC_CHAINS = EAGLE_METHODS
TREE_METHODS = ("draft_model", "medusa", *EAGLE_METHODS)
DYNAMIC_TREE_METHODS = EAGLE_METHODS
VERIFICATIONS = ("auto", "greedy", "probabilistic", "one_hot", "strict", "typical")
MAX_SPECULATIVE_TOKENS = 16  # longest chain / deepest tree; also the cache head-room per step
LOOKAHEAD_KEYS = (
    "lookahead_window",
    "ngram_size",
    "max_candidates",
    "seed_pool_from_prompt",
    "lookahead_advance",
)
LOOKAHEAD_ADVANCES = ("level", "accepted")
# Lookahead's (W, N, G): the reference's README setting on an accelerator; on a CPU, where
# every extra verified node costs, the smaller setting chosen by measurement (LOG.md).
LOOKAHEAD_DEFAULTS = {"gpu": (7, 5, 7), "tpu": (7, 5, 7), "cpu": (3, 4, 3)}
KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "verification",
    "allow_lossy",
    "draft_tree",
    "typical_epsilon",
    "typical_delta",
    *LOOKAHEAD_KEYS,
)


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """The validated, hashable part of a speculative_config (the draft model travels apart)."""

    method: str
    num_speculative_tokens: int
    verification: str  # resolved: never "auto"
    tree: trees.Tree | DynamicTree
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3
    allow_lossy: bool = False
    typical_epsilon: float = 0.09
    typical_delta: float = 0.3
    lookahead_window: int = 0  # lookahead only: W, N, G, pool seeding
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

    Args:
      raw: the user's dict.
      temperature: the sampling temperature (resolves verification="auto").
    """
    if not isinstance(raw, dict):
        raise ValueError(f"speculative_config must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ValueError(f"speculative_config has unknown keys {unknown}; allowed: {list(KEYS)}")
    method = raw.get("method")
    if method not in METHODS:
        raise ValueError(f"speculative_config['method']={method!r} is invalid; allowed: {METHODS}")
    lookahead = {}
    if method == "lookahead":
        lookahead = _lookahead(raw)
    else:
        given = [key for key in LOOKAHEAD_KEYS if key in raw]
        if given:
            raise ValueError(
                f"speculative_config keys {given} are lookahead's; method={method!r} takes none"
            )
    if method == "lookahead":
        k = lookahead["ngram_size"] - 1
        if "num_speculative_tokens" in raw and raw["num_speculative_tokens"] != k:
            raise ValueError(
                f"speculative_config['num_speculative_tokens']={raw['num_speculative_tokens']!r} "
                f"does not match lookahead's candidate length ngram_size - 1 = {k}; leave it "
                "unset"
            )
    elif "num_speculative_tokens" not in raw:
        raise ValueError(
            "speculative_config['num_speculative_tokens'] is required "
            f"(1..{MAX_SPECULATIVE_TOKENS})"
        )
    else:
        k = _int("num_speculative_tokens", raw["num_speculative_tokens"], 1, MAX_SPECULATIVE_TOKENS)
    if method in NEEDS_MODEL and raw.get("model") is None:
        what = "a specjax Model" if method == "draft_model" else "draft heads (sj.load_draft)"
        raise ValueError(
            f"speculative_config['model'] is required for method={method!r} "
            f"({what} or a checkpoint directory)"
        )
    if method == "ngram" and raw.get("model") is not None:
        raise ValueError("speculative_config['model'] must be unset for method='ngram'")
    lo = _int("prompt_lookup_min", raw.get("prompt_lookup_min", 1), 1)
    hi = _int("prompt_lookup_max", raw.get("prompt_lookup_max", max(lo, 3)), 1)
    if lo > hi:
        raise ValueError(
            f"speculative_config['prompt_lookup_min']={lo} must be <= prompt_lookup_max={hi}"
        )
    if method not in TREE_METHODS and raw.get("draft_tree") is not None:
        raise ValueError(
            f"speculative_config['draft_tree'] is only supported for methods {TREE_METHODS}, "
            f"not {method!r}"
        )
    if method == "lookahead":
        tree = NgramTrie(lookahead["max_candidates"], k)
    else:
        tree = _tree(raw, k)
    if isinstance(tree, DynamicTree) and method not in DYNAMIC_TREE_METHODS:
        raise ValueError(
            f"speculative_config['draft_tree']={{'dynamic': ...}} (EAGLE-2's dynamic tree) is "
            f"only supported for methods {DYNAMIC_TREE_METHODS}, not {method!r}"
        )
    if method == "draft_model" and raw.get("draft_tree") is not None and tree.max_depth != k:
        raise ValueError(
            f"speculative_config['draft_tree'] has depth {tree.max_depth} but "
            f"num_speculative_tokens={k}: the draft model drafts the tree's depth, so the two "
            "must agree (set num_speculative_tokens to the tree's depth)"
        )
    if method in (*EAGLE_METHODS, "medusa") and tree.max_depth > k:
        raise ValueError(
            f"speculative_config['draft_tree'] has depth {tree.max_depth}, deeper than "
            f"num_speculative_tokens={k} (the deepest path; for Medusa the heads used: head d "
            "drafts depth d + 1)"
        )
    allow_lossy = raw.get("allow_lossy", False)
    if not isinstance(allow_lossy, bool):
        raise ValueError(f"speculative_config['allow_lossy']={allow_lossy!r} must be True or False")
    mode = raw.get("verification", "auto")
    if mode not in VERIFICATIONS:
        raise ValueError(
            f"speculative_config['verification']={mode!r} is invalid; allowed: {VERIFICATIONS}"
        )
    dynamic = isinstance(tree, DynamicTree | NgramTrie)
    deterministic = method not in SAMPLED_DRAFTS or dynamic
    if mode == "auto":
        chain = tree.num_drafts == tree.max_depth
        sampled = method in AUTO_PROBABILISTIC or (chain and method in AUTO_PROBABILISTIC_CHAINS)
        mode = "greedy" if temperature == 0 else ("probabilistic" if sampled else "one_hot")
    if mode == "greedy" and temperature != 0:
        raise ValueError(
            f"speculative_config['verification']='greedy' needs temperature=0, got "
            f"{temperature}: greedy acceptance at T>0 would change the output law"
        )
    if mode == "probabilistic" and deterministic:
        what = (
            f"method={method!r}"
            if method not in SAMPLED_DRAFTS
            else "a dynamic tree (each node's top-k)"
        )
        raise ValueError(
            f"speculative_config['verification']='probabilistic' needs sampled drafts; "
            f"{what} drafts deterministically: use 'one_hot' or 'strict'"
        )
    if mode == "typical" and dynamic:
        where = "method='lookahead'" if method == "lookahead" else "draft_tree={'dynamic': ...}"
        raise ValueError(
            "speculative_config['verification']='typical' (Medusa's rule) needs a static tree; "
            f"it is not available with {where}"
        )
    if mode == "typical" and not allow_lossy:
        raise ValueError(
            "speculative_config['verification']='typical' is lossy (Medusa's typical "
            "acceptance changes the output distribution): set allow_lossy=True"
        )
    ignored = [key for key in ("prompt_lookup_min", "prompt_lookup_max") if key in raw]
    if method != "ngram" and ignored:
        raise ValueError(
            f"speculative_config keys {ignored} are prompt lookup's; method={method!r} "
            "ignores them: leave them unset"
        )
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
        prompt_lookup_min=lo,
        prompt_lookup_max=hi,
        allow_lossy=allow_lossy,
        typical_epsilon=float(eps),
        typical_delta=float(delta),
        **lookahead,
    )


def lookahead_defaults() -> tuple[int, int, int]:
    """(W, N, G) for this machine's default backend (`LOOKAHEAD_DEFAULTS`)."""
    return LOOKAHEAD_DEFAULTS.get(jax.default_backend(), LOOKAHEAD_DEFAULTS["gpu"])


def _lookahead(raw: dict) -> dict:
    """Lookahead's keys validated: window W >= 1, ngram_size N >= 2, max_candidates G >= 1."""
    W, N, G = lookahead_defaults()
    W = _int("lookahead_window", raw.get("lookahead_window", W), 1)
    N = _int("ngram_size", raw.get("ngram_size", N), 2, MAX_SPECULATIVE_TOKENS + 1)
    G = _int("max_candidates", raw.get("max_candidates", G), 1)
    seed = raw.get("seed_pool_from_prompt", True)
    if not isinstance(seed, bool):
        raise ValueError(
            f"speculative_config['seed_pool_from_prompt']={seed!r} must be True or False"
        )
    advance = raw.get("lookahead_advance", "level")
    if advance not in LOOKAHEAD_ADVANCES:
        raise ValueError(
            f"speculative_config['lookahead_advance']={advance!r} is invalid; allowed: "
            f"{LOOKAHEAD_ADVANCES} (level: one window level per step, as the reference; "
            "accepted: also shift the columns by the tokens accepted)"
        )
    if raw.get("model") is not None:
        raise ValueError("speculative_config['model'] must be unset for method='lookahead'")
    if raw.get("draft_tree") is not None:
        raise ValueError(
            "speculative_config['draft_tree'] is not used by method='lookahead' (its candidate "
            "trie is built from the n-gram pool: max_candidates x (ngram_size - 1))"
        )
    trie = NgramTrie(G, N - 1)  # the candidates' size limit, by name
    block = trie.num_nodes + (N - 1) * W
    if block > MAX_TREE_NODES:
        raise ValueError(
            f"lookahead's verify forward would hold {block} nodes (root, max_candidates={G} x "
            f"(ngram_size - 1)={N - 1} candidate nodes and a window of (ngram_size - 1) x "
            f"lookahead_window={W} cells); at most MAX_TREE_NODES={MAX_TREE_NODES}"
        )
    return dict(lookahead_window=W, ngram_size=N, max_candidates=G, seed_pool_from_prompt=seed,
                lookahead_advance=advance)  # fmt: skip
