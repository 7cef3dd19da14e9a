"""Tests for specjax.sampling: the processed distribution matches transformers' warpers,
greedy breaks ties towards the lowest id, samples follow the processed distribution, per-row
random streams are independent of the batch, and bad params are refused by name."""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specjax.sampling import (
    SamplingParams,
    greedy_argmax,
    processed_logprobs,
    processed_probs,
    row_keys,
    sample,
    step_key,
)

B, V = 4, 64

_sample = jax.jit(sample, static_argnames="params")
_greedy = jax.jit(greedy_argmax)
_probs = jax.jit(processed_probs, static_argnames="params")


def hf_warp(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """transformers' sampling warpers in the order GenerationMixin builds them.

    Returns (kept [B, V] bool, probs [B, V] float32): which tokens survive the filters, and
    the softmax of the warped scores.
    """
    warpers = []
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k != 0:
        warpers.append(TopKLogitsWarper(params.top_k, min_tokens_to_keep=1))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(params.top_p, min_tokens_to_keep=1))
    warpers.append(MinPLogitsWarper(params.min_p, min_tokens_to_keep=1))
    scores = torch.tensor(logits, dtype=torch.float32)  # [B, V]
    for warper in warpers:
        scores = warper(None, scores)
    return (scores > -math.inf).numpy(), torch.softmax(scores, dim=-1).numpy()


def assert_matches_hf(logits: np.ndarray, params: SamplingParams, ties: bool = False):
    ours = np.asarray(processed_probs(jnp.asarray(logits), params))  # [B, V]
    kept = np.isfinite(np.asarray(processed_logprobs(jnp.asarray(logits), params)))  # [B, V]
    ref_kept, ref = hf_warp(logits, params)  # [B, V]
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours.sum(-1), 1.0, atol=1e-5)
    assert np.all(ours[~kept] == 0.0), "masked tokens must have probability exactly 0"
    if ties and params.top_p < 1.0:
        # torch.sort is unstable, so which member of a tie group straddling the top-p cutoff
        # transformers drops is unspecified: compare each row's distribution as a multiset.
        np.testing.assert_array_equal(kept.sum(-1), ref_kept.sum(-1))
        ours, ref = np.sort(ours, axis=-1), np.sort(ref, axis=-1)
    else:
        np.testing.assert_array_equal(kept, ref_kept)
    # XLA rewrites x / T as x * (1 / T), which can differ from torch's true division by one
    # float32 ulp of x / T; the probabilities then differ by about that ulp, so the 1e-6
    # tolerance grows with the largest scaled logit beyond 32.
    atol = 1e-6 * max(1.0, float(np.abs(logits).max()) / max(params.temperature, 1e-9) / 32)
    np.testing.assert_allclose(ours, ref, atol=atol, rtol=0)


def random_logits(seed: int, scale: float = 3.0, ties: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # few distinct values: many ties, at the top and at every cutoff
        return rng.integers(-3, 3, size=(B, V)).astype(np.float32) * scale / 3
    return (rng.standard_normal((B, V)) * scale).astype(np.float32)


EDGE_CASES = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=1),
    SamplingParams(temperature=1.3, top_k=V),
    SamplingParams(temperature=1.0, top_p=1e-6),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=0.5, min_p=1.0),
    SamplingParams(temperature=2.0, min_p=0.1),
    SamplingParams(temperature=1e-3, top_k=10),
    SamplingParams(temperature=0.8, top_k=20, top_p=0.8, min_p=0.05),
    SamplingParams(temperature=1.5, top_k=3, top_p=0.5, min_p=0.5),
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("params", EDGE_CASES, ids=repr)
def test_matches_transformers_edge_cases(params, ties):
    for seed in range(3):
        assert_matches_hf(random_logits(seed, ties=ties), params, ties=ties)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([0.1, 1.0, 3.0, 10.0]),
    ties=st.booleans(),
    temperature=st.floats(0.05, 3.0),
    top_k=st.sampled_from([0, 1, 2, 5, 17, V]),
    top_p=st.one_of(st.just(1.0), st.floats(1e-4, 1.0)),
    min_p=st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
)
def test_matches_transformers_random(seed, scale, ties, temperature, top_k, top_p, min_p):
    # Eager calls with one fixed shape: no jit compilation per example.
    params = SamplingParams(temperature, top_k, top_p, min_p)
    assert_matches_hf(random_logits(seed, scale, ties), params, ties=ties)


def test_logprobs_and_probs_agree_and_mask():
    logits = jnp.asarray(random_logits(0))
    params = SamplingParams(temperature=0.9, top_k=10, top_p=0.7, min_p=0.1)
    lp = processed_logprobs(logits, params)  # [B, V]
    probs = processed_probs(logits, params)  # [B, V]
    assert lp.dtype == jnp.float32 and lp.shape == (B, V)
    masked = np.asarray(probs) == 0.0
    assert masked.any(), "this setting should mask tokens"
    assert np.all(np.isneginf(np.asarray(lp)[masked]))
    assert np.all(np.isfinite(np.asarray(lp)[~masked]))
    np.testing.assert_allclose(np.exp(lp), probs, atol=1e-6)
    jitted = np.asarray(_probs(logits, params))  # all four filters under jit
    np.testing.assert_array_equal(jitted == 0.0, masked)
    np.testing.assert_allclose(jitted, probs, atol=1e-6)


def test_low_precision_input_is_processed_in_float32():
    logits = jnp.asarray(random_logits(1)).astype(jnp.bfloat16)
    params = SamplingParams(temperature=0.7, top_p=0.9)
    out = processed_probs(logits, params)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, processed_probs(logits.astype(jnp.float32), params))


def test_top_p_tie_keeps_lowest_ids():
    # Three tied top tokens of ~1/3 each; top_p=0.5 needs two of them.
    logits = np.array([[0.0, 5.0, 5.0, 5.0, 0.0]], np.float32)
    params = SamplingParams(temperature=1.0, top_p=0.5)
    probs = np.asarray(processed_probs(jnp.asarray(logits), params))[0]
    np.testing.assert_array_equal(probs > 0, [False, True, True, False, False])
    assert_matches_hf(logits, params, ties=True)
    # A tiny top_p keeps the single greedy token, lowest id first.
    tiny = np.asarray(processed_probs(jnp.asarray(logits), SamplingParams(1.0, top_p=1e-6)))
    np.testing.assert_array_equal(tiny[0], [0, 1, 0, 0, 0])


@pytest.mark.parametrize("large", [False, True], ids=["fused", "top_k"])
def test_greedy_argmax_both_paths_agree_on_ties_nan_and_inf(monkeypatch, large):
    """Above a size greedy_argmax takes top_k (no [..., V] temporaries); both paths give the
    lowest id among maxima, 0 for a row holding NaN anywhere, and handle +-inf."""
    from specjax import sampling

    if large:
        monkeypatch.setattr(sampling, "_FUSED_ARGMAX_MAX", 0)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, (64, 7)).astype(np.float32)  # many ties
    x[3] = np.nan
    x[4, 2] = np.nan  # NaN below the maximum
    x[5] = -np.inf
    x[6, 4:] = np.inf
    expected = x.argmax(-1)  # numpy: first maximum
    expected[[3, 4]] = 0
    got = jax.jit(sampling.greedy_argmax)(jnp.asarray(x))  # traced after the patch
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == jnp.int32


def test_greedy_ties_pick_lowest_id():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 3, V)).astype(np.float32)  # [B, P, V]
    expected = np.empty((8, 3), np.int32)
    for b in range(8):
        for p in range(3):
            tied = np.sort(rng.choice(V, size=rng.integers(2, 6), replace=False))
            logits[b, p, tied] = 10.0
            logits[b, p, rng.choice(np.setdiff1d(np.arange(V), tied))] = -np.inf
            expected[b, p] = tied[0]
    x = jnp.asarray(logits)
    for _ in range(3):  # every time, eager and jitted
        np.testing.assert_array_equal(greedy_argmax(x), expected)
        np.testing.assert_array_equal(_greedy(x), expected)
    np.testing.assert_array_equal(_greedy(x.astype(jnp.bfloat16)), expected)
    np.testing.assert_array_equal(greedy_argmax(x[0, 0]), expected[0, 0])
    assert greedy_argmax(x).dtype == jnp.int32
    # An all-equal row, and a row of ties at the very end.
    np.testing.assert_array_equal(greedy_argmax(jnp.zeros((2, V))), [0, 0])
    np.testing.assert_array_equal(greedy_argmax(jnp.asarray([[0.0, 0.0, 1.0, 1.0]])), [2])

    greedy = SamplingParams()
    assert greedy.greedy
    key = jax.random.key(0)
    np.testing.assert_array_equal(_sample(key, x, greedy), expected)
    hot = np.asarray(_probs(x, greedy))  # [B, P, V]
    np.testing.assert_array_equal(hot.argmax(-1), expected)
    np.testing.assert_array_equal(hot.sum(-1), 1.0)
    lp = np.asarray(processed_logprobs(x, greedy))
    np.testing.assert_array_equal(lp == 0.0, hot == 1.0)
    assert np.all(np.isneginf(lp[hot == 0.0]))


def test_sample_frequencies_match_processed_probs():
    n, vocab = 20000, 12
    logits = jnp.asarray(np.random.default_rng(3).standard_normal(vocab) * 0.5, jnp.float32)
    params = SamplingParams(temperature=0.8, top_k=9, top_p=0.95, min_p=0.02)
    probs = np.asarray(processed_probs(logits, params), np.float64)  # [V]
    support = probs > 0
    assert 2 < support.sum() < vocab, "the setting should both mask and keep several tokens"
    draws = np.asarray(_sample(jax.random.key(42), jnp.broadcast_to(logits, (n, vocab)), params))
    assert draws.dtype == np.int32
    counts = np.bincount(draws, minlength=vocab)
    assert counts[~support].sum() == 0, "a masked token was sampled"
    expected = probs[support] / probs[support].sum() * n
    assert stats.chisquare(counts[support], expected).pvalue > 1e-3


def key_bits(keys) -> np.ndarray:
    return np.asarray(jax.random.key_data(keys))


def test_row_streams_do_not_depend_on_batch():
    seed = 7
    keys = row_keys(seed, 4)  # [B]
    assert keys.shape == (4,)
    for i in range(4):
        np.testing.assert_array_equal(key_bits(keys[i]), key_bits(row_keys(seed, i + 1)[i]))
        ref = jax.random.fold_in(jax.random.key(seed), i)
        np.testing.assert_array_equal(key_bits(keys[i]), key_bits(ref))

    for s in (0, 2**31, 2**32 - 1):  # every seed the API takes, as the eager key makes it
        for i, k in enumerate(row_keys(s, 3)):
            ref = jax.random.fold_in(jax.random.key(s), i)
            np.testing.assert_array_equal(key_bits(k), key_bits(ref))
    with pytest.raises(ValueError, match=re.escape("row_keys.seed=-1")):
        row_keys(-1, 2)

    params = SamplingParams(temperature=1.5, top_k=40, seed=seed)
    logits = jnp.asarray(random_logits(5, scale=1.0))  # [B, V]
    other = jnp.asarray(random_logits(6, scale=1.0))  # [B, V] different rows around row i
    seen = set()
    for t in range(3):
        batched = np.asarray(_sample(step_key(keys, t), logits, params))  # [B]
        for i in range(4):
            alone = _sample(step_key(keys[i], t), logits[i], params)  # []
            assert int(alone) == batched[i]
            mixed = _sample(step_key(keys, t), other.at[i].set(logits[i]), params)
            assert int(mixed[i]) == batched[i]
        seen.update(batched.tolist())
    assert len(seen) > 3, "streams should differ between rows and steps"

    # Per-row keys over a [B, P, V] block draw per row, per node.
    block = jnp.broadcast_to(logits[:, None], (4, 3, V))
    assert _sample(keys, block, params).shape == (4, 3)


def test_per_row_seeds():
    seeds = [11, 22, 2**32 - 1, 0]
    keys = row_keys(0, 4, seeds=seeds)
    for i, s in enumerate(seeds):
        np.testing.assert_array_equal(key_bits(keys[i]), key_bits(jax.random.key(s)))
        np.testing.assert_array_equal(key_bits(keys[i]), key_bits(row_keys(0, 1, seeds=[s])[0]))
    with pytest.raises(ValueError, match="len\\(seeds\\)=2"):
        row_keys(0, 4, seeds=[1, 2])
    with pytest.raises(ValueError, match=re.escape("row_keys.seeds[1]=-3")):
        row_keys(0, 2, seeds=[1, -3])


def test_legacy_keys_and_bad_key_shape():
    logits = jnp.asarray(random_logits(0))
    params = SamplingParams(temperature=1.0)
    legacy = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        sample(legacy, logits, params), sample(jax.random.wrap_key_data(legacy), logits, params)
    )
    with pytest.raises(ValueError, match="key shape"):
        sample(row_keys(0, 3), logits, params)


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -1.0),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("temperature", "0.5"),
        ("top_p", 0),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("top_k", -1),
        ("top_k", 2.5),
        ("min_p", -0.1),
        ("min_p", 1.1),
        ("seed", -1),
        ("seed", 2**32),
        ("seed", 1.0),
    ],
)
def test_bad_params_raise_naming_field_and_value(field, value):
    with pytest.raises(ValueError, match=re.escape(f"SamplingParams.{field}={value!r}")) as err:
        SamplingParams(**{field: value})
    assert "must be" in str(err.value)


def test_check_vocab():
    SamplingParams(temperature=1.0, top_k=V).check_vocab(V)
    SamplingParams().check_vocab(V)
    with pytest.raises(ValueError, match=re.escape(f"SamplingParams.top_k={V + 1}")) as err:
        SamplingParams(temperature=1.0, top_k=V + 1).check_vocab(V)
    assert str(V) in str(err.value).split("must be")[1]


def test_params_are_static_friendly():
    a = SamplingParams(temperature=1, top_k=np.int64(5), top_p=np.float32(0.5))
    b = SamplingParams(temperature=1.0, top_k=5, top_p=0.5)
    assert a == b and hash(a) == hash(b)
    assert type(a.temperature) is float and type(a.top_k) is int and type(a.top_p) is float
    assert not a.greedy
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.temperature = 2.0
