"""Training on a device mesh: one step equals the one-device step, whatever the mesh.

For the meshes (8, 1), (4, 2), (2, 4) and (1, 8) of 8 emulated devices, the trainers' own
pieces (`lm.init_train_state` / `make_train_step`, `heads.make_state` / `make_steps`,
`eagle.make_state` / `make_steps`, placed by `loop.place_state`, the batch made global by
`loop.sharded_stream`) take one step from the same state on the same batch, and the loss, the
updated parameters and the AdamW moments must equal the one-device step's.

Tolerance (float32, highest matmul precision). A sharded step computes the same sums in
another order (the data axis adds per-shard gradients, the model axis per-shard partial
matmuls), so each value differs by a few float32 epsilons times the reduction depth. The
loss: rtol 1e-5. The AdamW moments (mu = 0.1 g, nu = 0.001 g^2 after one step, so they check
the gradients themselves): per leaf ||mesh - one|| <= 1e-5 ||one|| (measured <= 8e-7). The
parameters: per leaf, the update (new - old) within 1e-3 of its own norm (measured
<= 5e-5): AdamW's first step is g / (|g| + 1e-8) times the learning rate, so an entry whose
gradient cancels to ~1e-8 turns a 1e-7 absolute reordering difference into a visible
fraction of the learning rate (measured: up to 0.4% of it on single entries). A wrong
reduction (a shard missing or counted twice) moves a leaf's gradient and update by O(1) of
their norm, far outside both bounds. The steps use warmup_steps=0, so the first update is a
full learning-rate step (a comparison of unchanged parameters would pass vacuously).

The fast set runs LM training on every mesh and Medusa-1 and EAGLE-3 on (4, 2); `-m slow`
adds the head trainers on the other meshes, Medusa-2 and EAGLE-1, and runs the three trainers
end to end on a (2, 4) mesh.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_eagle, train_medusa
from configs import train_lm as train_lm_configs
from specjax import parallel
from specjax.models import Decoder, as_model
from specjax.train import eagle, heads, lm, loop

from .conftest import MESH_SHAPES, MESH_TINY

B, T = 8, 16
LOSS_RTOL = 1e-5
MOMENT_RTOL = 1e-5  # relative norm of each AdamW moment leaf after the step
UPDATE_RTOL = 1e-3  # relative norm of each parameter leaf's update (new - old)
SHAPE_IDS = [f"{d}x{m}" for d, m in MESH_SHAPES]


def train_config(config, data: int = 1, model: int = 1):
    config.train.update(batch_size=B, warmup_steps=0, num_steps=10, learning_rate=1e-2)
    config.mesh.update(data=data, model=model)
    return config


def tokens(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, MESH_TINY.vocab_size, (B, T + 1), np.int32)


def lm_batch() -> dict:
    rows = tokens()
    return {"inputs": rows[:, :-1], "targets": rows[:, 1:]}


def heads_batch() -> dict:
    rows = tokens(1)[:, :T]
    mask = np.ones((B, T), np.int8)
    mask[:, :3] = 0  # a prompt part that is not counted, as self-distilled rows have
    return {"tokens": rows, "mask": mask}


def host(state) -> dict:
    """{path: numpy array} of every array leaf (gathered from its shards)."""
    flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state))[0]
    return {jax.tree_util.keystr(p): parallel.to_host(x) for p, x in flat}


def global_batch(batch: dict, layout) -> dict:
    """The batch as the trainers' stream hands it to the step."""
    return next(loop.sharded_stream(iter([(0, batch)]), layout))[1]


def assert_same_step(before: dict, one: tuple, mesh: tuple, what: str) -> None:
    """`one`, `mesh`: (state after the step as `host` gives it, metrics) of the two runs."""
    (one_state, one_metrics), (mesh_state, mesh_metrics) = one, mesh
    one_loss, mesh_loss = float(one_metrics["loss"]), float(mesh_metrics["loss"])
    np.testing.assert_allclose(mesh_loss, one_loss, rtol=LOSS_RTOL, err_msg=f"{what}: loss")
    assert one_state.keys() == mesh_state.keys()
    moved = 0
    for key, want in one_state.items():
        got = mesh_state[key]
        assert got.shape == want.shape and got.dtype == want.dtype, key
        if not np.issubdtype(want.dtype, np.floating):
            np.testing.assert_array_equal(got, want, err_msg=f"{what}: {key}")
            continue
        if "opt_state" in key:
            err, scale, rtol = np.linalg.norm(got - want), np.linalg.norm(want), MOMENT_RTOL
        else:
            update = want - before[key]
            err = np.linalg.norm((got - before[key]) - update)
            scale, rtol = np.linalg.norm(update), UPDATE_RTOL
            moved += bool(scale > 0)
        assert err <= rtol * max(scale, 1e-30), f"{what}: {key}: {err:.2e} of {scale:.2e}"
    assert moved >= 3, f"{what}: the step changed {moved} parameter arrays"


# ----------------------------------------------------------------------------------- LM


@pytest.fixture(scope="module")
def lm_init():
    """(graphdef, the fresh state on the host): one initialisation for every run."""
    tx, _ = loop.make_optimizer(train_config(lm.default_config()).train)
    graphdef, state = lm.init_train_state(MESH_TINY, tx, seed=0)
    return graphdef, jax.tree.map(np.asarray, state)


@contextlib.contextmanager
def count_compiles():
    """[n]: the XLA compilations inside the block."""
    count = [0]

    def listener(event, duration, **kwargs):
        count[0] += event == "/jax/core/compile/backend_compile_duration"

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def lm_step(lm_init, layout):
    """(state before, state after, metrics, the device state after a second step) of LM
    training under `layout`; the second step must reuse the first one's program (the state
    keeps its shardings)."""
    graphdef, init = lm_init
    state, shardings = loop.place_state(jax.tree.map(jnp.asarray, init), layout)
    before = host(state)
    step = lm.make_train_step(graphdef, layout=layout, shardings=shardings)
    batch = global_batch(lm_batch(), layout)
    state, metrics = step(state, batch)
    after = host(state)
    with count_compiles() as compiles:
        state = jax.block_until_ready(step(state, batch)[0])
    assert compiles == [0], f"the second step compiled {compiles[0]} programs"
    return before, after, metrics, state


@pytest.fixture(scope="module")
def lm_reference(lm_init):
    before, after, metrics, _ = lm_step(lm_init, None)
    return before, (after, jax.device_get(metrics))


@pytest.mark.parametrize("shape", MESH_SHAPES, ids=SHAPE_IDS)
def test_lm_step_equals_single_device(lm_init, lm_reference, shape):
    data, model = shape
    layout = loop.make_layout(train_config(lm.default_config(), data, model))
    before, after, metrics, state = lm_step(lm_init, layout)
    assert_same_step(before, lm_reference[1], (after, metrics), f"lm {data}x{model}")
    assert parallel.num_shards(metrics["loss"]) == 1
    # Two steps on, the state keeps the rules' placement: q_proj's output axis [D, N*H] over
    # `model`, its AdamW moment beside it.
    q = state[0]["layers"][0]["self_attn"]["q_proj"]["kernel"][...]
    mu = state[1]["opt_state"][1][0]["mu"]["layers"][0]["self_attn"]["q_proj"]["kernel"][...]
    assert parallel.num_shards(q) == model and mu.sharding == q.sharding


def test_lm_batch_is_sharded_over_data():
    layout = loop.make_layout(train_config(lm.default_config(), 4, 2))
    batch = global_batch(lm_batch(), layout)
    assert batch["inputs"].shape == (B, T)
    assert parallel.num_shards(batch["inputs"]) == 4
    np.testing.assert_array_equal(np.asarray(batch["inputs"]), lm_batch()["inputs"])


# ------------------------------------------------------------------------------ the heads


@pytest.fixture(scope="module")
def head_target():
    return as_model(Decoder(MESH_TINY, seed=0))


def heads_config(method: str, data: int = 1, model: int = 1):
    if method in ("medusa", "medusa2"):
        config = heads.default_config()
        config.heads.num_heads = 2
        if method == "medusa2":
            config.joint.update(enabled=True, heads_only_steps=0, kl_weight=1.0)
    else:
        config = eagle.default_config()
        config.method, config.ttt_steps = method, 2
    config.target = "mesh-tiny"
    return train_config(config, data, model)


def heads_step(method: str, target, layout, data: int = 1, model: int = 1):
    config = heads_config(method, data, model)
    trainer = eagle if method.startswith("eagle") else heads
    graphdef, state, _ = trainer.make_state(config, target)
    state, shardings = loop.place_state(state, layout)
    before = host(state)
    if trainer is eagle:
        step, _ = eagle.make_steps(config, graphdef, target, layout, shardings)
    else:
        step, _ = heads.make_steps(config, graphdef, target, 0, layout, shardings)
    state, metrics = step(state, global_batch(heads_batch(), layout))
    return before, (host(state), jax.device_get(metrics))


HEAD_CASES = [
    pytest.param(method, shape, id=f"{method}-{shape[0]}x{shape[1]}",
                 marks=() if shape == (4, 2) and method in ("medusa", "eagle3")
                 else pytest.mark.slow)
    for method in ("medusa", "eagle3", "eagle", "medusa2")
    for shape in MESH_SHAPES
    if method in ("medusa", "eagle3") or shape == (4, 2)  # the variants on one mesh
]  # fmt: skip
_REFERENCES: dict = {}


@pytest.mark.parametrize("method,shape", HEAD_CASES)
def test_head_trainer_step_equals_single_device(head_target, method, shape):
    if method not in _REFERENCES:
        _REFERENCES[method] = heads_step(method, head_target, None)
    before, one = _REFERENCES[method]
    layout = loop.make_layout(heads_config(method, *shape))
    mesh_before, mesh = heads_step(method, head_target, layout, *shape)
    for key, value in before.items():
        np.testing.assert_array_equal(mesh_before[key], value, err_msg=key)
    assert_same_step(before, one, mesh, f"{method} {shape[0]}x{shape[1]}")


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "mesh,batch,match",
    [
        (dict(data=16), 16, r"config.mesh.data=16 x config.mesh.model=1 needs 16 devices, 8"),
        (dict(data=4, model=4), 16, r"needs 16 devices, 8 exist"),
        (dict(model=0), 8, r"config.mesh.model=0 must be a positive int"),
        (dict(data=-2), 8, r"config.mesh.data=-2 must be a positive int"),
        (dict(data=4), 6, r"config.train.batch_size=6 does not divide over config.mesh.data=4"),
    ],
)
def test_bad_meshes_are_refused_by_name(mesh, batch, match):
    config = lm.default_config()
    config.train.batch_size = batch
    config.mesh.update(mesh)
    with pytest.raises(ValueError, match=match):
        loop.make_layout(config)


def test_an_mlp_that_does_not_divide_is_refused_before_compiling():
    config = train_config(lm.default_config(), 1, 8)
    tx, _ = loop.make_optimizer(config.train)
    odd = MESH_TINY.replace(intermediate_size=100)
    with pytest.raises(
        ValueError,
        match=r"mlp.down_proj.*'mlp' axis .*100.* does not divide over the mesh's 'model'",
    ):
        lm.init_train_state(odd, tx, seed=0, layout=loop.make_layout(config))


def test_one_device_config_has_no_layout():
    assert loop.make_layout(lm.default_config()) is None
    config = lm.default_config()
    config.mesh.fsdp = True
    assert loop.make_layout(config) is None  # nothing to split on one device


def test_fsdp_splits_the_residual_axis_over_data(lm_reference):
    config = train_config(lm.default_config(), 4, 2)
    config.mesh.fsdp = True
    layout = loop.make_layout(config)
    tx, _ = loop.make_optimizer(config.train)
    _, state = lm.init_train_state(MESH_TINY, tx, seed=0, layout=layout)
    q = state[0]["layers"][0]["self_attn"]["q_proj"]["kernel"][...]  # [D, N*H]
    assert q.sharding.spec == jax.sharding.PartitionSpec("data", "model")
    # Initialised straight onto the shards: the same values as the one-device init.
    for key, value in host(state).items():
        np.testing.assert_array_equal(value, lm_reference[0][key], err_msg=key)


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_the_trainers_run_end_to_end_on_a_mesh(tmp_path):
    """train_lm, then Medusa-1 and EAGLE-3 on it, each on a (2, 4) mesh: the stream, eval,
    checkpoints, gathering and export work together (the numbers are the step tests')."""
    config = train_lm_configs.get_config("tiny")
    config.data.max_chars = 20_000
    config.train.update(num_steps=4, checkpoint_every=2, eval_every=2, log_every=2,
                        eval_batches=1, progress=False)  # fmt: skip
    config.mesh.update(data=2, model=4)
    summary = lm.train_lm(config, tmp_path / "lm")
    assert np.isfinite(summary["eval_loss"])
    target = sj.load_model(tmp_path / "lm")
    for name, make in (("medusa", train_medusa.get_config), ("eagle3", train_eagle.get_config)):
        run = make("tiny")
        run.data.update(kind="corpus", seq_len=32, max_chars=20_000)
        run.train.update(num_steps=4, checkpoint_every=2, eval_every=2, log_every=2,
                         eval_batches=1, progress=False)  # fmt: skip
        run.mesh.update(data=2, model=4)
        run.target = str(tmp_path / "lm")
        trainer = heads.train_heads if name == "medusa" else eagle.train_eagle
        result = trainer(run, tmp_path / name, target=target)
        assert np.isfinite(result["eval_loss"]) and result["heads_dir"], name
        assert isinstance(sj.load_draft(tmp_path / name), (sj.MedusaHeads, sj.EagleHead))
