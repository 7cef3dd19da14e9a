"""Speculative sampling keeps the target's law: chi-square against the exact law.

A tiny target (V=32, logits scaled up so its distributions are peaked) and a partly agreeing
draft (the target with noise on its second layer, sum min(p, q) about 0.5-0.7). One prompt is
repeated over 4096 rows with per-row seeds; 25 calls give 102,400 samples of the first
generated tokens. With max_new_tokens=4 and two drafts per step, x2 is the verifier's output at
depth 1 and x3 (when x2 was accepted) at depth 2, so the test covers both levels.

Exact law: x1 ~ p(. | prompt), x2 ~ p(. | prompt, x1), x3 ~ p(. | prompt, x1, x2), each the
target's *processed* distribution (`specjax.sampling.processed_probs`), computed by brute force
over all V and V^2 contexts. The joints (x1, x2) and (x2, x3) (x1 summed out) are tested, cells
with an expected count below 5 pooled; p > 1e-3 passes. A verifier whose rejection residual
is replaced by the target's distribution fails the same test with p < 1e-6.

Runtime: one compile and 25 batched calls per case; the broken verifier one compile, 5 calls.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

import specjax as sj
from specjax import sampling as sp
from specjax.cache import KVCache
from specjax.decoding import engine
from specjax.decoding import verify as vf

# Running 102,400 samples a case, not compiling, is this module's time: XLA's full
# optimizations (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("optimized_xla")

CONFIG = sj.ModelConfig(
    vocab_size=32,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=8,
    intermediate_size=32,
    max_position_embeddings=64,
)
V = CONFIG.vocab_size
ROWS, CALLS = 4096, 25  # 102,400 samples per case
MAX_NEW = 4  # x1 from prefill, x2..x4 from one to three speculative steps
P_PASS, P_BROKEN = 1e-3, 1e-6
TOP_K = sj.SamplingParams(temperature=0.7, top_k=8)
TOP_P = sj.SamplingParams(temperature=1.0, top_p=0.9)


def _edit(model: sj.Decoder, fn) -> sj.Decoder:
    copy = nnx.clone(model)
    fn(copy)
    return copy


def _scale_head(m, factor=20.0):
    m.lm_head.kernel[...] = m.lm_head.kernel[...] * factor  # logits of std ~1.6: peaked laws


def _perturb_layer1(m, scale=0.04, seed=1):
    key = jax.random.key(seed)
    layer = m.layers[1]
    for owner, names in (
        (layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
        (layer.mlp, ("gate_proj", "up_proj", "down_proj")),
    ):
        for name in names:
            kernel = getattr(owner, name).kernel
            key, sub = jax.random.split(key)
            kernel[...] = kernel[...] + scale * jax.random.normal(sub, kernel[...].shape)


@functools.partial(jax.jit, static_argnums=0)
def _last_logits_jit(graphdef, state, contexts):
    model = nnx.merge(graphdef, state)
    c, t = contexts.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (c, t))  # [C, T]
    cache = KVCache.for_model(model.config, c, t)
    return model(contexts, positions, cache).logits[:, -1]  # [C, V]


def _last_logits(model: sj.Decoder, contexts: np.ndarray) -> jax.Array:
    """Logits after each context (one causal forward): contexts [C, T] -> [C, V]."""
    graphdef, state = nnx.split(model)
    return _last_logits_jit(graphdef, state, jnp.asarray(contexts, jnp.int32))


@pytest.fixture(scope="module")
def pair():
    target = _edit(sj.Decoder(CONFIG, seed=0), _scale_head)
    draft = _edit(target, _perturb_layer1)
    return target, draft


@pytest.fixture(scope="module")
def heads(pair):
    """Medusa heads on the target: identity blocks plus noise, the target's LM head."""
    from tests.decoding.test_medusa import noisy_heads

    return noisy_heads(pair[0], num_heads=2, scale=0.5)


@pytest.fixture(scope="module")
def eagle(pair):
    """Untrained EAGLE-1 and EAGLE-3 drafters on the target (random layers)."""
    return {m: sj.EagleHead.for_target(pair[0], method=m, seed=2) for m in ("eagle", "eagle3")}


@pytest.fixture(scope="module")
def prompt():
    """12 random tokens: about a third of the vocabulary, so ngram finds a match for many x1."""
    return np.random.default_rng(0).integers(0, V, 12).tolist()


def _laws(target, draft, prompt, depth: int) -> dict:
    """{sampling: (joint laws of consecutive tokens, alpha)} by brute force over V^k contexts.

    laws[0] is the law of (x1, x2), laws[1] of (x2, x3) (x1 summed out), ... up to x_{depth+1}.
    """
    ctx = [np.asarray(prompt)[None]]  # [1, T]
    for _ in range(depth):
        prev = ctx[-1]
        n = prev.shape[0]
        ctx.append(
            np.concatenate([np.repeat(prev, V, 0), np.tile(np.arange(V), n)[:, None]], 1)
        )  # [V^k, T + k]: all continuations, the last token varying fastest
    logits = [_last_logits(target, c) for c in ctx]
    out = {}
    for params in (TOP_K, TOP_P):
        probs = [np.asarray(sp.processed_probs(lg, params), np.float64) for lg in logits]
        # prefix[k] [V^k]: probability of each k-token continuation.
        prefix = [np.ones(1)]
        for k in range(depth):
            prefix.append((prefix[-1][:, None] * probs[k]).reshape(-1))
        laws = []
        for k in range(depth):  # law of (x_{k+1}, x_{k+2})
            joint = (prefix[k + 1][:, None] * probs[k + 1]).reshape(-1, V, V).sum(0)  # [V, V]
            laws.append(joint / joint.sum())
        q2 = np.asarray(sp.processed_probs(_last_logits(draft, ctx[1]), params), np.float64)
        alpha = float(probs[0][0] @ np.minimum(probs[1], q2).sum(-1))  # E[sum min(p, q)] at x2
        out[params] = (laws, alpha)
    return out


@pytest.fixture(scope="module")
def exact_laws(pair, prompt):
    """Laws of (x1, x2), (x2, x3), (x3, x4): x4 is often drawn by a later speculative step."""
    return _laws(*pair, prompt, depth=3)


def _chi2_pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    """Chi-square goodness of fit; cells expected below 5 are pooled into one."""
    counts, law = counts.ravel().astype(np.float64), law.ravel()
    if np.any(counts[law == 0] > 0):
        return 0.0  # a token the target's processed law forbids
    expected = law * counts.sum()
    big = expected >= 5
    obs, exp = list(counts[big]), list(expected[big])
    if expected[~big].sum() > 0:
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def _sample(target, prompt, params, cfg, calls=CALLS):
    """Counts of consecutive pairs (x1, x2), (x2, x3), (x3, x4) over ROWS * calls rows.

    Returns (counts [3, V, V], accepted drafts, offered drafts, rows that took >= 2 steps).
    """
    counts = np.zeros((MAX_NEW - 1, V, V), np.int64)
    accepted = drafted = later = 0
    for call in range(calls):
        seeds = list(range(call * ROWS, (call + 1) * ROWS))
        out = sj.generate(
            target, [prompt] * ROWS, MAX_NEW, params, [], speculative_config=cfg, seeds=seeds
        )
        toks = np.asarray(out.tokens)  # [ROWS, MAX_NEW]
        for k in range(MAX_NEW - 1):
            np.add.at(counts[k], (toks[:, k], toks[:, k + 1]), 1)
        accepted += out.stats["accepted_tokens"]
        drafted += out.stats["draft_tokens"]
        later += int(np.sum(np.asarray(out.stats["row_steps"]) >= 2))
    return counts, accepted, drafted, later


def _cfg(method: str, mode: str, draft, heads=None, eagle=None) -> dict:
    if method.startswith("eagle"):
        kind, tree = method.split("_")
        cfg = {"method": kind, "model": eagle[kind], "num_speculative_tokens": 2,
               "verification": mode}  # fmt: skip
        if tree == "dynamic":
            cfg["draft_tree"] = {"dynamic": {"top_k": 3, "total_tokens": 6}}
        return cfg
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": 2, "verification": mode}
    if method == "lookahead":  # candidates from the prompt-seeded pool and the Jacobi window
        return {"method": "lookahead", "lookahead_window": 3, "ngram_size": 3,
                "max_candidates": 3, "verification": mode}  # fmt: skip
    if method.startswith("medusa"):
        cfg = {"method": "medusa", "model": heads, "num_speculative_tokens": 2,
               "verification": mode}  # fmt: skip
        if method == "medusa_tree":
            cfg["draft_tree"] = "small_2x3"
        return cfg
    cfg = {
        "method": "draft_model",
        "model": draft,
        "num_speculative_tokens": 2,
        "verification": mode,
    }
    if method == "tree":
        cfg["draft_tree"] = "small_2x3"  # 3 root children, 2 under the first: depth 2
    return cfg


# Every rule, every proposer family and both sampling settings, in six compiled programs
# (~20-30 s of CPU each). `pytest -m slow` runs every other (method, mode) pair once, under one
# of the two filters (2026-12-03: the second filter of a pair left the slow set for CI time).
CASES = [
    ("chain", "probabilistic", TOP_P),
    ("chain", "strict", TOP_K),
    ("ngram", "one_hot", TOP_K),
    ("medusa_tree", "one_hot", TOP_P),  # each head's top-k: zero and renormalise
    ("eagle3_dynamic", "one_hot", TOP_K),  # EAGLE-2's tree: per-row topology as data
    ("lookahead", "one_hot", TOP_P),  # a per-step trie plus window cells in one forward
]
SLOW_CASES = [
    ("tree", "probabilistic", TOP_K),  # i.i.d. siblings: the SpecInfer residual chain
    ("medusa_chain", "probabilistic", TOP_K),  # sampled from each head's processed law
    ("eagle_chain", "probabilistic", TOP_P),  # sampled from the drafter's processed law
    ("chain", "one_hot", TOP_K),
    ("tree", "one_hot", TOP_K),  # top-k siblings: zero and renormalise
    ("tree", "strict", TOP_P),
    ("ngram", "strict", TOP_K),
    ("medusa_chain", "one_hot", TOP_K),
    ("medusa_chain", "strict", TOP_P),
    ("medusa_tree", "probabilistic", TOP_P),  # i.i.d. siblings from one head's law
    ("eagle3_chain", "probabilistic", TOP_K),
    ("eagle_dynamic", "strict", TOP_P),
    ("lookahead", "strict", TOP_P),
]


@pytest.mark.parametrize(
    "method,mode,params",
    CASES + [pytest.param(*c, marks=pytest.mark.slow) for c in SLOW_CASES],
    ids=[f"{m}-{v}-T{s.temperature}" for m, v, s in CASES + SLOW_CASES],
)
def test_first_tokens_follow_target_law(
    pair, heads, eagle, prompt, exact_laws, method, mode, params
):
    target, draft = pair
    laws, alpha = exact_laws[params]
    assert 0.3 < alpha < 0.9  # the draft is neither the target nor unrelated
    cfg = _cfg(method, mode, draft, heads, eagle)
    counts, accepted, drafted, later = _sample(target, prompt, params, cfg)
    assert counts[0].sum() >= 100_000
    # Both branches of the walk ran many times: acceptances and rejections.
    assert accepted > 1000 and drafted - accepted > 1000, (accepted, drafted)
    # x4 comes from a second (or third) step, after a rejection and rollback, in many rows.
    assert later > 10_000, later
    pvalues = [_chi2_pvalue(c, law) for c, law in zip(counts, laws, strict=True)]
    assert min(pvalues) > P_PASS, pvalues


def test_broken_verifier_fails_the_same_test(pair, prompt, exact_laws, monkeypatch):
    """Rejections resampled from p instead of norm(max(p - q, 0)) over-weight the draft's picks.

    The same sampler and statistic as above on a fifth of the samples (20,480) is already
    far past the threshold: the test has power to spare.
    """
    target, draft = pair
    law12 = exact_laws[TOP_P][0][0]

    def broken(r, q, x, mode):
        return vf._normalize(r.astype(jnp.float32), r)  # the target's law, not the residual

    monkeypatch.setattr(vf, "reject_update", broken)
    engine._generate_jit.clear_cache()  # the correct program is cached under the same key
    try:
        before = engine.trace_count()
        cfg = _cfg("chain", "probabilistic", draft)
        counts, _, _, _ = _sample(target, prompt, TOP_P, cfg, calls=CALLS // 5)
        assert engine.trace_count() == before + 1  # the broken walk was really traced
    finally:
        monkeypatch.undo()
        engine._generate_jit.clear_cache()  # no later call may reuse the broken program
    assert _chi2_pvalue(counts[0], law12) < P_BROKEN


# --------------------------------------------------------------------- tight buckets


@pytest.fixture(scope="module")
def tight_prompt():
    """16 tokens: the prompt fills its bucket, so a 43-node block runs at the end of the cache."""
    return np.random.default_rng(1).integers(0, V, 16).tolist()


@pytest.mark.slow  # a 43-node block for 102,400 rows: minutes of CPU (`.ci/run` runs it)
def test_wide_tree_law_in_tight_buckets(pair, tight_prompt):
    """A top-k tree of 6 x 6 children (43 nodes) right after a 16-token prompt, whose block
    reaches past what a cache sized for the longest commit would hold: the law of x1..x4 stays
    the target's. (Few rows reach the affected nodes within four tokens, so this test has
    little power against the overrun itself; the greedy tests in test_tight_buckets.py fail
    without the fix.)"""
    target, draft = pair
    laws, _ = _laws(target, draft, tight_prompt, depth=3)[TOP_K]
    cfg = {"method": "draft_model", "model": draft, "num_speculative_tokens": 2,
           "draft_tree": "topk_2x6", "verification": "one_hot"}  # fmt: skip
    counts, accepted, drafted, _ = _sample(target, tight_prompt, TOP_K, cfg)
    assert accepted > 1000 and drafted - accepted > 1000, (accepted, drafted)
    pvalues = [_chi2_pvalue(c, law) for c, law in zip(counts, laws, strict=True)]
    assert min(pvalues) > P_PASS, pvalues
