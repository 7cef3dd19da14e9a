"""The specjax launcher: one absl entry point that runs a config's task.

    python -m launch.main --config=configs/quickstart.py --workdir=/tmp/specjax/quickstart
    python -m launch.main --config=configs/train_lm.py:tiny --workdir=/tmp/lm \
        --config.train.num_steps=50
    specjax --config=configs/bench.py --workdir=/tmp/bench   # the installed console script

`--config=<file>.py[:arg]` calls the file's `get_config(arg)`; `--config.a.b=value` overrides
one field (the config is locked, so a misspelt field is an error). `config.task` picks the
library function: train_lm, train_heads, train_eagle, bench, pick or quickstart. Library code never reads flags.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys

import flax
import jax
from absl import app, flags
from ml_collections import config_flags

import specjax

CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, `path.py[:arg]`.")
WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and results.")
flags.mark_flags_as_required(["config", "workdir"])

# task -> "module:function"; imported only when that task runs.
TASKS = {
    "train_lm": "specjax.train.lm:train_lm",
    "train_heads": "specjax.train.heads:train_heads",
    "train_eagle": "specjax.train.eagle:train_eagle",
    "bench": "specjax.bench.harness:run_bench",
    "pick": "specjax.picker:pick",
    "quickstart": "specjax.train.quickstart:quickstart",
}
# The part of the config each task function takes (None: the whole config).
TASK_CONFIG = {
    "train_lm": None,
    "train_heads": None,
    "train_eagle": None,
    "bench": "bench",
    "pick": "pick",
    "quickstart": None,
}


def dispatch(config, workdir) -> dict:
    """Runs `config.task` on `config` in `workdir`; returns what the task function returns."""
    task = config.get("task")
    if task not in TASKS:
        raise ValueError(f"config.task={task!r} is not one of {sorted(TASKS)}")
    module_name, fn_name = TASKS[task].split(":")
    fn = getattr(importlib.import_module(module_name), fn_name)
    part = TASK_CONFIG[task]
    return fn(config if part is None else config[part], workdir)


class _DropOrbaxInfo(logging.Filter):
    """Orbax logs every checkpoint phase at INFO; keep its warnings, drop the chatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or "orbax" not in record.pathname


def log_setup(config) -> None:
    """Quiets orbax's INFO chatter; logs versions, devices and the resolved config."""
    logging.getLogger("absl").addFilter(_DropOrbaxInfo())
    logging.info(
        "jax %s, flax %s, specjax %s", jax.__version__, flax.__version__, specjax.__version__
    )
    logging.info("devices (%d processes): %s", jax.process_count(), jax.devices())
    logging.info("config:\n%s", json.dumps(config.to_dict(), indent=2, default=str))


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = CONFIG.value
    log_setup(config)
    dispatch(config, WORKDIR.value)


def run() -> None:
    """Console-script entry point (`specjax ...`): what `python -m launch.main` does.

    Like `python -m`, it puts the current directory first on sys.path, so that config files
    importing their siblings (`from configs import train_lm`) resolve from the repository root.
    """
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    app.run(main)


if __name__ == "__main__":
    run()
