"""`attend` (grouped-query attention over a head-major cache) against a direct NumPy reference.

The decoder and the EAGLE drafter read every block (decode steps, verify blocks, tree levels,
prefill) through this one function, so it is checked at those block sizes, with ragged
visibility per row and query, and with stale slots holding NaN and huge values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.decoder import attend


def reference(q, k, v, mask, scale):
    """q [B, T, N, H]; k, v [B, K, S, H]; mask [B, T, S] -> [B, T, N, H], in float64."""
    B, T, N, H = q.shape
    K = k.shape[1]
    out = np.zeros((B, T, N, H))
    for b in range(B):
        for t in range(T):
            seen = mask[b, t]
            for n in range(N):
                kv = n // (N // K)  # query head n reads KV head n // G
                s = k[b, kv, seen].astype(np.float64) @ q[b, t, n].astype(np.float64) * scale
                p = np.exp(s - s.max())
                out[b, t, n] = (p / p.sum()) @ v[b, kv, seen].astype(np.float64)
    return out


@pytest.mark.parametrize(
    "B,T,S,N,K",
    [(1, 1, 16, 4, 4), (3, 1, 16, 4, 2), (2, 2, 16, 6, 3), (2, 5, 24, 8, 1), (1, 9, 32, 6, 2)],
)
def test_attend_matches_reference(B, T, S, N, K):
    H = 8
    rng = np.random.default_rng(B * 100 + T * 10 + K)
    q = rng.standard_normal((B, T, N, H)).astype(np.float32)
    k = rng.standard_normal((B, K, S, H)).astype(np.float32)
    v = rng.standard_normal((B, K, S, H)).astype(np.float32)
    # Ragged visibility per row and query; a slot no query sees holds NaN and 1e30 (stale).
    lengths = rng.integers(1, S - T, B)
    mask = np.zeros((B, T, S), bool)
    for b in range(B):
        for t in range(T):
            mask[b, t, : lengths[b] + t + 1] = True
    hidden = ~mask.any(axis=1)  # [B, S]
    k.transpose(0, 2, 1, 3)[hidden] = 1e30
    v.transpose(0, 2, 1, 3)[hidden] = np.nan
    args = (jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), H**-0.5)
    got = np.asarray(jax.jit(attend, static_argnums=4)(*args))
    assert np.isfinite(got).all()
    want = reference(q, k, v, mask, H**-0.5)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    # Not a trivial agreement: the output moves with the visible values.
    v2 = np.where(hidden[:, None, :, None], v, v + 1.0)
    moved = np.asarray(attend(args[0], args[1], jnp.asarray(v2), *args[3:]))
    np.testing.assert_allclose(moved, got + 1.0, atol=1e-5)
