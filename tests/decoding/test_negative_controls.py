"""Negative controls for the tree law check: a broken one-hot or strict walk fails it.

test_spec_distribution.py shows the lossless modes give the target's law end to end, and
its own control breaks the probabilistic residual on a chain. This file shows the same check
(its target, draft, prompt, sampler, chi-square statistic, thresholds and sample counts) also
catches a broken one-hot or strict verifier on a TREE: the draft model's "small_2x3" block,
three top-k children of the root and two under the first, so the first speculative step tests
up to three siblings in turn. Each broken variant is installed by monkeypatching the walk's
primitives in `specjax.decoding.verify` (nothing in the source changes) and the engine's
compiled program is dropped before and after, so the broken walk is really traced and no
later test reuses it.

- one_hot, residual not zeroed: after a sibling is rejected the running law keeps its mass
  (r <- r instead of r(x) <- 0, renormalised): a rejected sibling can still be drawn as the
  recovered token, and a later sibling is accepted w.p. p(x) instead of
  p(x) / (1 - p(rejected)).
- strict, acceptance against the node's law: each sibling is tested against a fresh y ~ p
  (the node's full law) instead of y ~ r (p with the rejected siblings removed), so the
  second sibling is accepted w.p. p(x2) instead of p(x2) / (1 - p(x1)); the recovered token
  is still drawn from the correctly zeroed r. On a chain this changes nothing (a node has
  one candidate, tested against its own law), so only a tree can show it.

Both broken walks fail on a fifth of the distribution tests' samples (20,480, the count of
their own control) with p < 1e-6 on (x1, x2) (observed: p = 0 in double precision for
one_hot, 8e-43 for strict). The correct walks pass the identical check at the full 102,400
samples (`-m slow`; p = 0.68, 0.48, 0.93 on the three joints for one_hot, 0.48, 0.64, 0.52
for strict). The pass is checked at the full count only: with these seeds the first 20,480
samples of the correct one-hot walk give p = 7.7e-4 on (x2, x3), below the 1e-3 threshold,
and the rest bring it back to 0.48: a fluctuation, the reason the law tests use 102,400.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax as sj
from specjax.decoding import engine
from specjax.decoding import verify as vf
from tests.decoding import test_spec_distribution as dist

# Running 102,400 samples a case, not compiling, is this module's time: XLA's full
# optimizations (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("optimized_xla")

TREE = "small_2x3"  # 3 root children, 2 under the first: depth 2
MODES = {"one_hot": dist.TOP_K, "strict": dist.TOP_P}  # the distribution tests' slow pairs


@pytest.fixture(scope="module")
def pair():
    target = dist._edit(sj.Decoder(dist.CONFIG, seed=0), dist._scale_head)
    return target, dist._edit(target, dist._perturb_layer1)


@pytest.fixture(scope="module")
def prompt():
    return np.random.default_rng(0).integers(0, dist.V, 12).tolist()


@pytest.fixture(scope="module")
def exact_laws(pair, prompt):
    return dist._laws(*pair, prompt, depth=3)


# ------------------------------------------------------------------------ broken walks


def _break_one_hot(monkeypatch):
    """one_hot rejections leave the running law as it was: the sibling keeps its mass."""
    correct = vf.reject_update

    def unzeroed(r, q, x, mode):
        if mode != "one_hot":
            return correct(r, q, x, mode)
        return vf._normalize(r.astype(jnp.float32), r)  # [..., V] r(x) not set to 0

    monkeypatch.setattr(vf, "reject_update", unzeroed)


def _break_strict(monkeypatch):
    """strict siblings are tested against y ~ p, the node's law, not y ~ r.

    r is carried without renormalisation (rejected siblings zeroed, the rest as in p), and the
    coin draws y over r plus one extra outcome holding the removed mass: y has p's law, and
    y landing on a rejected sibling rejects. The recovered token's draw (categorical on
    log r) renormalises, so it keeps the correct law of p with the siblings removed.
    """
    correct_update, correct_coin = vf.reject_update, vf._coin

    def zeroed_only(r, q, x, mode):
        if mode != "strict":
            return correct_update(r, q, x, mode)
        ids = jax.lax.broadcasted_iota(jnp.int32, r.shape, r.ndim - 1)  # [..., V]
        return jnp.where(ids == x[..., None], 0.0, r.astype(jnp.float32))  # [..., V]

    def fresh_sample(key, r, q, x, mode):  # one row: r [V], x []
        if mode != "strict":
            return correct_coin(key, r, q, x, mode)
        removed = jnp.maximum(1.0 - jnp.sum(r), 0.0)  # [] the rejected siblings' mass
        y = jax.random.categorical(key, jnp.log(jnp.append(r, removed)))  # [] y ~ p
        return y == x

    monkeypatch.setattr(vf, "reject_update", zeroed_only)
    monkeypatch.setattr(vf, "_coin", fresh_sample)


BREAKS = {"one_hot": _break_one_hot, "strict": _break_strict}


def _run(target, draft, prompt, mode, calls):
    """The distribution tests' sampler on the tree: counts [3, V, V] of (x1, x2) .. (x3, x4)."""
    cfg = dist._cfg("tree", mode, draft)
    assert cfg["draft_tree"] == TREE
    counts, accepted, drafted, _ = dist._sample(target, prompt, MODES[mode], cfg, calls=calls)
    # Both branches of the walk ran many times: acceptances and rejections.
    assert accepted > 1000 and drafted - accepted > 1000, (accepted, drafted)
    return counts


@pytest.mark.slow  # the exact-law fixture (~30 s) and a compile per mode: CI's slow run
@pytest.mark.parametrize("mode", list(BREAKS))
def test_broken_tree_verifier_fails_the_law_check(pair, prompt, exact_laws, monkeypatch, mode):
    target, draft = pair
    law12 = exact_laws[MODES[mode]][0][0]
    BREAKS[mode](monkeypatch)
    engine._generate_jit.clear_cache()  # the correct program may be cached under the same key
    try:
        before = engine.trace_count()
        counts = _run(target, draft, prompt, mode, calls=dist.CALLS // 5)
        assert engine.trace_count() == before + 1  # the broken walk was really traced
    finally:
        monkeypatch.undo()
        engine._generate_jit.clear_cache()  # no later call may reuse the broken program
    assert counts[0].sum() == dist.ROWS * (dist.CALLS // 5)
    pvalue = dist._chi2_pvalue(counts[0], law12)
    assert pvalue < dist.P_BROKEN, pvalue


@pytest.mark.slow  # one compile and 25 batched calls of 4096 rows per mode
@pytest.mark.parametrize("mode", list(BREAKS))
def test_correct_tree_verifier_passes_the_same_check(pair, prompt, exact_laws, mode):
    target, draft = pair
    laws, _ = exact_laws[MODES[mode]]
    counts = _run(target, draft, prompt, mode, calls=dist.CALLS)
    assert counts[0].sum() >= 100_000
    pvalues = [dist._chi2_pvalue(c, law) for c, law in zip(counts, laws, strict=True)]
    assert min(pvalues) > dist.P_PASS, pvalues
