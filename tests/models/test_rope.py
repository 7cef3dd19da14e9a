"""The RoPE table a decode loop makes once (`Decoder.rope_table`) against cos / sin computed in
the forward: the same rotation, the same logits, NaN (never a clipped row) past its end."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import specjax as sj
from specjax.cache import KVCache
from specjax.models.decoder import rope_at


def test_table_reads_the_forward_rope(target):
    positions = jnp.asarray([[0, 1, 5, 63], [7, 30, 31, 2]], jnp.int32)
    table = target.rope_table(64)
    assert table.shape == (2, 64, target.config.head_dim // 2)
    cos, sin = rope_at(table, positions)
    want_cos, want_sin = target.rope(positions)
    np.testing.assert_allclose(cos, want_cos, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sin, want_sin, rtol=1e-6, atol=1e-7)
    # Not constant rows: position 5 and 63 rotate differently.
    assert not np.allclose(cos[0, 2], cos[0, 3])


def test_table_past_its_end_reads_nan(target):
    table = target.rope_table(8)
    cos, sin = rope_at(table, jnp.asarray([[7, 8]], jnp.int32))
    assert np.isfinite(cos[0, 0]).all() and np.isfinite(sin[0, 0]).all()
    assert np.isnan(cos[0, 1]).all() and np.isnan(sin[0, 1]).all()


def test_table_is_capped_at_the_model_positions(target):
    size = target.config.max_position_embeddings
    assert target.rope_table(10 * size).shape[1] == size


def test_forward_with_table_matches(target):
    c = target.config
    cache = KVCache.init(c.num_layers, 2, 32, c.num_kv_heads, c.head_dim, jnp.float32)
    tokens = jnp.asarray([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5)) + 11
    cache = cache.replace(lengths=jnp.full((2,), 11, jnp.int32))
    want = target(tokens, positions, cache)
    got = target(tokens, positions, cache, rope_table=target.rope_table(32))
    np.testing.assert_allclose(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.cache.k, want.cache.k, rtol=1e-5, atol=1e-6)
    # Positions past the table poison the rows that use them, visibly.
    short = target(tokens, positions, cache, rope_table=target.rope_table(12))
    assert np.isnan(short.logits[:, 1:]).all()


def test_no_rope_no_table():
    gpt2 = sj.Decoder(
        sj.ModelConfig(model_type="gpt2", vocab_size=32, hidden_size=16, num_layers=1,
                       num_heads=2, num_kv_heads=2, head_dim=8, intermediate_size=32,
                       max_position_embeddings=64),
        seed=0,
    )  # fmt: skip
    assert gpt2.rope_table(16) is None
