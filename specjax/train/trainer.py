"""The run every trainer makes: setup, restore, loop, eval, export, results.json.

Each trainer (`lm.train_lm`, `heads.train_heads`, `eagle.train_eagle`) reads the same way:

    workdir, layout = trainer.begin(config, workdir)   # the mesh checked, the workdir made
    ...setup: data, target, features, state and optimizer placed on the layout...
    return trainer.fit(config, workdir, layout, state, trainer.Pieces(...))

and `fit` does the rest, in this order, the same for all of them:

1. Restore (`restore_latest`): the latest committed checkpoint in `<workdir>/checkpoints`, if
   any. The config saved with it must equal this run's on the trainer's resume keys (both
   compared as their JSON copies: `loop.check_resumable`); the state is replaced in place
   (onto the run's shardings, whatever mesh saved it); without a mesh its arrays are then
   re-placed as a fresh run's are. The order of the rest of a resume is `specjax.train.loop`'s.
2. Steps: the trainer's `make_steps(start)` (Medusa-2's staged step counts from the restored
   step).
3. Loop and eval (`loop.run_on_rows`): steps start+1..num_steps with metrics, evals and
   checkpoints, then the final eval and save; orbax's saves are waited for.
4. Export, on process 0: the trainer's `export(model)`. A ValueError (e.g. a layout that
   `specjax.io.drafts` refuses for this model) is logged and reported in the summary
   (`export_error`, each output None) rather than losing the trained run: the checkpoint holds
   it.
5. `<workdir>/results.json`: {"task": ..., "runs": [summary]} (the form `launch.sweep` reads);
   every process returns process 0's summary once it is written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from specjax import parallel
from specjax.train import checkpoint, loop
from specjax.train.metrics import JSONL_NAME, read_jsonl

log = logging.getLogger(__name__)

CHECKPOINTS, HF, RESULTS = "checkpoints", "hf", "results.json"


@dataclasses.dataclass(frozen=True)
class Pieces:
    """What a trainer's setup hands to `fit`.

    Attributes:
      task: the trainer's name in the summary and results.json ("train_lm", ...).
      graphdef: of `nnx.split((model, optimizer))`, the state `fit` trains.
      schedule: step -> learning rate (`loop.make_optimizer`), logged.
      train_rows, eval_rows: what `batching.batches` and `evaluate` read.
      make_steps: start -> (train_step, eval_step), jitted; `start` is the restored step.
      evaluate: (eval_step, state, eval_rows, batch_size, num_batches) -> {"eval/<name>": v},
        with at least "eval/loss".
      resume_keys: dotted config paths a resumed run must share with the checkpoint's run.
      desc: the progress bar's label.
      tokens_per_step: the tokens a train step reads (for train/tokens_per_s).
      summarize: (model, final metrics) -> the trainer's own summary fields.
      export: model -> None; writes `outputs` (process 0 only); ValueError: refused.
      outputs: {summary key: path} of what `export` writes.
    """

    task: str
    graphdef: Any
    schedule: Callable
    train_rows: Any
    eval_rows: Any
    make_steps: Callable[[int], tuple[Callable, Callable]]
    evaluate: Callable[..., dict]
    resume_keys: tuple[str, ...]
    desc: str
    tokens_per_step: int
    summarize: Callable[[Any, dict], dict]
    export: Callable[[Any], None]
    outputs: dict[str, Path]


def begin(config, workdir) -> tuple[Path, parallel.Layout | None]:
    """(the absolute workdir, created if missing; the run's layout: `loop.make_layout`).

    A bad mesh is refused before anything is loaded or written.
    """
    layout = loop.make_layout(config)
    workdir = Path(workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir, layout


def fit(config, workdir: Path, layout: parallel.Layout | None, state, pieces: Pieces) -> dict:
    """Restore, loop, eval, export and results.json (the module docstring's order).

    Args:
      config: the run's ConfigDict (config.train: `loop.train_config`).
      workdir, layout: from `begin`.
      state: the fresh training state, placed (`loop.place_state`); restored in place, then
        donated to the train step.
      pieces: the trainer's own parts.
    Returns:
      The summary (also results.json's one run): task, step, resumed_from, train_loss,
      eval_loss, the trainer's fields, train_seconds and the export's outputs (each None,
      with export_error, where the export was refused).
    """
    train = config.train
    manager = checkpoint.make_manager(workdir / CHECKPOINTS, max_to_keep=train.max_to_keep)
    start = restore_latest(manager, config, state, layout, pieces.resume_keys)
    train_step, eval_step = pieces.make_steps(start)
    eval_rows, batch, count = pieces.eval_rows, train.batch_size, train.eval_batches
    eval_fn = lambda s: pieces.evaluate(eval_step, s, eval_rows, batch, count)  # noqa: E731
    state, final, seconds = loop.run_on_rows(
        config, workdir, state, train_step, eval_fn, pieces.train_rows, manager,
        pieces.schedule, start, desc=pieces.desc, tokens_per_step=pieces.tokens_per_step,
        layout=layout,
    )  # fmt: skip
    model, _ = nnx.merge(pieces.graphdef, loop.gather(state, layout))
    summary = {
        "task": pieces.task,
        "step": int(train.num_steps),
        "resumed_from": start,
        "train_loss": last_train_loss(final, workdir),
        "eval_loss": final["eval/loss"],
        **pieces.summarize(model, final),
        "train_seconds": round(seconds, 2),
    }
    return finish(summary, workdir, lambda: pieces.export(model), pieces.outputs)


def restore_latest(manager, config, state, layout: parallel.Layout | None, keys) -> int:
    """Replaces `state` in place by the latest committed checkpoint; its step (0: none).

    ValueError (`loop.check_resumable`) when the checkpoint is of another run: a dotted key
    of `keys` differs from this config's, or it is past train.num_steps.
    """
    start = manager.latest_step() or 0
    if not start:
        return 0
    loop.check_resumable(checkpoint.saved_config(manager, start), config, start, keys)
    loop.restore(manager, start, state)
    if layout is None:
        # Orbax hands the arrays back committed to a sharding, which the lowered step
        # records: uncommitted copies give the fresh run's program (a persistent
        # compilation cache then serves a resumed run without compiling). On a mesh the
        # arrays are restored onto the fresh run's shardings already.
        nnx.update(state, jax.tree.map(lambda x: jax.device_put(np.asarray(x)), state))
    log.info("resumed from step %d of %d", start, config.train.num_steps)
    return start


def last_train_loss(final: dict, workdir: Path) -> float:
    """The last log interval's train/loss; when the run had nothing left to train (resumed at
    its last step) the last one `metrics.jsonl` holds (NaN if none)."""
    loss = final.get("train/loss", math.nan)
    if math.isnan(loss):
        logged = [r["train/loss"] for r in read_jsonl(workdir / JSONL_NAME) if "train/loss" in r]
        loss = logged[-1] if logged else loss
    return loss


def export(write: Callable[[], None], outputs: dict[str, Path], workdir: Path) -> dict:
    """Runs `write`: {key: path} of `outputs`, or, where it raised ValueError, each None and
    export_error (logged: the run's checkpoint still holds what was trained)."""
    try:
        write()
    except ValueError as e:
        log.warning("not exported (%s); the trained state stays in %s", e, workdir / CHECKPOINTS)
        return {**dict.fromkeys(outputs), "export_error": str(e)}
    return {key: str(path) for key, path in outputs.items()}


def finish(summary: dict, workdir: Path, write: Callable[[], None], outputs: dict) -> dict:
    """Process 0 exports (`export`) and writes results.json; every process returns process 0's
    summary once the file exists."""
    task = summary["task"]
    if jax.process_index() == 0:
        summary = {**summary, **export(write, outputs, workdir)}
        results = {"task": task, "runs": [summary]}
        (workdir / RESULTS).write_text(json.dumps(results, indent=2) + "\n")
    parallel.barrier(f"{task} export {workdir}")  # every process returns once it exists
    if jax.process_index() != 0:  # what process 0's export wrote (or refused)
        summary = json.loads((workdir / RESULTS).read_text())["runs"][0]
    return summary
