"""KVCache: cached = uncached, rollback by index, poisoned stale slots, commit_path, bounds.

All on the tiny Llama of conftest plus a sliding-window variant (the window also masks by
index). Rows are ragged (different committed lengths) throughout, so per-row masking is tested.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.cache import KVCache, check_room

S = 32  # cache slots for every test here: one compiled shape per T
LENGTHS = np.array([5, 9], np.int32)  # ragged committed prefixes


@functools.partial(jax.jit, static_argnames="graphdef")
def _forward(params, tokens, positions, cache, block_mask, *, graphdef):
    out = nnx.merge(graphdef, params)(tokens, positions, cache, block_mask)
    return out.logits, out.cache


def forward(decoder, tokens, positions, cache, block_mask=None):
    """Jitted decoder call -> (logits [B, T, V] numpy, cache with the block written)."""
    graphdef, params = nnx.split(decoder)
    logits, cache = _forward(
        params,
        jnp.asarray(tokens, jnp.int32),
        jnp.asarray(positions, jnp.int32),
        cache,
        block_mask,
        graphdef=graphdef,
    )
    return np.asarray(logits), cache


def positions_after(cache: KVCache, T: int) -> np.ndarray:
    return np.asarray(cache.lengths)[:, None] + np.arange(T)[None, :]  # [B, T]


@pytest.fixture(scope="module", params=["llama", "sliding_window"])
def decoder(request, tiny_config):
    config = tiny_config if request.param == "llama" else tiny_config.replace(sliding_window=4)
    return sj.Decoder(config, seed=0)


@pytest.fixture(scope="module")
def seqs():
    """[B, 16] token ids: row b's prompt is seqs[b, :LENGTHS[b]], the continuation follows."""
    return np.random.default_rng(0).integers(0, 32, (2, 16)).astype(np.int32)


def prefilled(decoder, seqs) -> KVCache:
    """A cache holding row b's first LENGTHS[b] tokens (written as one 16-token block)."""
    cache = KVCache.for_model(decoder.config, 2, S)
    _, cache = forward(decoder, seqs, positions_after(cache, 16), cache)
    return cache.advance(jnp.asarray(LENGTHS))


def uncached_logits(decoder, seqs) -> np.ndarray:
    """Logits of the whole 16-token rows in one forward over an empty cache -> [B, 16, V]."""
    cache = KVCache.for_model(decoder.config, 2, S)
    logits, _ = forward(decoder, seqs, positions_after(cache, 16), cache)
    return logits


def next_tokens(seqs, cache, T):
    """[B, T] the tokens that follow each row's committed prefix."""
    n = np.asarray(cache.lengths)
    return np.stack([seqs[b, n[b] : n[b] + T] for b in range(len(n))])


def test_prefill_keeps_only_committed_slots(decoder, seqs):
    cache = prefilled(decoder, seqs)
    np.testing.assert_array_equal(np.asarray(cache.lengths), LENGTHS)
    # The 16-token block was written everywhere; lengths alone decide what is committed.
    assert np.all(np.asarray(cache.k)[:, :, :, :16] != 0) and np.all(
        np.asarray(cache.k)[:, :, :, 16:] == 0
    )


def test_cached_equals_uncached(decoder, seqs):
    """Chunks of 2 then single tokens through the cache reproduce the full-sequence logits."""
    full = uncached_logits(decoder, seqs)
    cache = prefilled(decoder, seqs)
    for T in (2, 1, 1, 2):
        logits, cache = forward(
            decoder, next_tokens(seqs, cache, T), positions_after(cache, T), cache
        )
        for b, n in enumerate(np.asarray(cache.lengths)):
            np.testing.assert_allclose(logits[b], full[b, n : n + T], atol=1e-5, rtol=0)
        cache = cache.advance(jnp.full((2,), T))
    np.testing.assert_array_equal(np.asarray(cache.lengths), LENGTHS + 6)


def _garbage_block(decoder, cache, T=4):
    """Write T unrelated tokens after each row's prefix (a rejected draft)."""
    junk = np.random.default_rng(5).integers(0, 32, (2, T))
    _, cache = forward(decoder, junk, positions_after(cache, T), cache)
    return cache


def test_rejected_block_changes_nothing(decoder, seqs):
    """A block written but never committed leaves the next forward bit-for-bit unchanged."""
    clean = prefilled(decoder, seqs)
    want, _ = forward(decoder, next_tokens(seqs, clean, 2), positions_after(clean, 2), clean)
    dirty = _garbage_block(decoder, clean)
    assert not np.array_equal(np.asarray(dirty.k), np.asarray(clean.k))
    got, _ = forward(decoder, next_tokens(seqs, dirty, 2), positions_after(dirty, 2), dirty)
    np.testing.assert_array_equal(got, want)


def test_advance_then_rollback_changes_nothing(decoder, seqs):
    """Commit a garbage block, roll it back (per row), decode again: as if never written."""
    clean = prefilled(decoder, seqs)
    want, _ = forward(decoder, next_tokens(seqs, clean, 1), positions_after(clean, 1), clean)
    dirty = _garbage_block(decoder, clean).advance(jnp.asarray([4, 3]))
    np.testing.assert_array_equal(np.asarray(dirty.lengths), LENGTHS + [4, 3])
    dirty = dirty.rollback(jnp.asarray(LENGTHS))
    np.testing.assert_array_equal(np.asarray(dirty.lengths), LENGTHS)
    got, _ = forward(decoder, next_tokens(seqs, dirty, 1), positions_after(dirty, 1), dirty)
    np.testing.assert_array_equal(got, want)
    # rollback never grows a row.
    np.testing.assert_array_equal(np.asarray(dirty.rollback(jnp.asarray([30, 2])).lengths), [5, 2])


@pytest.mark.parametrize("poison", [1e30, -1e30, np.nan, np.inf])
def test_poisoned_stale_slots_change_nothing(decoder, seqs, poison):
    clean = prefilled(decoder, seqs)
    stale = np.arange(S)[None, :] >= LENGTHS[:, None]  # [B, S]
    where = jnp.asarray(stale)[None, :, None, :, None]  # [1, B, 1, S, 1]
    dirty = clean.replace(
        k=jnp.where(where, jnp.float32(poison), clean.k),
        v=jnp.where(where, jnp.float32(poison), clean.v),
    )
    tokens, positions = next_tokens(seqs, clean, 2), positions_after(clean, 2)
    want, _ = forward(decoder, tokens, positions, clean)
    got, _ = forward(decoder, tokens, positions, dirty)
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got, want)


def test_poisoned_slots_hidden_from_tree_siblings(decoder, seqs):
    """In a tree block, a sibling's slot is invisible: poisoning only what nobody sees is harmless.

    Block of 3 nodes: 0 is the root, 1 and 2 are both its children. Node 2 must not see node 1.
    Compare node 2's logits with those of the chain (0, 2).
    """
    cache = prefilled(decoder, seqs)
    toks = next_tokens(seqs, cache, 2)  # [B, 2]: root and its true child
    other = (toks[:, 1:] + 7) % 32  # [B, 1] a sibling
    tree = np.concatenate([toks[:, :1], other, toks[:, 1:]], axis=1)  # [B, 3]
    tree_mask = jnp.asarray([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)  # [T, W]
    depth = np.array([0, 1, 1])
    pos = np.asarray(cache.lengths)[:, None] + depth[None, :]
    got, _ = forward(decoder, tree, pos, cache, tree_mask)
    chain, _ = forward(decoder, toks, positions_after(cache, 2), cache)
    np.testing.assert_allclose(got[:, 2], chain[:, 1], atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[:, 0], chain[:, 0], atol=1e-5, rtol=0)


def test_commit_path_gathers_values():
    """Known values per (layer, row, slot): the path's entries land contiguously after lengths."""
    L, B, K, H = 2, 2, 1, 2
    base = np.arange(L * B * S, dtype=np.float32).reshape(L, B, 1, S, 1)
    k = jnp.asarray(np.broadcast_to(base, (L, B, K, S, H)))
    cache = KVCache(k=k, v=-k, lengths=jnp.asarray([3, 10], jnp.int32), max_len=S)
    # Row 0 accepts block nodes 2 then 4 then 1 (3 entries); row 1 accepts node 3 only.
    path = jnp.asarray([[2, 4, 1], [3, 0, 6]], jnp.int32)
    out = cache.commit_path(path, jnp.asarray([3, 1], jnp.int32))
    np.testing.assert_array_equal(np.asarray(out.lengths), [6, 11])
    want = np.array(base[:, :, 0, :, 0])  # [L, B, S]
    for layer in range(L):
        want[layer, 0, 3:6] = base[layer, 0, 0, [3 + 2, 3 + 4, 3 + 1], 0]
        want[layer, 1, 10] = base[layer, 1, 0, 10 + 3, 0]
    got_k, got_v = np.asarray(out.k), np.asarray(out.v)
    np.testing.assert_array_equal(got_k[:, :, 0, :, 0], want)
    np.testing.assert_array_equal(got_k[:, :, 0, :, 1], want)
    np.testing.assert_array_equal(got_v[:, :, 0, :, 0], -want)


def test_commit_path_then_decode_equals_chain(decoder, seqs):
    """Write a tree, commit the path (0, 2), decode the next token: same as the chain prefix."""
    cache = prefilled(decoder, seqs)
    toks = next_tokens(seqs, cache, 3)  # [B, 3] the true continuation
    other = (toks[:, 1:2] + 7) % 32
    tree = np.concatenate(
        [toks[:, :1], other, toks[:, 1:2]], axis=1
    )  # root, wrong child, right child
    tree_mask = jnp.asarray([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)
    pos = np.asarray(cache.lengths)[:, None] + np.array([0, 1, 1])[None, :]
    _, written = forward(decoder, tree, pos, cache, tree_mask)
    committed = written.commit_path(jnp.asarray([[0, 2], [0, 2]], jnp.int32), jnp.asarray([2, 2]))
    np.testing.assert_array_equal(np.asarray(committed.lengths), LENGTHS + 2)
    got, _ = forward(decoder, toks[:, 2:3], positions_after(committed, 1), committed)

    chain = cache
    _, chain = forward(decoder, toks[:, :2], positions_after(chain, 2), chain)
    chain = chain.advance(jnp.full((2,), 2))
    want, _ = forward(decoder, toks[:, 2:3], positions_after(chain, 1), chain)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_check_room_refuses_overflow():
    check_room(np.array([3, 10]), 6, 16)  # exactly fits: 10 + 6 = 16
    with pytest.raises(ValueError, match=r"needs 17 slots.*max_len=16"):
        check_room(np.array([3, 10]), 7, 16)
    with pytest.raises(ValueError, match=r"^draft cache: writing 1 tokens after length 16"):
        check_room(jnp.asarray([16, 0]), 1, 16, what="draft cache")
