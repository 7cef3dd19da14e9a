"""The proposer interface: every method fills the same static-shape draft.

A proposer is a frozen, hashable dataclass (part of the jit's static plan) with:

  build(cfg, draft_model) -> (proposer, params)     classmethod, host side
  init(static, params, state, prompt, prompt_len, target_out) -> pstate   inside prefill
  propose(static, params, state, key) -> (Draft, pstate)
  commit(static, params, pstate, state, result, n_commit) -> pstate

`state` is the engine's DecodeState before the step (state.proposer holds pstate; state.last
is the pending root token; state.cache.lengths the committed length L). `n_commit[b]` is the
number of block entries (root + accepted drafts) committed this step, 0 for frozen rows.
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class Draft:
    """One static-shape draft block (node 0 is the root: the pending token)."""

    tokens: jax.Array  # [B, P+1] int32
    valid: jax.Array  # [B, P+1] bool: node offered to the verifier
    probs: jax.Array | None = None  # [B, P+1, V] q each node was drawn from (probabilistic)
