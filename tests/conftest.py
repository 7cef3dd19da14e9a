"""Shared fixtures: tiny models built locally (no downloads), created once per session."""

import os

import jax
import numpy as np
import pytest

import specjax as sj

jax.config.update("jax_default_matmul_precision", "highest")

# tests/mesh/ needs 8 emulated devices fixed before JAX starts: tests/test_mesh.py runs it in
# a child process; this process never collects it.
if os.environ.get("SPECJAX_MESH_SUITE") != "1":
    collect_ignore = ["mesh"]

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
def tiny_bench_pair():
    """A tiny random target with a BPE tokenizer and its first-layer draft (bench, picker).

    One session-wide pair, so the bench and picker tests share compiled programs.
    """
    from specjax import data
    from specjax.bench.pairs import truncated_draft
    from specjax.io.tokenizer import train_bpe

    texts = data.load_text_dataset("embedded", max_documents=40, max_chars=20_000)["text"]
    tok = train_bpe(texts, vocab_size=320)
    config = TINY.replace(vocab_size=tok.vocab_size)
    target = sj.Model(sj.Decoder(config, seed=0), tok, "tiny-target")
    return target, truncated_draft(target, 1)


@pytest.fixture(scope="session")
def small_ds():
    """A small slice of the embedded corpus (the data and batching tests)."""
    from specjax import data

    return data.load_text_dataset("embedded", max_documents=40, max_chars=80_000)


@pytest.fixture(scope="session")
def tok(small_ds):
    """A 512-token BPE tokenizer trained on `small_ds`."""
    from specjax.io.tokenizer import train_bpe

    return train_bpe(small_ds["text"], vocab_size=512)


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
