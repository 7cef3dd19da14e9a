"""Resumable bench runs: every finished cell is written as it finishes, and a re-run of the
same benchmark measures only the cells still missing.

A real-model bench runs for tens of minutes, one cell (batch size x temperature, every
method against one baseline) at a time; a crash in the last cell (an out-of-memory compile at
batch 8, a killed job) used to lose every finished one. `<workdir>/cells.partial.json` holds
the finished cells under a fingerprint of what they were measured with: the bench config,
the models (every parameter's shape, dtype and a digest of its values) and the machine (CPU,
devices, jax; not its load). A re-run whose fingerprint matches takes the finished cells as
they are; one whose fingerprint differs is measured afresh (a warning says which part
changed). The file is removed once `results.json` is written.

    store = CellStore(workdir, fingerprint(cfg, models, machine))
    rows = store.get("b=1 T=0.0")          # None: not measured yet
    store.put("b=1 T=0.0", rows)          # written at once
    store.finish()                         # results.json exists: drop the partial file
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import jax
import numpy as np

log = logging.getLogger(__name__)

PARTIAL = "cells.partial.json"
# Machine facts that say what the numbers were measured on (the load at start does not).
MACHINE_KEYS = ("platform", "processor", "cpu_count", "jax", "backend", "devices", "cpu",
                "cpu_kernel")  # fmt: skip


def params_digest(tree) -> str:
    """A digest of a pytree of arrays: every leaf's path, shape, dtype and values.

    Leaves that this process cannot read whole (sharded over several hosts) count by path,
    shape and dtype only.
    """
    h = hashlib.blake2b(digest_size=16)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not hasattr(leaf, "shape"):
            continue
        h.update(f"{jax.tree_util.keystr(path)}:{leaf.shape}:{leaf.dtype};".encode())
        if getattr(leaf, "is_fully_addressable", True):
            h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()


def _plain(obj):
    """numpy scalars and arrays as Python numbers and lists; anything else by name."""
    return obj.tolist() if hasattr(obj, "tolist") else str(obj)


def _json_normal(value):
    """`value` as JSON gives it back (tuples become lists), so saved and new compare equal."""
    return json.loads(json.dumps(value, default=_plain))


def fingerprint(config: dict, models: dict, machine: dict) -> dict:
    """What a finished cell was measured with.

    Args:
      config: the bench config as a dict.
      models: {name: digest string} of every model and draft the bench runs.
      machine: `timing.machine_info()`.
    """
    return _json_normal(
        {
            "config": config,
            "models": models,
            "machine": {k: machine.get(k) for k in MACHINE_KEYS},
        }
    )


class CellStore:
    """Finished cells of one bench run, kept in `<workdir>/cells.partial.json`.

    Only process 0 writes (several processes share the workdir); every process reads, so
    all of them skip the same cells.
    """

    def __init__(self, workdir: Path, key: dict, *, write: bool = True):
        self.path = Path(workdir) / PARTIAL
        self.key = key
        self.write = write
        self.cells: dict[str, object] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.warning("bench: ignoring unreadable %s (%s); measuring every cell", self.path, e)
            return
        old = saved.get("key", {})
        changed = [
            part for part in ("config", "models", "machine") if old.get(part) != self.key[part]
        ]
        if changed:
            log.warning(
                "bench: not resuming from %s: the %s changed since it was written; "
                "measuring every cell afresh", self.path, " and ".join(changed),
            )  # fmt: skip
            return
        self.cells = saved.get("cells", {})
        if self.cells:
            log.info("bench: resuming, %d finished cell(s) from %s: %s", len(self.cells),
                     self.path, ", ".join(self.cells))  # fmt: skip

    def get(self, name: str):
        """The saved result of cell `name`, or None."""
        return self.cells.get(name)

    def put(self, name: str, value) -> None:
        """Record a finished cell and write the file at once (atomically: a crash while
        writing leaves the previous file)."""
        self.cells[name] = _json_normal(value)
        if not self.write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": self.key, "cells": self.cells}) + "\n")
        tmp.replace(self.path)

    def finish(self) -> None:
        """The run's results.json exists: the partial file has served."""
        if self.write:
            self.path.unlink(missing_ok=True)
