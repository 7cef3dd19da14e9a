"""The training loop every trainer shares (LM training, draft heads): optimizer, loop, saves.

A trainer builds its state (an `nnx.split` of modules and their optimizer), a jitted
`train_step(state, batch) -> (state, metrics)` whose metrics hold at least "loss", an
`eval_fn(state) -> {name: value}` and a resumable batch stream, then calls `run`. `run` reads
top to bottom: train step, metrics every `log_every` (train/<name> averaged over the interval,
train/learning_rate, train/tokens_per_s), eval every `eval_every`, checkpoint every
`checkpoint_every`, a tqdm bar, and a non-finite loss stops the run naming the step (no
checkpoint ever holds a state that saw one).

Resume order, common to every trainer: the model is built from the seed as on a fresh run, then
replaced by the latest committed checkpoint (parameters, optimizer moments, step count, hence
the learning-rate schedule); the batch stream restarts at that step; `metrics.jsonl` drops the
records after it (`MetricWriter(resume_step=...)`).
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from specjax.train import checkpoint, data
from specjax.train.metrics import MetricWriter


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
    host = jax.tree.map(np.array, nnx.to_pure_dict(state))
    checkpoint.save(manager, step, host, config.to_dict())


def restore(manager, step: int, state) -> None:
    """Replaces `state` (an nnx.State, in place) by checkpoint `step`."""
    nnx.replace_by_pure_dict(state, checkpoint.restore(manager, step, nnx.to_pure_dict(state)))


def check_resumable(saved: dict, config, step: int, keys) -> None:
    """ValueError unless the checkpoint's run is this run: every dotted key in `keys` equal.

    Args:
      saved: the config saved with the checkpoint (a dict).
      config: this run's ConfigDict.
      step: the checkpoint's step.
      keys: dotted config paths that must not change between the runs.
    """
    current = config.to_dict()

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
    desc: str,
):  # fmt: skip
    """`run` over shuffled batches of `train_rows` (the head trainers' rows: {"tokens" [N, T],
    ...}), with a MetricWriter in `workdir` that resumes at `start`.

    Returns:
      (state, summary, seconds): as `run`, and the wall time of the loop.
    """
    train = config.train
    writer = MetricWriter(workdir, resume_step=start)
    stream = data.batches(train_rows, train.batch_size, config.seed, start_step=start)
    begin = time.perf_counter()
    try:
        state, final = run(
            config, state, train_step, eval_fn, stream, manager, writer, schedule, start,
            desc=desc, tokens_per_step=train.batch_size * train_rows["tokens"].shape[1],
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
