"""Sampling: the one place that turns logits into the distribution a token is drawn from.

Target and draft both sample from `processed_probs(logits, params)`, and the verifier
compares exactly these distributions (p, the target's, and q, the draft's, in
`specjax/decoding/verify.py`), so a lossless verifier keeps the target's output
distribution only if every caller goes through this file.

The processing matches transformers' sampling warpers, applied in transformers' order with
`min_tokens_to_keep=1`: temperature, top-k, top-p, min-p. All math runs in float32 whatever
the input dtype (acceptance math in float32). Masked tokens get -inf logprob and exactly 0
probability. Temperature 0 is greedy: the processed distribution is the one-hot of
`greedy_argmax`, which breaks ties towards the lowest token id.

Ties. transformers' top-k keeps every token tied with the k-th largest logit, and so does
this file. transformers' top-p sorts with an unstable `torch.sort`, so when a group of tied
logits straddles the top-p cutoff, which of them it drops is unspecified; here the lower ids
of such a group are kept (the same rule as greedy), so the kept set is always well defined.

Random streams. Row b of a batch draws from its own stream, which depends only on the seed
and on b, never on the batch size or on the other rows:

    row_key  = jax.random.fold_in(jax.random.key(seed), b)     # row_keys(seed, B)[b]
    step key = jax.random.fold_in(row_key, t)                   # step_key(row_key, t)

With per-row seeds (`row_keys(seed, B, seeds=[...])`) row b's key is `jax.random.key(seeds[b])`
and does not depend on b either, so a request with its own seed samples the same tokens alone
or in any batch. Pass per-row keys to `sample` (key shape = the leading logits axes) to draw
each row from its own stream.

Every function is jit-able with `params` static (`SamplingParams` is a frozen, hashable
dataclass of plain python numbers). Axis letters follow `specjax/models/axes.py`; `...` is
any leading batch axes, e.g. [B] or [B, P].
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.validate import check_int, check_real

_MAX_SEED = 2**32 - 1  # jax.random.key keeps only 32 seed bits unless x64 is on


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How a token is drawn from logits; a static jit argument (hashable, plain python numbers).

    Attributes:
      temperature: 0 means greedy (argmax, lowest id on ties); otherwise logits / temperature.
      top_k: keep the top_k largest logits (and any tied with the k-th); 0 turns it off.
      top_p: keep the smallest set of most likely tokens whose probability reaches top_p;
        1.0 turns it off.
      min_p: drop tokens whose probability is below min_p * (top token's probability);
        0.0 turns it off.
      seed: base seed of the per-row random streams (see `row_keys`).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0

    def __post_init__(self):
        # Checked values are plain python numbers (numpy scalars and ints normalised), so
        # equal params hash equal.
        checked = {
            "temperature": check_real("SamplingParams.temperature", self.temperature, 0.0),
            "top_k": check_int("SamplingParams.top_k", self.top_k, 0, note="0 = off"),
            "top_p": check_real(
                "SamplingParams.top_p", self.top_p, 0.0, 1.0, lo_open=True, note="1 = off"
            ),
            "min_p": check_real("SamplingParams.min_p", self.min_p, 0.0, 1.0, note="0 = off"),
            "seed": check_int("SamplingParams.seed", self.seed, 0, _MAX_SEED),
        }
        for field, value in checked.items():
            object.__setattr__(self, field, value)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def check_vocab(self, vocab_size: int) -> None:
        """Raises ValueError if these params cannot apply to a vocabulary of vocab_size tokens."""
        check_int("SamplingParams.top_k", self.top_k, hi=vocab_size, note="vocab_size")


# Up to this many logits the fused where/min argmax is the fastest (2-3x top_k at one to a
# few rows of a 49k-152k vocabulary, 2026-12-03, AMD EPYC 2 cores); above it top_k.
_FUSED_ARGMAX_MAX = 2**21


def greedy_argmax(logits: jax.Array) -> jax.Array:
    """Argmax over the vocabulary; among equal maxima the lowest token id wins.

    Args:
      logits: [..., V], NaN-free (a row holding NaN has no maximum and returns id 0).

    Returns:
      [...] int32 token ids.
    """
    logits = logits.astype(jnp.float32)  # [..., V]
    if logits.size > _FUSED_ARGMAX_MAX:
        # XLA:CPU materialises the where/min below as two [..., V] temporaries (2.3 GB at
        # [32, 64, 152k]; 3x slower than top_k once they leave the cache). top_k keeps the
        # lower id first among equals and makes no temporary.
        # On [rows, V]: a 3-D top_k of an intermediate made another copy of it (1.2 GB).
        flat = logits.reshape(-1, logits.shape[-1])  # [rows, V]
        top, first = jax.lax.top_k(flat, 1)  # [rows, 1] each; NaN ranks above every number
        ids = jnp.where(jnp.isnan(top[:, 0]), 0, first[:, 0]).astype(jnp.int32)  # [rows]
        return ids.reshape(logits.shape[:-1])  # [...]
    vocab = logits.shape[-1]
    is_max = logits == jnp.max(logits, axis=-1, keepdims=True)  # [..., V]
    ids = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)  # [..., V]
    first = jnp.min(jnp.where(is_max, ids, vocab), axis=-1)  # [...] lowest id among maxima
    return jnp.where(first < vocab, first, 0).astype(jnp.int32)  # [...]


def _top_k_mask(logits: jax.Array, k: int) -> jax.Array:
    """True where a token survives top-k; ties with the k-th largest survive (transformers)."""
    kth = jax.lax.top_k(logits, k)[0][..., -1:]  # [..., 1]
    return logits >= kth  # [..., V]


def _top_p_mask(logits: jax.Array, top_p: float) -> jax.Array:
    """True where a token survives top-p, by transformers' rule.

    transformers sorts ascending and removes tokens whose ascending cumulative probability is
    <= 1 - top_p, always keeping the most likely one. In descending order that ascending
    cumsum is the suffix sum. The stable descending sort puts lower ids first among ties, so
    a tie group split by the cutoff keeps its lower ids.
    """
    order = jnp.argsort(logits, axis=-1, descending=True, stable=True)  # [..., V]
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)  # [..., V] descending
    sorted_probs = jax.nn.softmax(sorted_logits, axis=-1)  # [..., V]
    mass_from_here = jax.lax.cumsum(sorted_probs, axis=sorted_probs.ndim - 1, reverse=True)
    drop_sorted = mass_from_here <= 1.0 - top_p  # [..., V]
    drop_sorted = drop_sorted.at[..., 0].set(False)  # min_tokens_to_keep = 1
    drop = jnp.put_along_axis(
        jnp.zeros_like(drop_sorted), order, drop_sorted, axis=-1, inplace=False
    )  # [..., V] back in vocabulary order
    return ~drop


def _min_p_mask(logits: jax.Array, min_p: float) -> jax.Array:
    """True where a token's probability is >= min_p * the top probability (transformers).

    The top token always passes (min_p <= 1), which is min_tokens_to_keep = 1.
    """
    probs = jax.nn.softmax(logits, axis=-1)  # [..., V]
    return probs >= min_p * jnp.max(probs, axis=-1, keepdims=True)  # [..., V]


def _warped_logits(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """Temperature, top-k, top-p, min-p in transformers' order; filtered entries are -inf."""
    x = logits.astype(jnp.float32) / params.temperature  # [..., V] float32 acceptance math
    vocab = x.shape[-1]
    # Each filter is skipped when off (static), as transformers skips its warper.
    if 0 < params.top_k < vocab:
        x = jnp.where(_top_k_mask(x, params.top_k), x, -jnp.inf)  # [..., V]
    if params.top_p < 1.0:
        x = jnp.where(_top_p_mask(x, params.top_p), x, -jnp.inf)  # [..., V]
    if params.min_p > 0.0:
        x = jnp.where(_min_p_mask(x, params.min_p), x, -jnp.inf)  # [..., V]
    return x


def processed_logprobs(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """Log-probabilities of the processed distribution.

    Args:
      logits: [..., V] raw logits, any float dtype.
      params: static SamplingParams.

    Returns:
      [..., V] float32; -inf on masked tokens. Greedy params give 0 at `greedy_argmax`
      and -inf elsewhere.
    """
    if params.greedy:
        vocab = logits.shape[-1]
        hot = jax.nn.one_hot(greedy_argmax(logits), vocab, dtype=jnp.bool_)  # [..., V]
        return jnp.where(hot, 0.0, -jnp.inf).astype(jnp.float32)  # [..., V]
    return jax.nn.log_softmax(_warped_logits(logits, params), axis=-1)  # [..., V]


def processed_probs(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """Probabilities of the processed distribution.

    Args:
      logits: [..., V] raw logits, any float dtype.
      params: static SamplingParams.

    Returns:
      [..., V] float32 summing to 1 over V; exactly 0 on masked tokens. Greedy params give
      the one-hot of `greedy_argmax`.
    """
    if params.greedy:
        vocab = logits.shape[-1]
        return jax.nn.one_hot(greedy_argmax(logits), vocab, dtype=jnp.float32)  # [..., V]
    return jax.nn.softmax(_warped_logits(logits, params), axis=-1)  # [..., V]


def _typed_key(key: jax.Array) -> jax.Array:
    """Accepts new-style typed keys and legacy uint32 [..., 2] keys."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def sample(key: jax.Array, logits: jax.Array, params: SamplingParams) -> jax.Array:
    """Draws one token per distribution from the processed distribution.

    Args:
      key: one key for everything (shape []), or one key per row with shape equal to the
        leading axes of logits (e.g. [B] for logits [B, P, V]); each row then draws from its
        own key only, so its tokens do not depend on the other rows. Ignored when greedy.
      logits: [..., V] raw logits.
      params: static SamplingParams.

    Returns:
      [...] int32 token ids.
    """
    if params.greedy:
        return greedy_argmax(logits)  # [...]
    key = _typed_key(key)
    batch_shape = logits.shape[:-1]
    if key.shape != batch_shape[: key.ndim]:
        raise ValueError(
            f"sample: key shape {key.shape} must be () or a prefix of the logits' leading "
            f"axes {batch_shape}"
        )
    logprobs = processed_logprobs(logits, params)  # [..., V]
    draw = lambda k, lp: jax.random.categorical(k, lp, axis=-1)
    for _ in range(key.ndim):
        draw = jax.vmap(draw)
    return draw(key, logprobs).astype(jnp.int32)  # [...]


def row_keys(seed: int, batch: int, seeds: Sequence[int] | None = None) -> jax.Array:
    """Per-row random streams: row b's key is fold_in(key(seed), b), or key(seeds[b]).

    Args:
      seed: base seed; row b gets jax.random.fold_in(jax.random.key(seed), b), which depends
        on b alone, so rows keep their streams whatever the batch size.
      batch: B, the number of rows (static).
      seeds: optional per-row seeds overriding `seed`: row b gets jax.random.key(seeds[b]).

    Returns:
      [B] typed PRNG keys.
    """
    if seeds is None:
        seed = check_int("row_keys.seed", seed, 0, _MAX_SEED)
        return _folded_keys(np.uint32(seed), batch)  # [B]
    if len(seeds) != batch:
        raise ValueError(f"row_keys: len(seeds)={len(seeds)} must equal batch={batch}")
    if not isinstance(seeds, jax.Array):
        seeds = [check_int(f"row_keys.seeds[{b}]", s, 0, _MAX_SEED) for b, s in enumerate(seeds)]
    return _seeded_keys(jnp.asarray(seeds, dtype=jnp.uint32))  # [B]


# One compiled call each (a generate call makes its keys on the host's critical path: run op by
# op, the vmap of fold_in cost about 1 ms, as much as a decode step of a small model).
@functools.partial(jax.jit, static_argnums=1)
def _folded_keys(seed, batch: int) -> jax.Array:
    base = jax.random.key(seed)  # a uint32 seed gives the key a Python int of that value does
    return jax.vmap(lambda b: jax.random.fold_in(base, b))(jnp.arange(batch))


_seeded_keys = jax.jit(jax.vmap(jax.random.key))


def step_key(row_key: jax.Array, step) -> jax.Array:
    """The key of speculative step `step` in a row's stream: fold_in(row_key, step).

    Args:
      row_key: [] one row's key, or [B] keys from `row_keys`.
      step: int or int array, [] or [B] (broadcast against row_key).

    Returns:
      keys with row_key's shape.
    """
    row_key = _typed_key(row_key)
    if row_key.ndim == 0:
        return jax.random.fold_in(row_key, step)
    step = jnp.broadcast_to(jnp.asarray(step), row_key.shape)  # [B]
    return jax.vmap(jax.random.fold_in)(row_key, step)  # [B]
