"""Metric writers: one `write(step, scalars)` call goes to TensorBoard and to a JSONL file.

    writer = MetricWriter(workdir, resume_step=restored_step)
    writer.write(step, {"train/loss": 2.31, "train/lr": 1e-3})
    writer.close()

`<workdir>/metrics.jsonl` holds one JSON object per write, `{"step": ..., name: value, ...}`;
TensorBoard event files go to `<workdir>/tensorboard`. A run resumed from step k first drops
the JSONL records after k (they belong to steps the interrupted run will redo), so the file
reads as one uninterrupted run. Only process 0 writes; the others get a writer that does
nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax

JSONL_NAME = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a metrics JSONL file, in order ([] if the file does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _truncate_after(path: Path, step: int) -> None:
    """Rewrites `path` without the records whose step is after `step`."""
    kept = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))


class MetricWriter:
    """Scalars to TensorBoard (tensorboardX) and JSONL, on process 0 only.

    Args:
      workdir: the run's directory.
      resume_step: the step the run restarts from; later JSONL records are dropped.
      tensorboard: also write TensorBoard event files.
    """

    def __init__(self, workdir: str | Path, resume_step: int = 0, tensorboard: bool = True):
        self.active = jax.process_index() == 0
        self.path = Path(workdir) / JSONL_NAME
        self._tb = None
        if not self.active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            _truncate_after(self.path, resume_step)
        self._file = self.path.open("a")
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(Path(workdir) / TENSORBOARD_DIR))

    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Writes `scalars` (name -> number) at `step`; non-finite values are written as null."""
        if not self.active:
            return
        values = {k: float(v) for k, v in scalars.items()}
        record = {"step": int(step)}
        record.update({k: v if math.isfinite(v) else None for k, v in values.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, int(step))

    def close(self) -> None:
        if not self.active:
            return
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
