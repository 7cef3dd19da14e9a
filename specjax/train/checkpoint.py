"""Orbax checkpoints of a training state, with the run's config saved beside it as JSON.

    manager = checkpoint.make_manager(workdir / "checkpoints", max_to_keep=2)
    if (step := manager.latest_step()) is not None:           # None on a fresh run
        state = checkpoint.restore(manager, step, state)
    checkpoint.save(manager, step, state, config.to_dict())   # async: returns at once
    manager.wait_until_finished()                             # before the process exits

Layout: `<directory>/<step>/state` (the pytree, orbax's standard format) and
`<directory>/<step>/config` (JSON). Saves are asynchronous: arrays are copied off the
device, then written by a background thread while training goes on; a step directory is
renamed into place only when complete, so a process killed mid-save leaves at most a
`*.orbax-checkpoint-tmp-*` directory, which the manager neither lists nor restores (and
removes when it starts). "Latest" therefore always means the latest committed step.

The state passed in is any pytree of arrays: the trainer passes the pure-dict form of its
`nnx.State` (`nnx.to_pure_dict`), so the files hold plain nested dicts of arrays.

Topologies. Arrays sharded over a device mesh are saved as they lie (each process writes the
shards it holds) and restored onto whatever shardings `like` carries: a checkpoint written by
8 devices restores onto a mesh of 2, or onto one device, with identical values.
"""

from __future__ import annotations

from pathlib import Path

import jax
import orbax.checkpoint as ocp

STATE, CONFIG = "state", "config"


def make_manager(
    directory: str | Path, *, max_to_keep: int = 2, async_save: bool = True
) -> ocp.CheckpointManager:
    """A CheckpointManager over `directory` (created if missing).

    Args:
      directory: where step directories live.
      max_to_keep: committed checkpoints kept; older ones are deleted.
      async_save: write in a background thread (call `wait_until_finished` before exit).
    Returns:
      The manager; leftover temporary directories of interrupted saves are cleaned up.
    """
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=True,
        cleanup_tmp_directories=True,
        enable_async_checkpointing=async_save,
    )
    return ocp.CheckpointManager(
        Path(directory).absolute(), options=options, item_names=(STATE, CONFIG)
    )


def save(manager: ocp.CheckpointManager, step: int, state, config: dict) -> None:
    """Starts saving `state` (a pytree of arrays) and `config` (JSON-able) as step `step`.

    Args:
      manager: from `make_manager`.
      step: the number of optimizer updates the state has seen.
      state: the pytree to save.
      config: the run's configuration, saved beside the state.
    """
    manager.save(
        int(step),
        args=ocp.args.Composite(
            **{STATE: ocp.args.StandardSave(state), CONFIG: ocp.args.JsonSave(config)}
        ),
        force=True,  # the trainer decides when to save; no interval policy on top
    )


def restore(manager: ocp.CheckpointManager, step: int, like):
    """Restores step `step` into the structure of `like`, onto `like`'s shardings.

    Args:
      manager: from `make_manager`.
      step: a committed step (`manager.latest_step()` for the latest).
      like: a pytree with the state's structure, shapes and dtypes (e.g. the fresh state):
        jax.Arrays or jax.ShapeDtypeStructs whose `sharding` says where each restored array
        goes (the current run's mesh, whatever mesh or device count saved it).
    Returns:
      The restored pytree.
    """
    # Shape, dtype and the target sharding of every leaf: orbax reads each device's slices.
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    restored = manager.restore(
        step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore(abstract)})
    )
    return restored[STATE]


def saved_config(manager: ocp.CheckpointManager, step: int) -> dict:
    """The config saved with step `step`."""
    restored = manager.restore(step, args=ocp.args.Composite(**{CONFIG: ocp.args.JsonRestore()}))
    return restored[CONFIG]
