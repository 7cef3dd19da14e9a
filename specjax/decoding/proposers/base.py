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
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
from flax import struct

from specjax.decoding.topology import Topology
from specjax.sampling import SamplingParams


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
      tap_layers: target layers whose incoming residual stream the proposer reads (static).
      max_positions: the proposer's own position limit (a draft model's), None if it has none.
      extra_nodes: E, the non-draft nodes its drafts add to the verify forward (`ExtraNodes`;
        0 for every method but lookahead).
    """

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
