"""The 8-device suite: collected only in the child process that `tests/test_mesh.py` starts
(XLA_FLAGS=--xla_force_host_platform_device_count=8, SPECJAX_MESH_SUITE=1)."""

import jax
import pytest

import specjax as sj
from specjax import parallel

DEVICES = 8
MESH_SHAPES = [(8, 1), (4, 2), (2, 4), (1, 8)]

# 8 query heads and 4 KV heads: the (1, 8) and (2, 4) meshes shard the query heads and
# replicate the KV heads (4 does not divide over 8), the (4, 2) mesh shards both.
MESH_TINY = sj.ModelConfig(
    model_type="llama",
    vocab_size=64,
    hidden_size=64,
    num_layers=2,
    num_heads=8,
    num_kv_heads=4,
    head_dim=8,
    intermediate_size=128,
    max_position_embeddings=256,
)


def pytest_configure(config):
    if jax.device_count() < DEVICES:
        raise pytest.UsageError(
            f"tests/mesh needs {DEVICES} devices, JAX sees {jax.device_count()}: run it through "
            "tests/test_mesh.py (which sets --xla_force_host_platform_device_count=8)"
        )
    jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(scope="session")
def mesh_target():
    return sj.Decoder(MESH_TINY, seed=0)


@pytest.fixture(scope="session", params=MESH_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def mesh(request):
    return parallel.make_mesh(*request.param)
