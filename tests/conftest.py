"""Shared fixtures: tiny models built locally (no downloads), created once per session."""

import os
import shutil
import tempfile

import jax
import numpy as np
import pytest

import specjax as sj

jax.config.update("jax_default_matmul_precision", "highest")
# Most of the suite's time is XLA compiling small programs, not running them: without LLVM's
# optimizations the README's command took 17:14 instead of 27:19 on a 2-core AVX2 EPYC (CPU
# time 1,973 s against 3,168; BENCHMARKS.md "Test suite time"). Modules whose time is running
# programs (the law tests' 102,400 samples) ask for them back with `optimized_xla`.
jax.config.update("jax_disable_most_optimizations", True)

# One persistent XLA compilation cache for the whole run, shared by the xdist workers and, when
# SPECJAX_TEST_XLA_CACHE names one, by `.ci/run`'s two pytest commands or by local re-runs
# (where it pays: a cold run gains nothing, its workers rarely compile the same program).
# Without it, a fresh directory per run, removed at the end. Not an environment variable JAX reads itself:
# the tests' own subprocesses (the launcher's) keep their default cache.
XLA_CACHE_ENV = "SPECJAX_TEST_XLA_CACHE"
XLA_CACHE_KEY = "specjax_xla_cache"
_XLA_CACHE = pytest.StashKey[str]()


def _use_xla_cache(path: str) -> None:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's directory
        _use_xla_cache(config.workerinput[XLA_CACHE_KEY])
        return
    path = os.environ.get(XLA_CACHE_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="specjax-tests-xla-")
        config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
    config.stash[_XLA_CACHE] = path
    _use_xla_cache(path)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # xdist, in the controller: each worker's input
    node.workerinput[XLA_CACHE_KEY] = node.config.stash[_XLA_CACHE]


@pytest.fixture(scope="module")
def optimized_xla():
    """XLA's full optimizations for one module (`pytestmark = pytest.mark.usefixtures(...)`)."""
    old = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", old)


@pytest.fixture
def child_env():
    """os.environ for a child process that compiles as this one does (with or without XLA's
    optimizations): a run killed in a child and resumed here matches one run here to 1e-5 only
    when both compile alike."""
    flag = "1" if jax.config.read("jax_disable_most_optimizations") else "0"
    return {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": flag}


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
