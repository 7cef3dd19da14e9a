"""Lookahead decoding: the window as extra nodes of the verify forward, the n-gram pool, the
candidate trie, greedy equality with autoregressive decoding and the refusals.

The law at T>0 is tested with every other method in test_spec_distribution.py.
"""

import collections
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax as sj
from specjax.cache import KVCache
from specjax.decoding import engine, spec_config
from specjax.decoding.proposers import StepInput
from specjax.decoding.proposers.base import Context
from specjax.decoding.proposers.lookahead import (
    MAX_POOL_KEYS,
    LookaheadProposer,
    LookaheadState,
    NgramPool,
    pool_insert,
    window_mask,
)
from specjax.decoding.proposers.ngram_trie import NgramTrie, ngram_trie
from specjax.decoding.speculative import _with_extra
from specjax.decoding.topology import ancestor_mask_of

MAX_NEW = 40
SMALL = {"lookahead_window": 3, "ngram_size": 3, "max_candidates": 2}


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    repetitive = [3, 4, 5, 6] * 5  # the pool, seeded from it, must hit
    return [rng.integers(0, 32, 9).tolist(), repetitive, rng.integers(0, 32, 17).tolist()]


@pytest.fixture(scope="module")
def reference(target, prompts):
    return sj.generate(target, prompts, MAX_NEW, stop_token_ids=[])


@pytest.mark.parametrize(
    "cfg",
    [{}, {**SMALL, "seed_pool_from_prompt": False}, {**SMALL, "lookahead_advance": "accepted"}],
    ids=["default", "small-unseeded", "small-advance-accepted"],
)
def test_greedy_equals_autoregressive(target, prompts, reference, cfg):
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config={"method": "lookahead", **cfg})  # fmt: skip
    assert out.tokens == reference.tokens
    assert out.stats["method"] == "lookahead" and not out.stats["lossy"]
    # The repetitive row is where the pool hits: drafts accepted at every depth.
    assert out.stats["row_accepted_tokens"][1] >= 10, out.stats
    assert min(out.stats["accepted_by_position"]) > 0, out.stats


def test_greedy_in_tight_buckets(target):
    """Prompts as long as their bucket, max_new_tokens = its bucket: the block (P+1 candidate
    nodes and E window cells) always fits, and each row equals its own AR decoding."""
    rng = np.random.default_rng(42)
    prompts = [rng.integers(0, 32, 16).tolist(), [7, 8, 9] * 3, rng.integers(0, 32, 16).tolist()]
    cfg = {"method": "lookahead", "lookahead_window": 4, "ngram_size": 4, "max_candidates": 3}
    ref = sj.generate(target, prompts, 16, stop_token_ids=[]).tokens
    out = sj.generate(target, prompts, 16, stop_token_ids=[], speculative_config=cfg)
    assert out.tokens == ref
    assert out.stats["accepted_tokens"] > 0


def test_ngram_trie_by_hand():
    """Candidates sharing a prefix share nodes; duplicates and missing ones are not offered."""
    cand = jnp.asarray([[[1, 2, 3], [1, 2, 4], [1, 2, 3], [5, 6, 7]]])  # [1, G=4, n=3]
    valid = jnp.asarray([[True, True, True, False]])
    tokens, offered, topo = ngram_trie(cand, valid)
    # Nodes 1..12: candidate g's token j at 1 + 3g + j.
    assert np.asarray(tokens).tolist() == [[1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 6, 7]]
    # g=1 shares "1 2" with g=0 (nodes 4, 5 not offered; its "4" hangs under node 2);
    # g=2 duplicates g=0; g=3 is missing.
    want = [True, True, True, False, False, True, False, False, False, False, False, False]
    assert np.asarray(offered).tolist() == [want]
    parents = np.asarray(topo.parents)[0]
    assert parents[[0, 1, 2, 3, 6]].tolist() == [-1, 0, 1, 2, 2]
    assert np.asarray(topo.depth)[0].tolist() == [0] + [1, 2, 3] * 4
    assert all(0 <= parents[j] < j for j in range(1, 13))


def test_window_mask_by_hand():
    """n = 2 levels, W = 3 columns, after a block of root + 1 draft: cell (l, i) sees the root,
    level 0's cells 0..i and its own column above level 0, never the draft."""
    m = window_mask(2, 3, 2).astype(int)
    #        root draft | l0: c0 c1 c2 | l1: c0 c1 c2
    want = [[1, 0, 1, 0, 0, 0, 0, 0],  # (0, 0)
            [1, 0, 1, 1, 0, 0, 0, 0],  # (0, 1)
            [1, 0, 1, 1, 1, 0, 0, 0],  # (0, 2)
            [1, 0, 1, 0, 0, 1, 0, 0],  # (1, 0)
            [1, 0, 1, 1, 0, 0, 1, 0],  # (1, 1)
            [1, 0, 1, 1, 1, 0, 0, 1]]  # (1, 2)  # fmt: skip
    assert m.tolist() == want


@pytest.mark.slow  # a cell-by-cell replay of the window: half a minute
def test_window_cells_see_exactly_their_trajectory(target):
    """Each window cell's logits in the combined forward equal the target's on the explicit
    sequence prefix, root, w[0, 0..i], w[1, i], ..., w[l, i] (its trajectory, one token per
    position); the candidate nodes' logits equal their paths' (the cells change nothing)."""
    prefix = [5, 9, 2, 30, 7]
    L = len(prefix)
    proposer = LookaheadProposer(window=3, ngram_size=4, max_candidates=2, seed_pool=True,
                                 vocab=32, key_slots=32)  # fmt: skip
    ctx = Context(sj.SamplingParams(), cache_len=64, max_positions=128)
    prompt = jnp.asarray([prefix + [0] * 3], jnp.int32)
    state = proposer.init(ctx, target, (), prompt, jnp.asarray([L]), None, jnp.asarray([4]))
    window = jnp.asarray([[[11, 12, 13], [14, 15, 16], [17, 18, 19]]], jnp.int32)  # [1, n, W]
    state = state.replace(window=window)
    root = jnp.asarray([9], jnp.int32)  # the prompt seeded one continuation of 9: "2 30 7"
    view = StepInput(pstate=state, root=root, lengths=jnp.asarray([L]),
                     active=jnp.asarray([True]))  # fmt: skip
    draft, _ = proposer.propose(ctx, target, (), view, None)
    assert np.asarray(draft.tokens)[0, :4].tolist() == [9, 2, 30, 7]
    assert np.asarray(draft.valid)[0].tolist() == [True] * 4 + [False] * 3
    block = ancestor_mask_of(draft.topology.parents, proposer.n)
    tokens, offsets, mask = _with_extra(draft.tokens, draft.topology.depth, block, draft.extra)
    cache = KVCache.for_model(target.config, 1, 64)
    pre = target(jnp.asarray([prefix]), jnp.arange(L)[None], cache)
    out = target(tokens, L + offsets, pre.cache.replace(lengths=jnp.asarray([L])), mask)
    logits = np.asarray(out.logits[0])
    P1 = draft.tokens.shape[1]

    def alone(seq):
        c = KVCache.for_model(target.config, 1, 64)
        return np.asarray(target(jnp.asarray([seq]), jnp.arange(len(seq))[None], c).logits[0, -1])

    w = np.asarray(window[0])
    for level in range(3):
        for i in range(3):
            seq = prefix + [9] + w[0, : i + 1].tolist() + w[1 : level + 1, i].tolist()
            got = logits[P1 + level * 3 + i]
            np.testing.assert_allclose(got, alone(seq), atol=2e-5, err_msg=f"cell {level, i}")
    cand = np.asarray(draft.tokens[0])
    for j in range(4):  # the root and the offered candidate "2 30 7"
        np.testing.assert_allclose(logits[j], alone(prefix + [9] + cand[1 : j + 1].tolist()),
                                   atol=2e-5)  # fmt: skip


def _row(pool, b=0):
    return jax.tree.map(lambda x: x[b], pool)


def _entries(row, key):
    """One row's n-grams under `key`, oldest first."""
    slot = int(row.slot_of[key])
    if slot < 0:
        return []
    stamps, grams = np.asarray(row.stamp[slot]), np.asarray(row.grams[slot])
    return [tuple(grams[j].tolist()) for j in np.argsort(stamps) if stamps[j] >= 0]


def test_pool_insert_refresh_and_lru_eviction():
    ins = jax.jit(pool_insert)
    pool = _row(NgramPool.empty(1, V=8, K=4, G=2, n=2))
    for gram in ([2, 3], [4, 5]):
        pool = ins(pool, 1, jnp.asarray(gram), True)
    assert _entries(pool, 1) == [(2, 3), (4, 5)]
    pool = ins(pool, 1, jnp.asarray([2, 3]), True)  # present: refreshed, nothing added
    assert _entries(pool, 1) == [(4, 5), (2, 3)]
    pool = ins(pool, 1, jnp.asarray([6, 7]), True)  # full: the least recently used goes
    assert _entries(pool, 1) == [(2, 3), (6, 7)]
    pool = ins(pool, 1, jnp.asarray([8, 9]), False)  # not ok: unchanged
    assert _entries(pool, 1) == [(2, 3), (6, 7)]
    pool = ins(pool, 2, jnp.asarray([1, -1]), True)  # a gram with a missing token: skipped
    assert _entries(pool, 2) == []


def test_pool_matches_the_reference_dict_with_lru_over_keys():
    """Random inserts against the reference's dict of per-key LRU lists (at most G each),
    bounded to K keys by evicting the key inserted or refreshed longest ago; lookups (most
    recent first) agree after every insert."""
    V, K, G, n = 12, 3, 2, 1
    rng = np.random.default_rng(0)
    ins, look = jax.jit(pool_insert), jax.jit(NgramPool.lookup)
    pool, model = _row(NgramPool.empty(1, V, K, G, n)), collections.OrderedDict()
    for _ in range(120):
        key, gram, ok = int(rng.integers(0, 6)), int(rng.integers(0, 3)), rng.random() < 0.9
        pool = ins(pool, key, jnp.asarray([gram]), ok)
        if ok:
            grams = model.pop(key, [])
            if gram in grams:
                grams.remove(gram)
            model[key] = (grams + [gram])[-G:]
            if len(model) > K:
                model.popitem(last=False)
        every = jax.tree.map(lambda x: jnp.broadcast_to(x, (V, *x.shape)), pool)  # V rows
        got, found = look(every, jnp.arange(V, dtype=jnp.int32))  # row k looks key k up
        for k in range(V):
            want = model.get(k, [])[::-1]
            assert np.asarray(got)[k, : len(want), 0].tolist() == want, (k, model)
            assert np.asarray(found)[k].tolist() == [True] * len(want) + [False] * (G - len(want))


def _stub_target(vocab_size):
    return types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=vocab_size))


def test_colliding_keys_keep_their_own_ngrams_on_a_large_vocabulary():
    """Keys MAX_POOL_KEYS apart (one bucket of the old hashed pool) each keep their own G
    n-grams and drop their own least recently used one."""
    cfg = spec_config.parse({"method": "lookahead", **SMALL}, temperature=0.0)  # G=2, n=2
    proposer, _ = LookaheadProposer.build(cfg, _stub_target(20_000), None)
    a, b = 5, 5 + MAX_POOL_KEYS
    seq = [a, 1, 2, a, 3, 4, b, 6, 7, b, 8, 9, a, 10, 11]  # a's (1, 2) is its oldest: dropped
    prompt = jnp.asarray([seq, seq], jnp.int32)
    lens = jnp.asarray([len(seq)] * 2)
    ctx = Context(sj.SamplingParams(), cache_len=64, max_positions=128)
    state = jax.jit(lambda p, n: proposer.init(ctx, None, (), p, n, None, n * 0))(prompt, lens)
    view = StepInput(pstate=state, root=jnp.asarray([a, b]), lengths=lens,
                     active=jnp.asarray([True, True]))  # fmt: skip
    draft, _ = jax.jit(lambda v: proposer.propose(ctx, None, (), v, None))(view)
    assert np.asarray(draft.tokens).tolist() == [[a, 10, 11, 3, 4], [b, 8, 9, 6, 7]]
    assert np.asarray(draft.valid).all()


def test_frozen_row_commit_leaves_its_pool():
    """A row that commits nothing inserts nothing (its inserts are masked); the other row's
    window columns and committed n-grams go in."""
    proposer = LookaheadProposer(window=2, ngram_size=3, max_candidates=2, seed_pool=True,
                                 vocab=64, key_slots=8)  # fmt: skip
    ctx = Context(sj.SamplingParams(), cache_len=64, max_positions=128)
    prompt = jnp.asarray([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]], jnp.int32)
    lens = jnp.asarray([5, 5])
    state = jax.jit(lambda p, n: proposer.init(ctx, None, (), p, n, None, n * 0))(prompt, lens)
    state = state.replace(window=jnp.asarray([[[20, 21], [22, 23]]] * 2, jnp.int32),
                          filled=jnp.asarray([2, 2]))  # fmt: skip
    root = jnp.asarray([6, 6])
    view = StepInput(pstate=state, root=root, lengths=lens, active=jnp.asarray([True, False]))
    P1, E, V = 5, 4, 64
    logits = jax.nn.one_hot(jnp.full((2, P1 + E), 30), V)  # the newest level predicts 30
    accepted = jnp.asarray([[7, 8, 0], [7, 8, 0]], jnp.int32)  # [B, M]: root 6, then 7

    @jax.jit
    def commit(view, state, logits, accepted, n_commit):
        verified = types.SimpleNamespace(logits=logits)
        result = types.SimpleNamespace(tokens=accepted)
        return proposer.commit(ctx, None, (), view, state, verified, result, n_commit)

    after = commit(view, state, logits, accepted, jnp.asarray([2, 0]))
    moved, frozen = _row(after.pool, 0), _row(after.pool, 1)
    assert _entries(moved, 20) == [(22, 30)] and _entries(moved, 21) == [(23, 30)]
    assert _entries(moved, 4) == [(5, 6)] and _entries(moved, 5) == [(6, 7)]
    jax.tree.map(np.testing.assert_array_equal, frozen, _row(state.pool, 1))
    assert np.asarray(after.window[1]).tolist() == [[20, 21], [22, 23]]


def test_pool_seeded_from_the_prompt_and_looked_up_per_row(target):
    proposer = LookaheadProposer(window=2, ngram_size=3, max_candidates=2, seed_pool=True,
                                 vocab=32, key_slots=32)  # fmt: skip
    ctx = Context(sj.SamplingParams(), cache_len=64, max_positions=128)
    prompt = jnp.asarray([[1, 2, 3, 1, 2, 4, 0, 0], [9, 8, 7, 0, 0, 0, 0, 0]], jnp.int32)
    lens = jnp.asarray([6, 3])
    state: LookaheadState = proposer.init(ctx, target, (), prompt, lens, None, lens * 0)
    row0, row1 = _row(state.pool, 0), _row(state.pool, 1)
    assert _entries(row0, 1) == [(2, 3), (2, 4)]
    assert _entries(row0, 2) == [(3, 1)] and _entries(row0, 3) == [(1, 2)]
    assert _entries(row0, 4) == []  # "4" has no two tokens after it inside the prompt
    assert _entries(row1, 9) == [(8, 7)] and _entries(row1, 1) == []
    assert np.asarray(state.tail).tolist() == [[2, 4], [8, 7]]
    view = StepInput(pstate=state, root=jnp.asarray([1, 9]), lengths=lens,
                     active=jnp.asarray([True, True]))  # fmt: skip
    draft, _ = proposer.propose(ctx, target, (), view, None)
    tokens, valid = np.asarray(draft.tokens), np.asarray(draft.valid)
    # Row 0: both continuations of "1", most recent first, sharing the node "2".
    assert tokens[0].tolist() == [1, 2, 4, 2, 3] and valid[0].tolist() == [1, 1, 1, 0, 1]
    assert np.asarray(draft.topology.parents)[0].tolist() == [-1, 0, 1, 0, 1]
    # Row 1: one continuation of "9".
    assert tokens[1, :3].tolist() == [9, 8, 7] and valid[1].tolist() == [1, 1, 1, 0, 0]


def test_one_compile_per_bucket(target, prompts):
    cfg = {"method": "lookahead", **SMALL}
    sj.generate(target, prompts, MAX_NEW, speculative_config=cfg)
    before = engine.trace_count()
    sj.generate(target, prompts[::-1], MAX_NEW - 7, speculative_config=cfg)  # same buckets
    assert engine.trace_count() == before


@pytest.mark.parametrize(
    "extra,match",
    [
        ({"lookahead_window": 0}, r"lookahead_window'\]=0"),
        ({"ngram_size": 1}, r"ngram_size'\]=1"),
        ({"max_candidates": 0}, r"max_candidates'\]=0"),
        ({"seed_pool_from_prompt": "yes"}, r"seed_pool_from_prompt'\]='yes' must be True"),
        ({"num_speculative_tokens": 4, "ngram_size": 3}, r"does not match .* = 2"),
        ({"lookahead_advance": "two"}, r"lookahead_advance'\]='two' is invalid"),
        ({"model": "x"}, r"'model'\] must be unset for method='lookahead'"),
        ({"draft_tree": "eagle1_25"}, r"'draft_tree'\] is not used by method='lookahead'"),
        ({"verification": "probabilistic"}, r"method='lookahead' drafts deterministically"),
        ({"verification": "typical", "allow_lossy": True}, r"not available with method='look"),
        ({"max_candidates": 200, "ngram_size": 9}, r"candidate trie has 1601 nodes"),
        (
            {"lookahead_window": 100, "ngram_size": 6, "max_candidates": 4},
            r"forward would hold 521 nodes",
        ),
    ],
)
def test_bad_configs_refused_by_name(extra, match):
    raw = {"method": "lookahead", **extra}
    with pytest.raises(ValueError, match=match):
        spec_config.parse(raw, temperature=1.0)


def test_lookahead_keys_refused_for_other_methods():
    with pytest.raises(ValueError, match=r"\['ngram_size'\] are lookahead's"):
        spec_config.parse({"method": "ngram", "num_speculative_tokens": 2, "ngram_size": 3},
                          temperature=0.0)  # fmt: skip


def test_auto_verification_and_defaults():
    greedy = spec_config.parse({"method": "lookahead"}, temperature=0.0)
    sampled = spec_config.parse({"method": "lookahead"}, temperature=0.7)
    assert (greedy.verification, sampled.verification) == ("greedy", "one_hot")
    W, N, G = spec_config.lookahead_defaults()
    assert (greedy.lookahead_window, greedy.ngram_size, greedy.max_candidates) == (W, N, G)
    assert greedy.tree == NgramTrie(G, N - 1) and greedy.is_dynamic
