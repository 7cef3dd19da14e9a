"""The two attention paths agree: `attend` (einsum) and `attend_blockdiag` (cache rows as stored).

The decoder picks `attend_blockdiag` for blocks of up to BLOCKDIAG_MAX_T query tokens (decode
steps) and `attend` otherwise, so a model's output must not depend on which one ran.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.decoder import attend, attend_blockdiag


@pytest.mark.parametrize(
    "B,T,S,N,K", [(1, 1, 16, 4, 4), (3, 1, 16, 4, 2), (2, 2, 16, 6, 3), (2, 5, 24, 8, 1)]
)
def test_blockdiag_equals_einsum(B, T, S, N, K):
    H = 8
    rng = np.random.default_rng(B * 100 + T * 10 + K)
    q = jnp.asarray(rng.standard_normal((B, T, N, H)), jnp.float32)
    k = rng.standard_normal((B, S, K, H)).astype(np.float32)
    v = rng.standard_normal((B, S, K, H)).astype(np.float32)
    # Ragged visibility per row and query; a slot no query sees holds NaN and 1e30 (stale).
    lengths = rng.integers(1, S - T, B)
    mask = np.zeros((B, T, S), bool)
    for b in range(B):
        for t in range(T):
            mask[b, t, : lengths[b] + t + 1] = True
    hidden = ~mask.any(axis=1)  # [B, S]
    k[hidden] = 1e30
    v[hidden] = np.nan
    args = (q, jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), H**-0.5)
    want, got = np.asarray(attend(*args)), np.asarray(attend_blockdiag(*args))
    assert np.isfinite(want).all() and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    # Not a trivial agreement: the output depends on the visible values.
    v2 = np.where(hidden[:, :, None, None], v, v + 1.0)
    moved = np.asarray(attend_blockdiag(q, jnp.asarray(k), jnp.asarray(v2), *args[3:]))
    np.testing.assert_allclose(moved, got + 1.0, atol=1e-5)
