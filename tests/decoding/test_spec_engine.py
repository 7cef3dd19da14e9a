"""The speculative engine: batch invariance, the compile gate, stats, and exact KV rollback.

- A row's tokens at T>0 with its own seed are the same alone or in a batch (chain, tree, ngram).
- 50+ speculative steps with varying acceptance, and calls with other prompt lengths, budgets
  and seeds inside one bucket, trace the engine once.
- The stats agree with each other and with a per-step replay through `generate_stream`.
- After a rejection at draft position 3 of 5, the target's and the draft's committed K/V are
  exactly a fresh prefill of prefix + root + the 2 accepted drafts, and stale slots (poisoned
  with NaN and huge values) change nothing in the next step. The same for a tree path.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.cache import KVCache
from specjax.decoding import engine

VOCAB = 32
SEEDS = [11, 222, 3333, 44444]
LENGTHS = (6, 13, 2, 9)


def _perturbed(model: sj.Decoder, scale: float, seed: int = 1) -> sj.Decoder:
    """A copy of `model` with Gaussian noise of `scale` added to its second layer's kernels."""
    copy = nnx.clone(model)
    layer = copy.layers[1]
    key = jax.random.key(seed)
    owners = [layer.self_attn] * 4 + [layer.mlp] * 3
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for owner, name in zip(owners, names, strict=True):
        kernel = getattr(owner, name).kernel
        key, sub = jax.random.split(key)
        kernel[...] = kernel[...] + scale * jax.random.normal(sub, kernel[...].shape)
    return copy


@pytest.fixture(scope="module")
def partial(target):
    """Agrees with the target on roughly half of the greedy tokens."""
    return _perturbed(target, 0.005)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(9)
    return [rng.integers(0, VOCAB, n).tolist() for n in LENGTHS]


def _configs(draft):
    return {
        "chain": {"method": "draft_model", "model": draft, "num_speculative_tokens": 3},
        "tree": {
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": 2,  # the tree's depth (a disagreement is refused)
            "draft_tree": {"depth": 2, "width": 2},
        },
        "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1},
    }


# --------------------------------------------------------------------- batch invariance


@pytest.mark.parametrize("method", ["chain", pytest.param("tree", marks=pytest.mark.slow), "ngram"])
def test_row_alone_equals_row_in_batch(target, partial, prompts, method):
    sampling = sj.SamplingParams(temperature=1.0, top_k=12)
    cfg = _configs(partial)[method]
    batch = sj.generate(target, prompts, 20, sampling, speculative_config=cfg, seeds=SEEDS)
    # Rows really are sampled: different seeds give different rows for the same prompt.
    same_prompt = sj.generate(
        target, [prompts[0]] * 4, 20, sampling, speculative_config=cfg, seeds=SEEDS
    )
    assert len({tuple(t) for t in same_prompt.tokens}) > 1
    for i, (prompt, seed) in enumerate(zip(prompts, SEEDS, strict=True)):
        alone = sj.generate(target, [prompt], 20, sampling, speculative_config=cfg, seeds=[seed])
        assert alone.tokens[0] == batch.tokens[i], f"row {i}"
        assert alone.stats["row_accepted_tokens"][0] == batch.stats["row_accepted_tokens"][i]
        assert alone.stats["row_steps"][0] == batch.stats["row_steps"][i]
    # A chain offers position i exactly when its i-th draft token is valid (ngram: matched, and
    # within the budget), so the per-position counts sum to the drafted tokens, which the engine
    # counts separately, row by row.
    if method != "tree":
        stats = batch.stats
        assert sum(stats["offered_by_position"]) == stats["draft_tokens"] > 0
        offered = np.asarray(stats["offered_by_position"])
        assert np.all(np.diff(offered) <= 0)


# ---------------------------------------------------------------------------- compile gate


def test_one_compile_for_many_steps_and_calls(target):
    draft = _perturbed(target, 0.01)  # accepts about 40% of greedy drafts
    cfg = {"method": "draft_model", "model": draft, "num_speculative_tokens": 2}
    rng = np.random.default_rng(4)
    calls = [(3, 110, 0), (16, 100, 1), (9, 70, 2), (12, 116, 3)]  # prompt len, budget, seed
    before = engine.trace_count()
    total_steps, max_steps, hists = 0, 0, []
    for n, max_new, seed in calls:
        prompt = rng.integers(0, VOCAB, n).tolist()
        sampling = sj.SamplingParams(temperature=0.0, seed=seed)
        out = sj.generate(target, [prompt, prompt[::-1]], max_new, sampling, speculative_config=cfg)
        assert out.stats["generated_tokens"] == [max_new, max_new]
        total_steps += out.stats["steps"]
        max_steps = max(max_steps, out.stats["steps"])
        hists.append(out.stats["acceptance_by_position"])
    assert engine.trace_count() - before <= 1  # at most the first call traces
    assert total_steps >= 150 and max_steps >= 50
    # Varying acceptance: some steps take none, some one, some both drafts.
    first, second = np.mean([h[0] for h in hists]), np.mean([h[1] for h in hists])
    assert 0.1 < second < first < 0.95
    again = engine.trace_count()
    sj.generate(target, [[1, 2, 3]], 5, speculative_config=cfg)  # another bucket: one compile
    assert engine.trace_count() - again == 1


# ----------------------------------------------------------------------------------- stats


def _check_stats(stats: dict, k: int) -> None:
    steps = np.asarray(stats["row_steps"])
    acc = np.asarray(stats["row_accepted_tokens"])
    drafted = np.asarray(stats["row_draft_tokens"])
    total = steps.sum()
    assert acc.sum() == stats["accepted_tokens"] > 0
    assert drafted.sum() == stats["draft_tokens"] >= stats["accepted_tokens"]
    assert stats["steps"] == steps.max()
    assert stats["mean_accepted_length"] == pytest.approx((acc.sum() + total) / total)
    assert stats["acceptance_rate"] == pytest.approx(acc.sum() / drafted.sum())
    # No stop ids: every step emits its accepted drafts plus one token, and prefill one.
    assert stats["generated_tokens"] == (1 + acc + steps).tolist()
    uncond = np.asarray(stats["acceptance_by_position"])
    cond = np.asarray(stats["conditional_acceptance_by_position"])
    offered = np.asarray(stats["offered_by_position"])
    reached = np.asarray(stats["reached_by_position"])
    at_least = np.asarray(stats["accepted_by_position"])
    assert uncond.shape == cond.shape == offered.shape == (k,)
    # Counts: a deeper position is offered no more often; accepting >= i needs i offered and
    # >= i - 1 accepted; sum_i #(accepted >= i) = accepted drafts.
    assert np.all(np.diff(offered) <= 0) and offered[0] <= total
    assert np.all(at_least <= reached) and np.all(reached <= offered)
    assert reached[0] == offered[0] and at_least.sum() == acc.sum()
    np.testing.assert_allclose(uncond, at_least / offered)
    np.testing.assert_allclose(cond, at_least / reached)
    assert np.all(np.diff(uncond) <= 1e-12) and np.all(uncond <= cond + 1e-12)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stats_match_a_per_step_replay(target, partial, prompts, temperature):
    """generate's stats equal the stats recomputed from generate_stream's per-step emissions."""
    k, max_new = 3, 30
    cfg = _configs(partial)["chain"]
    sampling = sj.SamplingParams(temperature=temperature, seed=5)
    out = sj.generate(target, prompts, max_new, sampling, stop_token_ids=[], speculative_config=cfg)
    _check_stats(out.stats, k)
    chunks = list(
        sj.generate_stream(
            target, prompts, max_new, sampling, stop_token_ids=[], speculative_config=cfg
        )
    )
    replay = [sum((c[b] for c in chunks), []) for b in range(len(prompts))]
    assert replay == out.tokens
    emitted = np.array([[len(c[b]) for b in range(len(prompts))] for c in chunks[1:]])  # [T, B]
    room = max_new - 1 - np.cumsum(emitted, axis=0) + emitted  # [T, B] budget before each step
    active = emitted > 0
    accepted = np.where(active, emitted - 1, 0)
    offered = np.where(active, np.minimum(k, room - 1), 0)
    assert out.stats["row_steps"] == active.sum(0).tolist()
    assert out.stats["row_accepted_tokens"] == accepted.sum(0).tolist()
    assert out.stats["row_draft_tokens"] == offered.sum(0).tolist()
    # Position i is offered at a step iff the row was active with room for i drafts + 1.
    offered_i = [(active & (room - 1 >= i)).sum() for i in range(1, k + 1)]
    reached_i = [(active & (room - 1 >= i) & (accepted >= i - 1)).sum() for i in range(1, k + 1)]
    at_least = [(accepted[active] >= i).sum() for i in range(1, k + 1)]
    assert out.stats["offered_by_position"] == offered_i
    assert out.stats["reached_by_position"] == reached_i
    assert out.stats["accepted_by_position"] == at_least
    np.testing.assert_allclose(
        out.stats["acceptance_by_position"], np.array(at_least) / np.array(offered_i)
    )
    np.testing.assert_allclose(
        out.stats["conditional_acceptance_by_position"], np.array(at_least) / np.array(reached_i)
    )


def test_stats_tree_and_stop(target, partial, prompts):
    """Tree stats: every node counts as offered; a stop id ends emission, not the counters."""
    cfg = _configs(partial)["tree"]  # 6 nodes, depth 2
    out = sj.generate(target, prompts, 20, stop_token_ids=[], speculative_config=cfg)
    _check_stats(out.stats, 2)
    assert np.all(
        np.asarray(out.stats["row_draft_tokens"]) <= 6 * np.asarray(out.stats["row_steps"])
    )
    stop = out.tokens[1][4]
    cut = sj.generate(target, prompts, 20, stop_token_ids=[stop], speculative_config=cfg)
    for full, short in zip(out.tokens, cut.tokens, strict=True):
        end = full.index(stop) + 1 if stop in full else len(full)
        assert short == full[:end]


# -------------------------------------------------------------------------- KV rollback


def _prefill_kv(model: sj.Decoder, tokens: list[int], max_len: int) -> KVCache:
    """A fresh prefill of `tokens` in a batch of one."""
    cache = KVCache.for_model(model.config, 1, max_len)
    ids = jnp.asarray([tokens], jnp.int32)  # [1, T]
    pos = jnp.arange(len(tokens), dtype=jnp.int32)[None]  # [1, T]
    return model(ids, pos, cache).cache


def _leaves_rank0(draft: sj.Decoder, tokens: list[int], root: int) -> bool:
    """Whether tokens[root+1:] differ from the draft's greedy choice somewhere (not rank 0)."""
    logits = draft(
        jnp.asarray([tokens], jnp.int32),
        jnp.arange(len(tokens), dtype=jnp.int32)[None],
        KVCache.for_model(draft.config, 1, len(tokens)),
    ).logits[0]  # [T, V]
    greedy = np.asarray(jnp.argmax(logits, axis=-1))  # [T] greedy choice after each position
    return any(greedy[i] != tokens[i + 1] for i in range(root, len(tokens) - 1))


def _poison(cache: KVCache) -> KVCache:
    """NaN / huge values in every slot at or after each row's committed length."""
    slots = jnp.arange(cache.max_len)[None, :]  # [1, S]
    stale = (slots >= cache.lengths[:, None])[None, :, None, :, None]  # [1, B, 1, S, 1]
    junk = jnp.where(jnp.arange(cache.k.shape[-1]) % 2 == 0, jnp.nan, 1e30)  # [H]
    return cache.replace(
        k=jnp.where(stale, junk, cache.k).astype(cache.k.dtype),
        v=jnp.where(stale, junk, cache.v).astype(cache.v.dtype),
    )


def _copy(tree):
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


@pytest.mark.parametrize(
    "tree,noise", [(None, 0.005), ({"depth": 3, "width": 2}, 0.02)], ids=["chain5", "tree3x2"]
)
def test_kv_rollback_is_exact(target, tree, noise):
    """10-token prefix, a rejection at draft position 3: the caches hold prefix + root + 2.

    The tree's draft is noisier so that paths through rank-1 siblings are common.
    """
    partial = _perturbed(target, noise)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, VOCAB, 10).tolist() for _ in range(64)]
    cfg = {"method": "draft_model", "model": partial, "num_speculative_tokens": 5}
    if tree is not None:
        cfg.update(draft_tree=tree, num_speculative_tokens=tree["depth"])
    model, rows, static, params, args = engine._setup(target, prompts, 16, None, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)
    state = engine._step_jit(static, params, state)
    accepted = np.asarray(state.accepted)
    picked = np.flatnonzero(accepted == 2)
    assert len(picked) >= 2, np.bincount(accepted)
    out, lengths = np.asarray(state.out), np.asarray(state.cache.lengths)
    if tree is not None:
        # Check paths that leave the draft's rank-0 branch: commit really gathers K/V there.
        picked = [b for b in picked if _leaves_rank0(partial, prompts[b] + out[b, :3].tolist(), 10)]
        assert picked, "no accepted path left the rank-0 branch"
    draft_cache = state.proposer.cache
    for b in picked[:4]:
        committed = prompts[b] + out[b, :3].tolist()  # prefix, root, two accepted drafts
        assert lengths[b] == 13 and int(draft_cache.lengths[b]) == 13
        for module, cache in ((target, state.cache), (partial, draft_cache)):
            fresh = _prefill_kv(module, committed, 16)
            for got, want in ((cache.k, fresh.k), (cache.v, fresh.v)):
                np.testing.assert_allclose(
                    np.asarray(got[:, b, :, :13]),
                    np.asarray(want[:, 0, :, :13]),
                    atol=2e-6,
                    rtol=1e-5,
                )
    # The next step reads only committed slots: poisoning the stale ones changes nothing.
    poisoned = state.replace(
        cache=_poison(state.cache),
        proposer=state.proposer.replace(cache=_poison(state.proposer.cache)),
    )
    clean = engine._step_jit(static, params, _copy(state))
    dirty = engine._step_jit(static, params, poisoned)
    np.testing.assert_array_equal(np.asarray(clean.out), np.asarray(dirty.out))
    np.testing.assert_array_equal(np.asarray(clean.accepted), np.asarray(dirty.accepted))
    assert np.all(np.isfinite(np.asarray(clean.cache.k)))
