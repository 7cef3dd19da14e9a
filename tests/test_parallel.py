"""specjax.parallel on one device: the rules by name, and a one-device mesh that changes nothing.

The multi-device behaviour (8 emulated devices) is in tests/mesh/, run by tests/test_mesh.py.
"""

import jax
import pytest
from flax import nnx

import specjax as sj
from specjax import parallel
from specjax.decoding import engine


@pytest.mark.parametrize(
    ("names", "ndim", "axes"),
    [
        (("embed_tokens", "embedding"), 2, ("vocab", "embed")),
        (("layers", 0, "self_attn", "q_proj", "kernel"), 2, ("embed", "heads")),
        (("layers", 0, "self_attn", "q_proj", "bias"), 1, ("heads",)),
        (("layers", 3, "self_attn", "k_proj", "kernel"), 2, ("embed", "kv_heads")),
        (("layers", 0, "self_attn", "o_proj", "kernel"), 2, ("heads", "embed")),
        (("layers", 0, "self_attn", "o_proj", "bias"), 1, ("embed",)),
        (("layers", 0, "mlp", "gate_proj", "kernel"), 2, ("embed", "mlp")),
        (("layers", 0, "mlp", "down_proj", "kernel"), 2, ("mlp", "embed")),
        (("layers", 0, "input_layernorm", "weight"), 1, (None,)),
        (("lm_head", "kernel"), 2, ("embed", "vocab")),
        # GPT-2: the two c_proj differ by their parent module.
        (("h", 1, "attn", "c_attn", "kernel"), 2, ("embed", "heads")),
        (("h", 1, "attn", "c_proj", "kernel"), 2, ("heads", "embed")),
        (("h", 1, "mlp", "c_fc", "kernel"), 2, ("embed", "mlp")),
        (("h", 1, "mlp", "c_proj", "kernel"), 2, ("mlp", "embed")),
        (("wpe", "embedding"), 2, (None, "embed")),
        # Medusa: stacked per-head LM heads [K, D, V]; residual blocks replicated.
        (("lm_head",), 3, (None, "embed", "vocab")),
        (("w",), 4, (None, None, None, None)),
        # EAGLE: its decoder layer by the same names; fc and the vocabulary maps replicated.
        (("q_proj", "kernel"), 2, ("embed", "heads")),
        (("fc", "kernel"), 2, (None, None)),
        (("d2t",), 1, (None,)),
    ],
)
def test_parameter_rules_by_name(names, ndim, axes):
    assert parallel.param_logical_axes(names, ndim) == axes


def test_every_decoder_parameter_has_a_rule_or_is_a_vector(target):
    """No matrix of the decoder falls through to replication by accident."""
    flat = nnx.to_flat_state(nnx.state(target, nnx.Param))
    for path, var in flat:
        axes = parallel.param_logical_axes(path, var[...].ndim)
        if var[...].ndim >= 2:
            assert any(a is not None for a in axes), path


def test_one_device_mesh_changes_nothing(target):
    """Same tokens as mesh=None, one compile for repeated calls, and the mesh=None path
    compiles exactly as before (its cached program is reused)."""
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    base = sj.generate(target, prompts, 10, stop_token_ids=[])
    before = engine.trace_count()
    again = sj.generate(target, [[9, 8, 7], [1, 1]], 7, stop_token_ids=[])  # same buckets
    assert engine.trace_count() == before  # no recompile on the one-device path
    mesh = parallel.make_mesh(1, 1)
    one = sj.generate(target, prompts, 10, stop_token_ids=[], mesh=mesh)
    traced = engine.trace_count()
    assert traced <= before + 1
    assert one.tokens == base.tokens and one.stats["row_steps"] == base.stats["row_steps"]
    sj.generate(target, [[9, 8, 7], [1, 1]], 7, stop_token_ids=[], mesh=mesh)
    assert engine.trace_count() == traced  # the sharding annotations do not recompile
    assert again.tokens != base.tokens  # the two calls really differ


def test_layout_batch_bucket_and_mesh_checks():
    mesh = parallel.make_mesh(1, 1)
    layout = parallel.layout_of(mesh)
    assert layout.data == 1 and layout.model == 1 and layout.batch_bucket(3) == 3
    assert parallel.layout_of(None) is None
    with pytest.raises(ValueError, match=r"needs 2 devices, 1 exist"):
        parallel.make_mesh(2, 1, devices=jax.devices()[:1])
    with pytest.raises(ValueError, match="mesh axis 'data' must be a positive int, got 0"):
        parallel.make_mesh(0, 1)


def test_initialize_distributed_without_a_cluster_does_nothing(monkeypatch):
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                "SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "OMPI_MCA_orte_hnp_uri"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    assert parallel.initialize_distributed() is False
    assert jax.process_count() == 1


def test_an_explicit_mesh_is_served_as_its_auto_twin(target):
    """jax.make_mesh's default axis types are Explicit; check_mesh hands back the same devices
    and names with Auto axes, and generate on it gives the single-device tokens."""
    mesh = jax.make_mesh((1, 1), parallel.MESH_AXES)
    auto = parallel.check_mesh(mesh)
    assert auto.axis_names == mesh.axis_names and auto.devices.tolist() == mesh.devices.tolist()
    assert all(t == jax.sharding.AxisType.Auto for t in auto.axis_types)
    cfg = {"method": "ngram", "num_speculative_tokens": 3}
    want = sj.generate(target, [[1, 2, 3, 1, 2]], 6, speculative_config=cfg).tokens
    assert (
        sj.generate(target, [[1, 2, 3, 1, 2]], 6, speculative_config=cfg, mesh=mesh).tokens == want
    )
