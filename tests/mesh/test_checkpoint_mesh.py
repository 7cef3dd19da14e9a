"""Checkpoints across topologies: 8 devices -> 2 devices -> 1 device, identical values.

A training state (decoder + AdamW) sharded over all 8 emulated devices (FSDP on a (4, 2) mesh:
2-D shards) is saved the way the trainers save (`loop.save`), restored onto a (1, 2) mesh of
2 devices the way a resumed run restores (`loop.restore` into a state placed on the new mesh),
saved again from there and restored onto one device (no mesh: the one-device path). Every
array must come back bit for bit, on the shardings of the state it was restored into.

`test_train_lm_resumes_on_another_mesh` runs the trainer itself: 4 steps on a (4, 2) mesh
with a checkpoint at step 2, the last checkpoint removed (a run killed after step 2), then the
same workdir resumed on a (2, 1) mesh of 2 devices; it must end at the uninterrupted run's
parameters (within the sharded step's tolerance: the two meshes order their sums differently).
"""

import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_lm as train_lm_configs
from specjax import parallel
from specjax.io.hf import export_state
from specjax.train import checkpoint, lm, loop

from .conftest import MESH_TINY


@pytest.fixture(scope="module")
def fresh():
    """A fresh training state of MESH_TINY on the host (one initialisation for every test)."""
    tx, _ = loop.make_optimizer(lm.default_config().train)
    state = lm.init_train_state(MESH_TINY, tx, seed=0)[1]
    # One optimizer step's worth of non-zero moments, so that every array has values to lose.
    return jax.tree.map(lambda x: np.asarray(x) + 0.5 if x.dtype == jnp.float32 else x, state)


def make_state(fresh, layout, offset: float = 0.0):
    """`fresh` (+ offset: other values) placed by `layout` (None: on one device)."""
    state = jax.tree.map(lambda x: jnp.asarray(x + offset if x.dtype == np.float32 else x), fresh)
    return loop.place_state(state, layout)[0]


def values(state) -> dict:
    flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state))[0]
    return {jax.tree_util.keystr(p): parallel.to_host(x) for p, x in flat}


def devices_of(state) -> set:
    return {d for x in jax.tree.leaves(state) for d in x.sharding.device_set}


def assert_same_values(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def save(directory, step, state) -> None:
    manager = checkpoint.make_manager(directory)
    loop.save(manager, step, state, ml_collections.ConfigDict({"run": "topologies"}))
    manager.wait_until_finished()


def test_restore_from_8_devices_onto_2_then_1(fresh, tmp_path):
    eight = parallel.Layout(parallel.make_mesh(4, 2), fsdp=True)
    two = parallel.Layout(parallel.make_mesh(1, 2, devices=jax.devices()[:2]))
    saved = make_state(fresh, eight)
    q = saved[0]["layers"][0]["self_attn"]["q_proj"]["kernel"][...]
    assert parallel.num_shards(q) == 8  # [D, N*H] over data x model
    want = values(saved)
    save(tmp_path / "eight", 3, saved)

    # Onto 2 devices: a state of other values, placed on the (1, 2) mesh.
    state = make_state(fresh, two, offset=1.0)
    loop.restore(checkpoint.make_manager(tmp_path / "eight"), 3, state)
    assert_same_values(values(state), want)
    assert devices_of(state) == set(jax.devices()[:2])
    q = state[0]["layers"][0]["self_attn"]["q_proj"]["kernel"][...]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "model")
    save(tmp_path / "two", 3, state)

    # Onto 1 device: the one-device path's state, no mesh at all.
    state = make_state(fresh, None, offset=2.0)
    loop.restore(checkpoint.make_manager(tmp_path / "two"), 3, state)
    assert_same_values(values(state), want)
    assert devices_of(state) == {jax.devices()[0]}


def test_restore_onto_abstract_shardings(fresh, tmp_path):
    """`checkpoint.restore` takes ShapeDtypeStructs too: the sharding says where each goes."""
    eight = parallel.Layout(parallel.make_mesh(2, 4))
    saved = make_state(fresh, eight)
    save(tmp_path / "ckpt", 1, saved)
    two = parallel.Layout(parallel.make_mesh(2, 1, devices=jax.devices()[2:4]))
    pure = nnx.to_pure_dict(saved)
    shardings = parallel.tree_shardings(pure, two)
    like = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), pure, shardings
    )
    restored = checkpoint.restore(checkpoint.make_manager(tmp_path / "ckpt"), 1, like)
    for (path, x), s in zip(
        jax.tree_util.tree_flatten_with_path(restored)[0], jax.tree.leaves(shardings), strict=True
    ):
        assert x.sharding == s, jax.tree_util.keystr(path)
    got = {jax.tree_util.keystr(p): np.asarray(x)
           for p, x in jax.tree_util.tree_flatten_with_path(restored)[0]}  # fmt: skip
    assert_same_values(got, values(saved))


# ------------------------------------------------------------------------ the trainer


def resume_config(data: int, model: int, **train):
    config = train_lm_configs.get_config("tiny")
    config.data.max_chars = 20_000
    config.model.update(num_heads=4, num_kv_heads=2, head_dim=8, hidden_size=32)
    config.train.update(batch_size=8, num_steps=4, checkpoint_every=2, eval_every=2,
                        log_every=2, eval_batches=1, progress=False, **train)  # fmt: skip
    config.mesh.update(data=data, model=model)
    return config


@pytest.mark.slow
def test_train_lm_resumes_on_another_mesh(tmp_path):
    whole = lm.train_lm(resume_config(4, 2), tmp_path / "whole")
    want = export_state(sj.load_model(tmp_path / "whole").module)

    workdir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole", workdir)
    shutil.rmtree(workdir / lm.CHECKPOINTS / "4")  # killed after the step-2 checkpoint
    shutil.rmtree(workdir / lm.HF)
    summary = lm.train_lm(resume_config(2, 1), workdir)
    assert summary["resumed_from"] == 2
    got = export_state(sj.load_model(workdir).module)
    assert got.keys() == want.keys()
    for key, value in want.items():
        # The sharded step's tolerance (tests/mesh/test_train_mesh.py): AdamW's update of
        # near-zero gradients amplifies reordering differences to ~1e-4 of the update.
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
    assert whole["train_loss"] == pytest.approx(summary["train_loss"], rel=1e-4)
    assert jnp.isfinite(summary["eval_loss"])
