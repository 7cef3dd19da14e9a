"""Medusa decoding: lossless at T=0 and T>0 through the one verifier; bad configs refused.

The heads here are untrained (identity blocks, the target's LM head) with small random blocks
added, so their drafts agree with the target part of the time: greedy output must equal plain
greedy decoding whatever they propose, for chains and sparse trees, in a ragged batch and in
tight buckets. The T>0 law of Medusa's one-hot verification is tested in
test_spec_distribution.py; this file checks what is Medusa's own: the drafted tokens are
the heads' top-k at the last accepted node's feature, typical acceptance is lossy and says so,
compile counts, and every refusal by name before compiling.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.cache import KVCache
from specjax.decoding import engine
from specjax.decoding.proposers import StepInput

VOCAB = 32
MAX_NEW = 24
LENGTHS = (5, 11, 3, 14)


def noisy_heads(target, num_heads=4, scale=0.3, seed=0, **options) -> sj.MedusaHeads:
    """Untrained heads with random blocks: their drafts differ from the identity's."""
    heads = sj.MedusaHeads.for_target(target, num_heads=num_heads, **options)
    key = jax.random.key(seed)
    w = heads.w[...]
    heads.w[...] = scale * jax.random.normal(key, w.shape) / np.sqrt(w.shape[-1])
    return heads


@pytest.fixture(scope="module")
def heads(target):
    return noisy_heads(target)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, n).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def reference(target, prompts):
    return sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens


def _medusa(heads, k=4, **extra):
    return {"method": "medusa", "model": heads, "num_speculative_tokens": k, **extra}


def _first_draft(target, prompts, cfg, sampling=None, seed=0):
    """(static, prefill state, Draft): the block the proposer offers right after prefill."""
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, sampling, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)
    view = StepInput(state.proposer, state.last, state.cache.lengths, ~state.done)
    module = nnx.merge(static.graphdef, params[0])
    key = jax.random.split(jax.random.key(seed), len(prompts))
    draft = static.spec.proposer.propose(static.context, module, params[1], view, key)[0]
    return static, state, draft


@pytest.mark.parametrize(
    "k,tree", [(4, None), (2, None), (4, "mc_sim_7b_63"), (3, "topk_3x2")],
    ids=["chain4", "chain2", "mc_sim_7b_63", "topk_3x2"],
)  # fmt: skip
def test_greedy_equals_autoregressive(target, heads, prompts, reference, k, tree):
    extra = {} if tree is None else {"draft_tree": tree}
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_medusa(heads, k, **extra))  # fmt: skip
    assert out.tokens == reference
    s = out.stats
    assert s["method"] == "medusa" and s["lossy"] is False
    assert 0 < s["accepted_tokens"] < s["draft_tokens"], (s["accepted_tokens"], s["draft_tokens"])
    assert len(s["acceptance_by_position"]) == (
        k if tree is None else 3 if tree == "topk_3x2" else 4
    )


def test_tight_buckets(target, heads):
    """Prompts as long as their bucket, max_new_tokens = its bucket, a 64-node tree."""
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, VOCAB, n).tolist() for n in (16, 7)]
    ref = sj.generate(target, rows, 16, stop_token_ids=[]).tokens
    out = sj.generate(target, rows, 16, stop_token_ids=[],
                      speculative_config=_medusa(heads, 4, draft_tree="mc_sim_7b_63"))  # fmt: skip
    assert out.tokens == ref


def test_drafts_are_each_heads_top_k_at_the_feature(target, heads, prompts):
    """Node (depth d, rank r) holds head d-1's r-th token at the root's feature, which after
    prefill is the target's last_hidden at the last prompt token."""
    cfg = _medusa(heads, 3, draft_tree="topk_3x2")
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, None, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)

    @jax.jit
    def draft_tokens(p, s):
        view = StepInput(s.proposer, s.last, s.cache.lengths, ~s.done)
        module = nnx.merge(static.graphdef, p[0])
        return static.spec.proposer.propose(static.context, module, p[1], view, None)[0].tokens

    tokens = np.asarray(draft_tokens(params, state))  # [B, 15]
    graphdef, state_t = nnx.split(target)

    @jax.jit
    def head_logits(p, ids):  # ids [1, T] -> [K, V] at the last position
        model = nnx.merge(graphdef, p)
        T = ids.shape[1]
        out = model(ids, jnp.arange(T)[None], KVCache.for_model(model.config, 1, T))
        return heads(out.last_hidden[0, -1])

    tree = static.spec.tree
    for b, prompt in enumerate(prompts):
        logits = np.asarray(head_logits(state_t, jnp.asarray([prompt], jnp.int32)))
        for j in range(1, tree.num_nodes):
            d, r = int(tree.depth[j]), int(tree.rank[j])
            ranked = np.argsort(-logits[d - 1], kind="stable")
            assert tokens[b, j] == ranked[r], (b, j)


def test_one_compile_per_bucket(target, heads, prompts):
    cfg = _medusa(heads, 4, draft_tree="mc_sim_7b_63")
    sj.generate(target, prompts, MAX_NEW, speculative_config=cfg)
    before = engine.trace_count()
    sj.generate(target, prompts[:3], MAX_NEW - 5, speculative_config=cfg)  # same buckets
    other = noisy_heads(target, seed=5)  # same shapes: the heads are data
    sj.generate(
        target,
        [p[::-1] for p in prompts],
        MAX_NEW,
        speculative_config=_medusa(other, 4, draft_tree="mc_sim_7b_63"),
    )
    assert engine.trace_count() == before


def test_typical_is_lossy_and_says_so(target, heads, prompts):
    t1 = sj.SamplingParams(temperature=1.0, seed=1)
    before = engine.trace_count()
    with pytest.raises(ValueError, match=r"'typical' is lossy.*allow_lossy=True"):
        sj.generate(
            target, prompts, 8, t1, speculative_config=_medusa(heads, verification="typical")
        )
    assert engine.trace_count() == before
    cfg = _medusa(heads, draft_tree="mc_sim_7b_63", verification="typical", allow_lossy=True)
    out = sj.generate(target, prompts, 8, t1, speculative_config=cfg)
    assert out.stats["lossy"] is True
    lossless = sj.generate(target, prompts, 8, t1, speculative_config=_medusa(heads))
    assert lossless.stats["lossy"] is False


# -------------------------------------------------------------------------- refusals


def _refused(target, cfg, match, exc=ValueError):
    before = engine.trace_count()
    with pytest.raises(exc, match=match):
        sj.generate(target, [[1, 2, 3]], 8, speculative_config=cfg)
    assert engine.trace_count() == before, "an invalid config reached the compiler"


def test_more_heads_than_stored(target, heads):
    _refused(
        target,
        _medusa(heads, 5),
        r"num_speculative_tokens'\]=5 asks for more heads than the 4 stored",
    )


def test_tree_deeper_than_the_heads_used(target, heads):
    _refused(target, _medusa(heads, 2, draft_tree="mc_sim_7b_63"),
             r"draft_tree'\] has depth 4, deeper than num_speculative_tokens=2")  # fmt: skip


def test_heads_of_another_target(target, tiny_config):
    wide = sj.Decoder(tiny_config.replace(hidden_size=48, head_dim=12), seed=0)
    _refused(target, _medusa(sj.MedusaHeads.for_target(wide), 2),
             "hidden_size=48, the target's hidden_size is 32")  # fmt: skip
    big_vocab = sj.Decoder(tiny_config.replace(vocab_size=40), seed=0)
    _refused(target, _medusa(sj.MedusaHeads.for_target(big_vocab), 2),
             "vocab_size=40, the target's vocab_size is 32")  # fmt: skip


def test_method_and_model_must_match(target, heads):
    _refused(target, _medusa(target, 2), "must be Medusa heads .* got Decoder")
    _refused(target, {"method": "draft_model", "model": heads, "num_speculative_tokens": 2},
             "must be a specjax Model, Decoder or checkpoint directory .* got MedusaHeads")  # fmt: skip


def test_heads_required(target):
    _refused(target, {"method": "medusa", "num_speculative_tokens": 2},
             r"\['model'\] is required for method='medusa'")  # fmt: skip


def test_auto_verification_and_sampled_drafts(target, heads, prompts):
    """T>0 defaults to one-hot on top-k drafts; `probabilistic` samples every node from its
    head's processed law and hands that law to the verifier (q(token) > 0, rows sum to 1)."""
    t1 = sj.SamplingParams(temperature=0.8, top_k=10)
    cfgs = {"auto": _medusa(heads, 2, draft_tree="small_2x3"),
            "sampled": _medusa(heads, 2, draft_tree="small_2x3", verification="probabilistic")}  # fmt: skip
    blocks = {}
    for name, cfg in cfgs.items():
        static, _, draft = _first_draft(target, prompts, cfg, t1)
        blocks[name] = (static, draft)
    static, draft = blocks["auto"]
    assert static.spec.config.verification == "one_hot" and draft.probs is None
    static, draft = blocks["sampled"]
    assert static.spec.config.verification == "probabilistic"
    q = np.asarray(draft.probs)[:, 1:]  # [B, P, V]
    tokens = np.asarray(draft.tokens)[:, 1:]  # [B, P]
    np.testing.assert_allclose(q.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.take_along_axis(q, tokens[..., None], -1) > 0)
    assert np.all((q > 0).sum(-1) <= 10)  # top-k applied to q exactly as to p
    # Siblings are i.i.d. draws from one head's law: nodes 1-3 share q.
    np.testing.assert_array_equal(q[:, 0], q[:, 2])


@pytest.mark.parametrize("k,tree", [(4, None), (3, "topk_3x2")], ids=["chain4", "topk_3x2"])
def test_a_draft_vocabulary_ranks_as_the_whole_vocabulary_does(target, prompts, k, tree):
    """Greedy drafts of truncated heads are ranked over the draft ids and mapped to target ids
    after; they must be the top-k of the [B, K, V] logits (-inf outside the map) that the
    heads' `__call__` returns, node for node, on a block with repeated logits (ties)."""
    token_map = np.array([0, 1, 2, 4, 5, 8, 11, 13, 19, 23, 29, 31])
    heads = noisy_heads(target, token_map=token_map)
    w = np.array(heads.lm_head[...])  # [K, D, Vd] or [D, Vd]: two draft ids tie everywhere
    w[..., 3] = w[..., 2]
    heads.lm_head[...] = jnp.asarray(w)
    cfg = _medusa(heads, k, **({"draft_tree": tree} if tree else {}))
    static, state, draft = _first_draft(target, prompts, cfg)
    t = static.spec.proposer.tree
    logits = heads(state.proposer.hidden, k)  # [B, K, V]
    _, top = jax.lax.top_k(logits, int(t.rank.max()) + 1)
    expected = np.asarray(top)[:, np.maximum(t.depth[1:] - 1, 0), t.rank[1:]]
    np.testing.assert_array_equal(np.asarray(draft.tokens)[:, 1:], expected)
    assert np.isin(expected, token_map).all()


def test_a_draft_vocabulary_drafts_only_its_ids_and_stays_lossless(target, prompts, reference):
    """Heads over 12 of the 32 ids (vLLM's token_map): greedy output still equals plain
    greedy decoding (chain and sparse tree), every drafted token is in the map, and sampled
    drafts hand the verifier a law with no mass outside it."""
    token_map = np.array([0, 1, 2, 4, 5, 8, 11, 13, 19, 23, 29, 31])
    heads = noisy_heads(target, token_map=token_map)
    for extra in ({}, {"draft_tree": "topk_3x2"}):
        k = 3 if extra else 4
        out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                          speculative_config=_medusa(heads, k, **extra))  # fmt: skip
        assert out.tokens == reference
        assert out.stats["draft_tokens"] > 0
    t1 = sj.SamplingParams(temperature=1.0)
    cfg = _medusa(heads, 2, draft_tree="small_2x3", verification="probabilistic")
    _, _, draft = _first_draft(target, prompts, cfg, t1, seed=1)
    q, tokens = np.asarray(draft.probs)[:, 1:], np.asarray(draft.tokens)[:, 1:]
    outside = np.setdiff1d(np.arange(VOCAB), token_map)
    assert np.isin(tokens, token_map).all()
    assert (q[..., outside] == 0).all()
    np.testing.assert_allclose(q.sum(-1), 1.0, atol=1e-5)
