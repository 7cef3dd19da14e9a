"""The proposer contract: every method fills the same static-shape draft.

A proposer is a frozen, hashable dataclass (part of the jit's static plan); its parameters
(a draft model's, a head's; `()` when it has none) travel as data. The engine calls:

    proposer, params = Cls.build(cfg, target, draft)            host side, once per call
    pstate = proposer.init(ctx, target, params, prompt, prompt_len, prefill, root)  prefill
    draft, pstate = proposer.propose(ctx, target, params, step, key)           every step
    pstate = proposer.commit(ctx, target, params, step, pstate, verified, result, n_commit)

`target` is the merged target module (its embedding, final norm and LM head are shared with
the proposer, never copied); `prefill` and `verified` are the target's `ForwardOutput`s of the
prompt and of this step's verify block: logits, `last_hidden` (after the final norm: the LM
head's input) and the residual stream entering each layer in `proposer.tap_layers`. The step
never runs a second target forward to get features. `ctx` (`Context`) is everything a proposer
may know of the compiled program; `step` (`StepInput`) is the decode state as it may see it.

Block layout of `Draft` (see `specjax/decoding/topology.py`): node 0 is the root (the pending
token, filled in by the engine), nodes 1..P the drafts in topological order. A proposer whose
tree changes per step or per row (EAGLE-2's dynamic tree) returns its topology as data in
`Draft.topology`; the others leave it None and the plan's static tree is used, as data too.
A proposer may also add E non-draft nodes to the same forward (`Draft.extra`, lookahead's
window): the verifier sees only the P+1 block nodes, `commit` gets the extras' outputs.

What a method *is* (what its `model` holds, which trees it fills, how "auto" verification
resolves, its own config keys) is declared once, on its class, as `CAPABILITIES`
(`Capabilities`); `spec_config`, `api` and the registry (`proposers.PROPOSERS`) read only that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import jax
from flax import struct

from specjax.decoding.topology import Topology
from specjax.sampling import SamplingParams

MAX_SPECULATIVE_TOKENS = 16  # longest chain / deepest tree; also the cache head-room per step

# The vocabulary of a declaration (`Capabilities`).
MODEL_KINDS = ("none", "draft_lm", "heads")
TREE_KINDS = ("chain", "static", "dynamic", "trie")
AUTO_PROBABILISTIC = ("always", "chains", "never")
DEPTH_RULES = ("equal", "at_most", "own_keys")


@dataclasses.dataclass(frozen=True)
class OwnKeys:
    """A method's own speculative_config keys, validated (what `Capabilities.parse_keys` returns).

    Attributes:
      fields: the `SpecConfig` fields they set, e.g. {"prompt_lookup_min": 1, ...}.
      tree: the tree they fix (depth rule "own_keys": lookahead's candidate trie), else None.
    """

    fields: dict
    tree: Any = None


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a method is, declared by its proposer class as `CAPABILITIES`.

    `spec_config` validates a speculative_config against it, `api` loads `model` by it and the
    registry lists methods from it, so a new method is one proposer file. A malformed
    declaration is refused when it is constructed, i.e. when its class is defined.

    Attributes:
      methods: the speculative_config['method'] names the class serves (EAGLE: eagle, eagle3).
      model: what speculative_config['model'] holds: "none" (it must be unset), "draft_lm"
        (a specjax Model or Decoder, or a checkpoint directory `load_model` reads) or "heads"
        (draft heads, or a directory `load_draft` reads).
      trees: the tree kinds it fills: "chain" (no draft_tree), "static" (a named, top-k or
        choices draft_tree), "dynamic" (draft_tree={"dynamic": ...}, rebuilt every step),
        "trie" (a per-step tree that its own keys size).
      sampled_drafts: it can draw its drafts from a law q it returns, so "probabilistic"
        verification is lossless; otherwise its drafts are deterministic.
      auto_probabilistic: when verification="auto" at T > 0 resolves to "probabilistic":
        "always", "chains" (a chain only; its trees hold each node's top-k, verified one-hot)
        or "never" (one_hot).
      depth: how a tree's depth relates to N = num_speculative_tokens: "equal" (it drafts the
        tree's depth, level by level), "at_most" (N bounds the deepest path: the drafting
        steps, or the heads, it may use) or "own_keys" (its own keys fix the tree; N is
        optional and must agree).
      keys: its own speculative_config keys (every other method refuses them by name).
      parse_keys: raw dict -> `OwnKeys`: validates `keys` (required when there are keys).
      keys_owner: how a refusal names the owner of `keys` ("prompt lookup").
      extra_nodes: it adds non-draft nodes to the verify forward (`Draft.extra`).
    """

    methods: tuple[str, ...]
    model: str = "none"
    trees: tuple[str, ...] = ("chain",)
    sampled_drafts: bool = False
    auto_probabilistic: str = "never"
    depth: str = "equal"
    keys: tuple[str, ...] = ()
    parse_keys: Callable[[dict], OwnKeys] | None = None
    keys_owner: str = ""
    extra_nodes: bool = False

    def __post_init__(self):
        def refuse(field, why):
            raise ValueError(f"Capabilities.{field}={getattr(self, field)!r}: {why}")

        def names(field, allowed=None):
            value = getattr(self, field)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                refuse(field, "must be a tuple of non-empty strings")
            if len(set(value)) != len(value):
                refuse(field, "names one entry twice")
            bad = [v for v in value if allowed is not None and v not in allowed]
            if bad:
                refuse(field, f"{bad} not in {allowed}")

        names("methods")
        if not self.methods:
            refuse("methods", "a proposer serves at least one method")
        names("trees", TREE_KINDS)
        if not self.trees:
            refuse("trees", f"fills at least one of {TREE_KINDS}")
        names("keys")
        for field, allowed in (("model", MODEL_KINDS), ("auto_probabilistic", AUTO_PROBABILISTIC),
                               ("depth", DEPTH_RULES)):  # fmt: skip
            if getattr(self, field) not in allowed:
                refuse(field, f"must be one of {allowed}")
        for field in ("sampled_drafts", "extra_nodes"):
            if not isinstance(getattr(self, field), bool):
                refuse(field, "must be True or False")
        self._check_consistent(refuse)

    def _check_consistent(self, refuse) -> None:
        """The fields that constrain each other."""
        if self.auto_probabilistic != "never" and not self.sampled_drafts:
            refuse("auto_probabilistic", "needs sampled_drafts=True (probabilistic verification "
                   "is lossless only for drafts drawn from their q)")  # fmt: skip
        if self.auto_probabilistic == "always" and {"dynamic", "trie"} & set(self.trees):
            refuse("auto_probabilistic", f"but trees={self.trees} include a per-step tree, "
                   "whose drafts are each node's top-k: use 'chains' or 'never'")  # fmt: skip
        if self.auto_probabilistic == "chains" and "chain" not in self.trees:
            refuse("auto_probabilistic", f"but trees={self.trees} has no 'chain'")
        if (self.depth == "own_keys") != ("trie" in self.trees):
            refuse("depth", f"with trees={self.trees}: a 'trie' is sized by the method's own keys "
                   "and only it (depth='own_keys')")  # fmt: skip
        if self.depth == "own_keys" and set(self.trees) != {"trie"}:
            refuse("trees", "a method whose own keys fix its tree takes no draft_tree")
        if self.depth != "own_keys" and "chain" not in self.trees:
            refuse("trees", "must include 'chain' (what is drafted without a draft_tree)")
        if bool(self.keys) != (self.parse_keys is not None):
            refuse("parse_keys", f"with keys={self.keys}: own keys need a parser, and only they")
        if self.parse_keys is not None and not callable(self.parse_keys):
            refuse("parse_keys", "must be callable: raw dict -> OwnKeys")
        if self.keys and not (isinstance(self.keys_owner, str) and self.keys_owner):
            refuse("keys_owner", f"must name the owner of keys={self.keys} in refusals")


@struct.dataclass
class ExtraNodes:
    """E nodes a proposer adds to the verify forward that are not drafts (lookahead's window).

    They sit after the P+1 block nodes; their logits and features come back to the proposer's
    `commit` (`verified` rows P+1 .. P+E), they are never verified nor committed. The draft
    nodes never see them.
    """

    tokens: jax.Array  # [B, E] int32
    depth: jax.Array  # [B, E] int32 position offset from the root (position = length + depth)
    mask: jax.Array  # [B, E, P+1+E] bool: what each extra node attends to in the block


@struct.dataclass
class Draft:
    """One static-shape draft block (node 0 is the root: the pending token)."""

    tokens: jax.Array  # [B, P+1] int32
    valid: jax.Array  # [B, P+1] bool: node offered to the verifier
    probs: jax.Array | None = None  # [B, P+1, V] q each node was drawn from (probabilistic)
    # [B, P+1] parents and depth of this step's tree, per row (topology.Topology); None = the
    # plan's static tree (the engine fills it in as constant data: one code path).
    topology: Topology | None = None
    extra: ExtraNodes | None = None  # non-draft nodes of the same forward (`extra_nodes` E)


@dataclasses.dataclass(frozen=True)
class Context:
    """What a proposer may know of the compiled program (static, hashable)."""

    sampling: SamplingParams  # the processed law's knobs: drafts are drawn exactly as p is
    cache_len: int  # S: slots per row of every cache in this program (room for a block)
    max_positions: int  # the target's position limit (positions are clipped below it)


@struct.dataclass
class StepInput:
    """The decode state at the start of a step, as a proposer sees it."""

    pstate: Any  # the proposer's own state, as `init` / the last `commit` returned it
    root: jax.Array  # [B] int32 the pending token: emitted, not yet in the target's cache
    lengths: jax.Array  # [B] int32 committed tokens in the target's cache (= its position)
    active: jax.Array  # [B] bool rows still generating (frozen rows change nothing)


@runtime_checkable
class Proposer(Protocol):
    """A speculative method's drafting half (typing.Protocol: any class with these members).

    Attributes:
      CAPABILITIES: what the method is (`Capabilities`), on the class.
      tap_layers: target layers whose incoming residual stream the proposer reads (static).
      max_positions: the proposer's own position limit (a draft model's), None if it has none.
      extra_nodes: E, the non-draft nodes its drafts add to the verify forward (`ExtraNodes`;
        0 for every method but lookahead).
    """

    CAPABILITIES: ClassVar[Capabilities]
    tap_layers: tuple[int, ...]
    max_positions: int | None
    extra_nodes: int

    @classmethod
    def build(cls, cfg, target, draft) -> tuple[Proposer, Any]:
        """Host side: (the hashable proposer, its parameters) from a validated SpecConfig, the
        target `Model` and the resolved draft (a `Model`, heads, or None)."""
        ...

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root) -> Any:
        """Initial proposer state, inside prefill.

        Args:
          prompt: [B, Tp] int32 right-padded; prompt_len: [B] int32 (0 = padding row).
          prefill: the target's ForwardOutput over the prompt (logits at the last prompt token
            only; last_hidden and taps at every position).
          root: [B] int32 the first pending token (sampled from the prefill's logits).
        """
        ...

    def propose(self, ctx: Context, target, params, step: StepInput, key) -> tuple[Draft, Any]:
        """Draft one block for every row. key: [B] per-row keys. Returns (draft, pstate)."""
        ...

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ) -> Any:
        """Update the proposer's state after verification.

        Args:
          pstate: what `propose` returned.
          verified: the target's ForwardOutput over the block (every node).
          result: the VerifyResult (tokens, num_accepted, path).
          n_commit: [B] int32 block entries committed (root + accepted drafts; 0 if frozen).
        """
        ...
