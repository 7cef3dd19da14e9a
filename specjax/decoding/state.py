"""The loop state and the step pieces that the engine and the speculative step share.

`DecodeState` is what the engine's `lax.while_loop` carries; `Static` holds the hashable knobs of
one compiled program; `emit` appends a step's tokens to every active row; `target_module`
merges the target once per traced step. The engine (`engine.py`) and the speculative step
(`speculative.py`) both import this module, and neither imports the other's internals back.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from specjax import sampling as sp
from specjax.cache import KVCache
from specjax.decoding.proposers.base import Context

MAX_STOP_IDS = 16  # stop ids travel as a padded array of this size (data, not a static arg)


@struct.dataclass
class DecodeState:
    """Everything the while_loop carries. O = output buffer length; M = max tokens per step."""

    cache: KVCache  # the target's cache
    proposer: Any  # the proposer's own state (draft cache, ...); () for autoregressive
    last: jax.Array  # [B] int32 pending token: emitted, not yet in the target's cache
    out: jax.Array  # [B, O] int32 emitted tokens
    num_out: jax.Array  # [B] int32
    done: jax.Array  # [B] bool
    max_new: jax.Array  # [B] int32 per-row budget
    stop_ids: jax.Array  # [MAX_STOP_IDS] int32, -1 = unused
    keys: jax.Array  # [B] PRNG keys, one stream per row
    step: jax.Array  # [] int32 loop iteration (keys fold it in)
    steps: jax.Array  # [B] int32 steps taken while the row was active
    drafted: jax.Array  # [B] int32 draft tokens offered to the verifier
    accepted: jax.Array  # [B] int32 draft tokens accepted
    accept_hist: jax.Array  # [B, M] int32 histogram of accepted drafts per step (0..M-1)
    # Per draft position i = 1..M-1 (index 0 unused): active steps that offered position i (the
    # budget can mask the deeper ones), and those that also accepted >= i - 1 drafts.
    offered: jax.Array  # [B, M] int32
    reached: jax.Array  # [B, M] int32
    # The target's RoPE table (`Decoder.rope_table`), made once before the loop; None without RoPE.
    rope: Any = None


# id(graphdef) -> (graphdef, hash) for the graphdefs hashed last (`graphdef_hash`).
_GRAPHDEF_HASHES: collections.OrderedDict[int, tuple[Any, int]] = collections.OrderedDict()
_GRAPHDEF_HASHES_KEPT = 32


def graphdef_hash(graphdef) -> int:
    """hash(graphdef), remembered for the graphdef objects hashed last.

    `jax.jit` hashes its static arguments on every call, and an NNX graphdef's hash walks all
    its nodes (0.3 ms on the quickstart's 6 layers, more on deeper models), while
    `kernels.split_for_decode` returns the same graphdef object for an unchanged module: so a
    call hashes it once. The entry holds the graphdef, so its id cannot be reused meanwhile.
    """
    entry = _GRAPHDEF_HASHES.get(id(graphdef))
    if entry is not None and entry[0] is graphdef:
        return entry[1]
    value = hash(graphdef)
    _GRAPHDEF_HASHES[id(graphdef)] = (graphdef, value)
    while len(_GRAPHDEF_HASHES) > _GRAPHDEF_HASHES_KEPT:
        _GRAPHDEF_HASHES.popitem(last=False)
    return value


@dataclasses.dataclass(frozen=True)
class Static:
    """Hashable knobs fixed per compiled program."""

    graphdef: Any
    sampling: sp.SamplingParams  # seed zeroed: seeds are data
    cache_len: int  # S: slots per row of the target's cache (and of any draft cache)
    out_len: int  # O
    max_positions: int
    spec: Any = None  # SpecPlan or None (autoregressive)
    layout: Any = None  # specjax.parallel.Layout (a mesh and its rules) or None: one device

    def __hash__(self) -> int:  # the graphdef's hash remembered (`graphdef_hash`)
        fields = (self.sampling, self.cache_len, self.out_len, self.max_positions, self.spec)
        return hash((graphdef_hash(self.graphdef), *fields, self.layout))

    @property
    def context(self) -> Context:
        """What a proposer may know of this program (`proposers/base.py`)."""
        return Context(self.sampling, self.cache_len, self.max_positions)


def target_module(static: Static, params):
    """The target module. params = (target params, proposer params); () for autoregressive."""
    return nnx.merge(static.graphdef, params[0])


def emit(state: DecodeState, tokens, count) -> DecodeState:
    """Append `count[b]` tokens to each active row, stopping at a stop id or the budget.

    The last token taken becomes the row's pending token.

    Args:
      tokens: [B, M] int32 candidate tokens in order; count: [B] int32 (1..M) how many are real.
    """
    B, M = tokens.shape
    idx = jnp.arange(M, dtype=jnp.int32)  # [M]
    is_stop = jnp.any(tokens[:, :, None] == state.stop_ids[None, None, :], axis=-1)  # [B, M]
    is_stop &= idx[None, :] < count[:, None]
    first_stop = jnp.where(jnp.any(is_stop, axis=1), jnp.argmax(is_stop, axis=1), M)  # [B]
    room = state.max_new - state.num_out  # [B]
    n = jnp.minimum(jnp.minimum(count, first_stop + 1), room)  # [B]
    n = jnp.where(state.done, 0, n)  # frozen rows take nothing
    write = jax.vmap(lambda buf, x, at: jax.lax.dynamic_update_slice(buf, x, (at,)))
    out = write(state.out, tokens, state.num_out)  # [B, O]
    # Rows that take nothing keep their buffer untouched.
    out = jnp.where((n > 0)[:, None], out, state.out)
    num_out = state.num_out + n
    hit_stop = (first_stop < count) & (first_stop + 1 <= n)
    done = state.done | hit_stop | (num_out >= state.max_new)
    last_tok = jnp.take_along_axis(tokens, jnp.maximum(n - 1, 0)[:, None], axis=1)[:, 0]  # [B]
    last = jnp.where(n > 0, last_tok, state.last)
    return state.replace(out=out, num_out=num_out, done=done, last=last)
