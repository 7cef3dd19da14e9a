"""The verify-cost curve: one target forward over a block of T tokens, in one-token forwards.

A speculative step verifies T = 1 + (draft nodes) tokens in one forward; on an accelerator at
batch 1 that costs about one decode step whatever T is, on a CPU it grows with T. The curve is
measured on the model and device at hand, at the batch size that will be served, over a
cache holding `context` committed tokens, with the weights in the layout decoding uses (the
packed one when the CPU kernel is on): `cost[T] = time(T-token forward) / time(1-token)`.
The picker divides tau by `N c + cost(nodes + 1)` instead of `N c + 1` (Sequoia's
hardware-aware budget, measured rather than assumed); the bench reports the curve.
"""

from __future__ import annotations

import functools
import random
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax import kernels
from specjax.cache import KVCache
from specjax.models import as_model
from specjax.validate import check_int

DEFAULT_BLOCKS = (1, 2, 3, 5, 8, 12, 16, 24, 32)


@functools.partial(jax.jit, static_argnums=0)
def _forwards(graphdef, params, cache, tokens, positions, n):
    """`n` T-token forwards in one program (a loop, as in decoding): dispatching a jitted
    forward from the host costs about as much as a small model's forward itself, so one
    forward a call would time the dispatch too and flatten the curve. Each forward's tokens
    depend on the previous one's logits, so XLA cannot hoist the forward out of the loop."""
    model = nnx.merge(graphdef, params)

    def body(_, toks):
        logits = model(toks, positions, cache).logits  # [B, T, V]
        shift = (logits[0, 0, 0] > 0).astype(jnp.int32)
        return (toks + shift) % logits.shape[-1]

    return jax.lax.fori_loop(0, n, body, tokens)


def measure_verify_cost(
    model, blocks=DEFAULT_BLOCKS, *, batch: int = 1, context: int = 64, repeats: int = 7,
    calls: int = 8, pack: bool | None = None, weight_dtype: str | None = None,
) -> dict:  # fmt: skip
    """Median seconds of a T-token forward for T in `blocks` (interleaved, shuffled order).

    Args:
      model: a Model or Decoder (the target).
      blocks: block sizes T (1 is always added: the unit).
      batch: rows per forward.
      context: committed tokens in the cache before the block.
      repeats: timed rounds (each times every T once, in a fresh random order).
      calls: forwards a timing, run as a loop in one program (their mean): the host's dispatch
        of a jitted call, about a small model's forward, is paid once per timing.
      pack: the weight layout (None: the one decoding uses here).
      weight_dtype: the weights as read (`kernels.WEIGHT_DTYPES`; None: as stored).
    Returns:
      {"blocks": [T...], "seconds": [...], "cost": [time(T) / time(1)...], "batch", "context",
       "cpu_kernel"}.
    """
    model = as_model(model)
    c = model.config
    blocks = sorted({1, *(check_int("blocks[]", t, 1) for t in blocks)})
    batch, context = check_int("batch", batch, 1), check_int("context", context, 0)
    check_int("repeats", repeats, 1)
    if context + blocks[-1] > c.max_position_embeddings:
        raise ValueError(
            f"context={context} + block {blocks[-1]} exceeds the model's "
            f"max_position_embeddings={c.max_position_embeddings}"
        )
    graphdef, params = kernels.split_for_decode(model.module, pack=pack, weight_dtype=weight_dtype)
    rng = np.random.default_rng(0)
    cache = KVCache.init(c.num_layers, batch, context + blocks[-1], c.num_kv_heads, c.head_dim,
                         jnp.dtype(c.dtype))  # fmt: skip
    cache = cache.replace(lengths=jnp.full((batch,), context, jnp.int32))
    args = {}
    for T in blocks:
        tokens = jnp.asarray(rng.integers(0, c.vocab_size, (batch, T)), jnp.int32)
        positions = context + jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (batch, T))
        args[T] = (graphdef, params, cache, tokens, positions)
        jax.block_until_ready(_forwards(*args[T], 1))  # compile outside the timing

    times = {T: [] for T in blocks}
    for r in range(repeats):
        order = list(blocks)
        random.Random(r).shuffle(order)
        for T in order:
            t0 = time.perf_counter()
            jax.block_until_ready(_forwards(*args[T], calls))
            times[T].append((time.perf_counter() - t0) / calls)
    seconds = [statistics.median(times[T]) for T in blocks]
    return {
        "blocks": blocks,
        "seconds": seconds,
        "cost": [s / seconds[0] for s in seconds],
        "batch": batch,
        "context": context,
        "cpu_kernel": any(isinstance(x, kernels.PackedWeight) for x in jax.tree.leaves(
            params, is_leaf=lambda x: isinstance(x, kernels.PackedWeight))),
    }  # fmt: skip


def cost_at(curve: dict | None, tokens: int) -> float:
    """The curve's cost of a `tokens`-token block, linear between measured sizes and beyond
    the last two; 1.0 (free verification, the textbook model) without a curve."""
    if curve is None:
        return 1.0
    xs, ys = curve["blocks"], curve["cost"]
    if tokens <= xs[0]:
        return float(ys[0])
    if len(xs) == 1:
        return float(ys[0])
    for i in range(1, len(xs)):
        if tokens <= xs[i]:
            break
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return float(y0 + (y1 - y0) * (tokens - x0) / (x1 - x0))
