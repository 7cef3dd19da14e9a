"""The cache attention kernel: values against a float64 softmax, masks, NaN, dispatch.

The kernel reads only the slots a query row sees, in chunks whose softmax partials it
combines; it is compared with a float64 numpy attention at a tolerance set by XLA's own
float32 error on the same input (`attend`, the path it replaces).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax import kernels
from specjax.models.decoder import attend

# (B, T, N, KH, S, H): head sizes on and off the vector width, caches of one and of several
# 128-slot chunks, query tiles of one and of several (T * N / KH rows above 16).
SHAPES = [
    (1, 1, 9, 3, 384, 64),
    (2, 5, 4, 2, 37, 12),
    (3, 16, 6, 6, 300, 64),
    (1, 9, 4, 2, 129, 33),
    (2, 3, 2, 1, 20, 128),
    (1, 2, 8, 8, 257, 16),
]


def _reference(q, k, v, mask, scale):
    """float64 attention: softmax over the visible slots; zero for a row that sees none."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, T, N, H = q.shape
    G = N // k.shape[1]
    out = np.zeros((B, T, N, H))
    for b in range(B):
        for t in range(T):
            seen = np.flatnonzero(mask[b, t])
            if seen.size == 0:
                continue
            for n in range(N):
                s = k[b, n // G, seen] @ q[b, t, n] * scale
                p = np.exp(s - s.max())
                out[b, t, n] = p @ v[b, n // G, seen] / p.sum()
    return out


def _inputs(rng, B, T, N, KH, S, H, L=2):
    q = rng.standard_normal((B, T, N, H)).astype(np.float32)
    k = rng.standard_normal((L, B, KH, S, H)).astype(np.float32)
    v = rng.standard_normal((L, B, KH, S, H)).astype(np.float32)
    mask = rng.random((B, T, S)) < 0.6
    if B * T > 1:
        mask[0, 0] = False  # a row that sees nothing
    return q, k, v, mask


def _err(y, ref):
    return float(np.max(np.abs(np.asarray(y, np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("B,T,N,KH,S,H", SHAPES)
def test_kernel_matches_float64_attention(B, T, N, KH, S, H, rng):
    q, k, v, mask = _inputs(rng, B, T, N, KH, S, H)
    scale = 1 / np.sqrt(H)
    layer = 1
    f = jax.jit(lambda q, k, v, m: kernels.cache_attention(q, k, v, layer, m, scale))
    y = np.asarray(f(q, k, v, mask))
    ref = _reference(q, k[layer], v[layer], mask, scale)
    seen = mask.any(-1)
    np.testing.assert_array_equal(y[~seen], 0.0)  # sees nothing: zero, not a mean of values
    xla = np.asarray(attend(q, k[layer], v[layer], jnp.asarray(mask), scale))
    xla_err = _err(xla[seen], ref[seen])
    assert _err(y[seen], ref[seen]) <= max(4 * xla_err, 1e-6)


def test_avx2_build_matches(rng):
    """The AVX2 (haswell) build of the same kernel, run here."""
    q, k, v, mask = _inputs(rng, 2, 4, 6, 2, 200, 64)
    y = jax.jit(lambda *a: kernels.cache_attention(*a[:3], 0, a[3], 0.125, march="haswell"))(
        q, k, v, mask
    )
    ref = _reference(q, k[0], v[0], mask, 0.125)
    assert _err(y, ref) < 1e-5


def test_unseen_slots_never_leak_and_seen_nan_propagates(rng):
    B, T, N, KH, S, H = 1, 4, 4, 2, 150, 16
    q, k, v, _ = _inputs(rng, B, T, N, KH, S, H, L=1)
    mask = np.zeros((B, T, S), bool)
    mask[0, :, :100] = True  # every row sees slots 0..99 ...
    mask[0, 2, 120] = True  # ... and row 2 also sees slot 120
    k[0, 0, :, 130:], v[0, 0, :, 130:] = np.nan, np.inf  # stale slots nobody sees
    clean = np.asarray(kernels.cache_attention(q, k, v, 0, mask, 0.25))
    assert np.isfinite(clean).all()
    v[0, 0, 1, 120] = np.nan  # a slot row 2 sees, on KV head 1 (query heads 2, 3)
    y = np.asarray(kernels.cache_attention(q, k, v, 0, mask, 0.25))
    assert np.isnan(y[0, 2, 2:]).all()
    np.testing.assert_array_equal(np.delete(y[0], 2, axis=0), np.delete(clean[0], 2, axis=0))
    np.testing.assert_array_equal(y[0, 2, :2], clean[0, 2, :2])


def test_a_row_does_not_depend_on_its_block(rng):
    """A query's output is the same whether it is decoded alone or inside a verify block."""
    q, k, v, mask = _inputs(rng, 1, 7, 6, 3, 260, 64)
    block = np.asarray(kernels.cache_attention(q, k, v, 1, mask, 0.125))
    for t in (1, 4, 6):
        alone = kernels.cache_attention(q[:, t : t + 1], k, v, 1, mask[:, t : t + 1], 0.125)
        np.testing.assert_array_equal(np.asarray(alone)[:, 0], block[:, t])


def _program(model, T, pack=True):
    graphdef, state = kernels.split_for_decode(model, pack=pack)
    c = model.config
    cache = sj.KVCache.init(c.num_layers, 1, 32, c.num_kv_heads, c.head_dim)

    def forward(state, cache):
        tokens = jnp.zeros((1, T), jnp.int32)
        return nnx.merge(graphdef, state)(tokens, jnp.arange(T)[None], cache).logits

    return jax.jit(forward).lower(state, cache).as_text()


def test_decoder_dispatch(target, monkeypatch):
    """Laid-out weights and a small block: the kernel; the standard layout (training, a mesh),
    a long block (prefill) or SPECJAX_CPU_ATTENTION=0: XLA's attention."""
    name = "specjax_cache_attention"
    assert name in _program(target, 4)
    assert name in _program(target, kernels.MAX_ATTENTION_ROWS)
    assert name not in _program(target, kernels.MAX_ATTENTION_ROWS + 1)
    assert name not in _program(target, 4, pack=False)
    monkeypatch.setenv(kernels.ATTENTION_ENV, "0")
    assert name not in _program(target, 4)
    assert "specjax_packed_matmul" in _program(target, 4)  # the matmul kernel stays


def test_decoder_logits_with_and_without_the_attention_kernel(target, monkeypatch):
    graphdef, state = kernels.split_for_decode(target)
    c = target.config
    rng = np.random.default_rng(3)
    prompt = jnp.asarray(rng.integers(0, c.vocab_size, (2, 20)), jnp.int32)

    def run():
        @jax.jit
        def steps(state):
            model = nnx.merge(graphdef, state)
            cache = sj.KVCache.init(c.num_layers, 2, 40, c.num_kv_heads, c.head_dim)
            out = model(prompt[:, :17], jnp.arange(17)[None].repeat(2, 0), cache)  # XLA
            cache = out.cache.advance(jnp.full((2,), 17))
            block = model(prompt[:, 17:], jnp.arange(17, 20)[None].repeat(2, 0), cache)
            return block.logits

        return np.asarray(steps(state))

    with_kernel = run()
    monkeypatch.setenv(kernels.ATTENTION_ENV, "0")
    np.testing.assert_allclose(with_kernel, run(), rtol=2e-5, atol=2e-5)


def _drafter_program(target, head, pack=True):
    """The EAGLE-3 drafter's cached forward over a block of 3 entries, jitted: (hidden, logits)
    and the lowered program's text."""
    (tdef, tstate), (hdef, hstate) = (
        kernels.split_for_decode(m, pack=pack) for m in (target, head)
    )
    B, T, W = 2, 3, 3
    rng = np.random.default_rng(4)
    tokens = jnp.asarray(rng.integers(0, target.config.vocab_size, (B, T)), jnp.int32)
    feature = jnp.asarray(rng.standard_normal((B, T, head.config.hidden_size)), jnp.float32)
    positions = 5 + jnp.arange(T)[None].repeat(B, 0)
    block_mask = jnp.tril(jnp.ones((T, W), bool))[None].repeat(B, 0)  # a chain: causal

    def forward(tstate, hstate):
        cache = head.init_cache(B, 16).replace(lengths=jnp.array([5, 2], jnp.int32))
        drafter = nnx.merge(hdef, hstate)
        h, logits, _ = drafter(
            nnx.merge(tdef, tstate), tokens, feature, positions, cache, block_mask
        )
        return h, logits

    fn = jax.jit(forward)
    return [np.asarray(x) for x in fn(tstate, hstate)], fn.lower(tstate, hstate).as_text()


def test_eagle_drafter_uses_the_attention_kernel_when_laid_out(target, monkeypatch):
    """The drafter's cached forward: the kernel when its weights are packed for decoding (the
    same hidden states and logits as XLA's attention), never over the standard layout."""
    head = sj.EagleHead.for_target(target, method="eagle3", seed=2)
    name = "specjax_cache_attention"
    (h, logits), text = _drafter_program(target, head)
    assert name in text
    (h_std, logits_std), text = _drafter_program(target, head, pack=False)
    assert name not in text
    monkeypatch.setenv(kernels.ATTENTION_ENV, "0")
    (h_off, logits_off), text = _drafter_program(target, head)
    assert name not in text
    for got in (h_off, h_std):
        np.testing.assert_allclose(h, got, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(logits, logits_off, rtol=2e-5, atol=2e-5)
    assert np.isfinite(h).all() and np.abs(h - h[:, :1]).max() > 0  # entries differ
