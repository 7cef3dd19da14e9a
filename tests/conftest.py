"""Shared fixtures: tiny models built locally (no downloads), created once per session."""

import jax
import numpy as np
import pytest

import specjax as sj

jax.config.update("jax_default_matmul_precision", "highest")

TINY = sj.ModelConfig(
    model_type="llama",
    vocab_size=32,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_position_embeddings=128,
)


@pytest.fixture(scope="session")
def tiny_config():
    return TINY


@pytest.fixture(scope="session")
def target():
    """A tiny random Llama (V=32) used as the target across the suite."""
    return sj.Decoder(TINY, seed=0)


@pytest.fixture(scope="session")
def unrelated_draft():
    """A random model that shares nothing with the target (almost nothing accepted)."""
    return sj.Decoder(TINY.replace(num_layers=1), seed=7)


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
