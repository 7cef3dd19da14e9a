"""The loop every trainer shares (LM training, draft heads): knobs, optimizer, loop, saves.

`train_config` is every trainer's `config.train` (optimizer, schedule and loop knobs), each
trainer overriding some of its values. A trainer builds its state (an `nnx.split` of modules
and their optimizer), a jitted `train_step(state, batch) -> (state, metrics)` whose metrics
hold at least "loss" (`update` takes the optimizer step), an `eval_fn(state) -> {name: value}`
and its rows, and hands them to `specjax.train.trainer.fit`, which restores, calls
`run_on_rows` (`run` over the rows' resumable batch stream) and exports. `run` reads top to
bottom: train step, metrics every `log_every` (train/<name> averaged over the interval,
train/learning_rate, train/tokens_per_s), eval every `eval_every`, checkpoint every
`checkpoint_every`, a tqdm bar, and a non-finite loss stops the run naming the step (no
checkpoint ever holds a state that saw one).

Resume order, common to every trainer (`specjax.train.trainer.fit`): the model is built from the
seed as on a fresh run, then replaced by the latest committed checkpoint (parameters, optimizer
moments, step count, hence the learning-rate schedule); the batch stream restarts at that step;
`metrics.jsonl` drops the records after it (`MetricWriter(resume_step=...)`).

On a device mesh (`config.mesh`: data, model, fsdp; 1 x 1 is the one-device path, untouched):
`make_layout` checks the mesh against the devices and the batch, `place_state` puts the
parameters and the optimizer state where `specjax.parallel`'s rules say (the optimizer's
moments follow their parameters by path), `jit_train_step` keeps those shardings across steps,
and `sharded_stream` hands each step a global batch over `data` built from the rows this
process reads (`jax.make_array_from_process_local_data`). Checkpoints save the sharded arrays
as they are and restore onto the current run's shardings, whatever mesh wrote them.
"""

from __future__ import annotations

import json
import math
import time

import jax
import ml_collections
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from specjax import parallel
from specjax.train import batching, checkpoint
from specjax.train.metrics import MetricWriter


def train_config(**overrides) -> ml_collections.ConfigDict:
    """The `config.train` section of every trainer: optimizer, schedule and loop knobs.

    Args:
      overrides: a trainer's own defaults for some of the knobs (values only: a name that is
        not a knob here is a KeyError).
    Returns:
      ConfigDict: batch_size, num_steps, the AdamW schedule (learning_rate,
      end_learning_rate_ratio, warmup_steps, weight_decay, b1, b2, grad_clip_norm; see
      `make_optimizer`), the cadence (log_every, eval_every, eval_batches, checkpoint_every),
      max_to_keep (committed checkpoints), progress (a tqdm bar) and debug_nan_at_step.
    """
    train = ml_collections.ConfigDict(dict(
        batch_size=8, num_steps=400,
        # AdamW on a warmup-cosine schedule, gradients clipped first (`make_optimizer`)
        learning_rate=1e-3, end_learning_rate_ratio=0.1, warmup_steps=40,
        weight_decay=0.0, b1=0.9, b2=0.999, grad_clip_norm=1.0,
        # cadence in steps (eval_batches: batches of the held-out rows an eval reads)
        log_every=10, eval_every=100, eval_batches=8, checkpoint_every=100,
        max_to_keep=2,  # committed checkpoints kept
        progress=True,  # a tqdm bar on process 0
        debug_nan_at_step=-1,  # > 0: the loss of that step is made NaN (tests the guard)
    ))  # fmt: skip
    unknown = sorted(set(overrides) - set(train.keys()))
    if unknown:
        raise KeyError(f"train_config: {unknown} are not train knobs; they are {sorted(train)}")
    train.update(overrides)
    return train


def make_optimizer(
    train, *, learning_rate: float | None = None, warmup_steps: int | None = None,
    start_step: int = 0,
) -> tuple[optax.GradientTransformation, optax.Schedule]:  # fmt: skip
    """Clip by global norm, then AdamW on a warmup-cosine schedule (no decay on vectors).

    Args:
      train: a config with learning_rate, end_learning_rate_ratio, warmup_steps, num_steps,
        b1, b2, weight_decay, grad_clip_norm.
      learning_rate, warmup_steps: override the config's (a second parameter group).
      start_step: the schedule is 0 before this step, then warms up from it (a parameter
        group that joins training later, e.g. Medusa-2's backbone after the heads-only stage).
    Returns:
      (the transformation, the learning-rate schedule as a function of the step).
    """
    peak = train.learning_rate if learning_rate is None else learning_rate
    warmup = train.warmup_steps if warmup_steps is None else warmup_steps
    span = max(train.num_steps - start_step, warmup + 1)
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=peak,
        warmup_steps=warmup,
        decay_steps=span,
        end_value=peak * train.end_learning_rate_ratio,
    )
    if start_step:
        later = schedule
        schedule = lambda step: jax.numpy.where(step < start_step, 0.0, later(step - start_step))  # noqa: E731
    # Norm scales and biases are not decayed (the usual GPT recipe).
    decay_mask = lambda params: jax.tree.map(lambda x: x.ndim >= 2, params)  # noqa: E731
    tx = optax.chain(
        optax.clip_by_global_norm(train.grad_clip_norm),
        optax.adamw(
            schedule, b1=train.b1, b2=train.b2, weight_decay=train.weight_decay, mask=decay_mask
        ),
    )
    return tx, schedule


def update(model, optimizer, loss_fn, nan_at_step: int = -1):
    """One optimizer update of `model`, inside a train step: every trainer's update.

    Args:
      model, optimizer: merged from the state (`nnx.merge(graphdef, state)`).
      loss_fn: model -> (loss [] float32, metrics dict).
      nan_at_step: > 0 makes the loss of that step NaN (the test hook of the non-finite
        guard; static: it costs nothing when off).
    Returns:
      (the new state, `nnx.state((model, optimizer))`; {"loss": loss, **metrics}).
    """

    def hooked(m):
        loss, metrics = loss_fn(m)
        if nan_at_step > 0:
            loss = jax.numpy.where(optimizer.step[...] + 1 == nan_at_step, jax.numpy.nan, loss)
        return loss, metrics

    (loss, metrics), grads = nnx.value_and_grad(hooked, has_aux=True)(model)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), {"loss": loss, **metrics}


def check_finite(pending: list[tuple[int, jax.Array]]) -> list[float]:
    """Fetches pending (step, loss) pairs; FloatingPointError at the first non-finite one."""
    values = [float(v) for v in jax.device_get([loss for _, loss in pending])]
    for (step, _), value in zip(pending, values, strict=True):
        if not math.isfinite(value):
            raise FloatingPointError(
                f"training loss is {value} at step {step}: stopping (lower train.learning_rate, "
                "raise train.warmup_steps or tighten train.grad_clip_norm)"
            )
    return values


def save(manager, step: int, state, config) -> None:
    """Starts an async save of `state` (an nnx.State) and the run's config at `step`."""
    # Host copies: the next train step donates (reuses) the device buffers the save would read.
    # Arrays over several devices go to orbax as they are: each process writes its own shards
    # (orbax copies them off the devices before `save` returns).
    host = jax.tree.map(_host_copy, nnx.to_pure_dict(state))
    checkpoint.save(manager, step, host, config.to_dict())


def _host_copy(x):
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
        return x
    return np.array(x)


def restore(manager, step: int, state) -> None:
    """Replaces `state` (an nnx.State, in place) by checkpoint `step`, each array restored onto
    the sharding `state`'s own array has (the run's mesh, whatever mesh saved it)."""
    nnx.replace_by_pure_dict(state, checkpoint.restore(manager, step, nnx.to_pure_dict(state)))


def check_resumable(saved: dict, config, step: int, keys) -> None:
    """ValueError unless the checkpoint's run is this run: every dotted key in `keys` equal.

    Args:
      saved: the config saved with the checkpoint (a dict).
      config: this run's ConfigDict.
      step: the checkpoint's step.
      keys: dotted config paths that must not change between the runs.
    """
    # The saved config went through JSON, which writes tuples as lists: compare both that way.
    current = json.loads(json.dumps(config.to_dict()))
    saved = json.loads(json.dumps(saved))

    def get(d, key):
        for part in key.split("."):
            d = d.get(part, {}) if isinstance(d, dict) else None
        return d

    changed = [k for k in keys if get(saved, k) != get(current, k)]
    if changed:
        raise ValueError(
            f"the workdir's checkpoint (step {step}) is of another run: {', '.join(changed)} "
            "differ from this config; use a new workdir"
        )
    if step > config.train.num_steps:
        raise ValueError(
            f"the workdir's checkpoint is at step {step}, past train.num_steps="
            f"{config.train.num_steps}; use a new workdir or raise num_steps"
        )


# ------------------------------------------------------------------------------- the mesh


def mesh_config() -> dict:
    """The `config.mesh` section of every trainer: data x model devices (1 x 1: one device,
    as without a mesh), fsdp: the residual axis of the parameters and the optimizer state
    also split over `data` (`specjax.parallel.FSDP_RULES`)."""
    return dict(data=1, model=1, fsdp=False)


def make_layout(config) -> parallel.Layout | None:
    """The run's device layout from `config.mesh`; None for 1 x 1 (the one-device path).

    Refused by name, before anything is compiled: a non-positive or non-int axis, more
    devices than exist, a mesh that leaves some processes' devices out, and a
    `train.batch_size` that does not divide over the data axis.
    """
    mesh = config.mesh
    for key in ("data", "model"):
        value = mesh[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.mesh.{key}={value!r} must be a positive int (1: no split)")
    if not isinstance(mesh.fsdp, bool):
        raise ValueError(f"config.mesh.fsdp={mesh.fsdp!r} must be True or False")
    need, have = mesh.data * mesh.model, jax.device_count()
    if need > have:
        raise ValueError(
            f"config.mesh.data={mesh.data} x config.mesh.model={mesh.model} needs {need} "
            f"devices, {have} exist ({jax.default_backend()}); choose data * model <= {have}"
        )
    if jax.process_count() > 1 and need != have:
        raise ValueError(
            f"config.mesh.data={mesh.data} x config.mesh.model={mesh.model} uses {need} of "
            f"the {have} devices of {jax.process_count()} processes; with several processes "
            f"the mesh must span them all (data * model = {have})"
        )
    if need == 1:
        return None
    batch = config.train.batch_size
    if batch % mesh.data:
        raise ValueError(
            f"config.train.batch_size={batch} does not divide over config.mesh.data="
            f"{mesh.data}; use a multiple of {mesh.data}"
        )
    return parallel.Layout(parallel.make_mesh(mesh.data, mesh.model), fsdp=mesh.fsdp)


def place_state(state, layout: parallel.Layout | None, what: str = "training state"):
    """(state placed by the rules, its tree of NamedShardings); (state, None) without a layout.

    The optimizer's moments sit where their parameters do (the rules read the path's last
    module names), its step counts are replicated.
    """
    if layout is None:
        return state, None
    shardings = parallel.tree_shardings(state, layout, what)
    return parallel.place_tree(state, shardings), shardings


def jit_train_step(train_step, layout: parallel.Layout | None, shardings, **jit_kwargs):
    """`jax.jit(train_step, donate_argnums=0)`; under a layout the new state keeps the
    state's `shardings` (so every step runs the one compiled program) and the metrics are
    replicated (every process reads them)."""
    if layout is None:
        return jax.jit(train_step, donate_argnums=0, **jit_kwargs)
    out = (shardings, layout.replicated())
    return jax.jit(train_step, donate_argnums=0, out_shardings=out, **jit_kwargs)


def local_rows(layout: parallel.Layout | None, batch_size: int) -> slice:
    """The rows of each global batch this process reads: all of them in one process, its
    devices' block of the data axis with several."""
    if layout is None or jax.process_count() == 1:
        return slice(None)
    index = parallel.batch_sharding(layout, 1).addressable_devices_indices_map((batch_size,))
    spans = sorted({s[0].indices(batch_size)[:2] for s in index.values()})
    for (_, stop), (start, _) in zip(spans[:-1], spans[1:], strict=True):
        if start != stop:  # make_mesh orders devices by process: each holds one block
            raise ValueError(f"this process's batch rows {spans} are not one block")
    return slice(spans[0][0], spans[-1][1])


def sharded_stream(stream, layout: parallel.Layout | None):
    """(index, batch) of `stream` with each process-local batch made a global array over
    `data` (unchanged without a layout)."""
    if layout is None:
        yield from stream
        return
    for index, batch in stream:
        yield index, parallel.process_local_batch(batch, layout)


def on_layout(fn, layout: parallel.Layout | None):
    """`fn(state, *batch)` with the batch's arrays placed on the layout: rows over `data`
    where they divide (eval batches may be short), replicated otherwise."""
    if layout is None:
        return fn

    def place(x):
        x = np.asarray(x)
        rows = x.shape[0] if x.ndim else 0
        if rows and rows % layout.data == 0:
            return parallel.place(x, parallel.batch_sharding(layout, x.ndim))
        return parallel.place(x, layout.replicated())

    return lambda state, *batch: fn(state, *jax.tree.map(place, batch))


def gather(state, layout: parallel.Layout | None):
    """`state` with every array whole on this process's first device (for export); unchanged
    without a layout. Every process calls it (with several, it is a collective)."""
    if layout is None:
        return state
    device = jax.local_devices()[0]
    return jax.tree.map(lambda x: jax.device_put(parallel.to_host(x), device), state)


def run(
    config, state, train_step, eval_fn, stream, manager, writer, schedule, start: int, *,
    desc: str, tokens_per_step: int,
):  # fmt: skip
    """Steps start+1 .. num_steps, then a final eval and save.

    Args:
      config: the run's ConfigDict (config.train: num_steps, log_every, eval_every,
        checkpoint_every, progress).
      state: the training state (donated to `train_step`).
      train_step: jitted (state, batch) -> (state, metrics dict with "loss").
      eval_fn: state -> {"eval/<name>": value}.
      stream: yields (index, batch) from index `start` (step = index + 1).
      manager, writer: orbax CheckpointManager and MetricWriter.
      schedule: step -> learning rate (logged).
      start: the restored step (0 on a fresh run).
      desc: the progress bar's label; tokens_per_step: for train/tokens_per_s.
    Returns:
      (state, summary): summary holds train/<name> of the last log interval and the final
      eval's values.
    """
    train = config.train
    pending, logged = [], {}
    tick, tick_step = time.perf_counter(), start
    bar = tqdm(
        total=train.num_steps, initial=start, desc=desc, unit="step",
        disable=not train.progress or jax.process_index() != 0,
    )  # fmt: skip
    for index, batch in stream:
        step = index + 1
        if step > train.num_steps:
            break
        state, metrics = train_step(state, batch)
        pending.append((step, metrics))
        bar.update(1)
        if step % train.log_every == 0 or step == train.num_steps:
            logged = _log_interval(pending, tick, step - tick_step, tokens_per_step)
            logged["train/learning_rate"] = float(schedule(step - 1))
            writer.write(step, logged)
            bar.set_postfix(loss=f"{logged['train/loss']:.3f}")
            pending, tick, tick_step = [], time.perf_counter(), step
        if step % train.eval_every == 0 and step < train.num_steps:
            writer.write(step, eval_fn(state))
        if step % train.checkpoint_every == 0 and step < train.num_steps:
            check_finite([(s, m["loss"]) for s, m in pending])  # never save a state that saw one
            save(manager, step, state, config)
    bar.close()
    check_finite([(s, m["loss"]) for s, m in pending])
    final = eval_fn(state)
    writer.write(train.num_steps, final)
    if manager.latest_step() != train.num_steps:
        save(manager, train.num_steps, state, config)
    return state, {**logged, **final}


def run_on_rows(
    config, workdir, state, train_step, eval_fn, train_rows, manager, schedule, start: int, *,
    desc: str, tokens_per_step: int, layout: parallel.Layout | None = None,
):  # fmt: skip
    """`run` over shuffled batches of `train_rows` (LM rows [N, T + 1], or the head trainers'
    {"tokens" [N, T], ...}: `batching.batches`), with a MetricWriter in `workdir` that resumes at
    `start`; under `layout` each process reads its rows of every batch, made a global batch
    over `data`.

    Returns:
      (state, summary, seconds): as `run`, and the wall time of the loop.
    """
    train = config.train
    writer = MetricWriter(workdir, resume_step=start)
    stream = batching.batches(train_rows, train.batch_size, config.seed, start_step=start,
                          local=local_rows(layout, train.batch_size))  # fmt: skip
    stream = sharded_stream(stream, layout)
    begin = time.perf_counter()
    try:
        state, final = run(
            config, state, train_step, eval_fn, stream, manager, writer, schedule, start,
            desc=desc, tokens_per_step=tokens_per_step,
        )  # fmt: skip
    finally:
        manager.wait_until_finished()
        writer.close()
    return state, final, time.perf_counter() - begin


def _log_interval(pending, tick: float, steps: int, tokens_per_step: int) -> dict:
    """Means of the interval's metrics (the loss checked finite first), and throughput."""
    check_finite([(s, m["loss"]) for s, m in pending])
    host = jax.device_get([m for _, m in pending])
    names = host[0].keys()
    out = {f"train/{k}": float(np.mean([np.asarray(m[k]) for m in host])) for k in names}
    out["train/tokens_per_s"] = steps * tokens_per_step / max(time.perf_counter() - tick, 1e-9)
    return out
