"""The specjax launcher: one absl entry point that runs a config's task.

    python -m launch.main --config=configs/quickstart.py --workdir=/tmp/specjax/quickstart
    python -m launch.main --config=configs/train_lm.py:tiny --workdir=/tmp/lm \
        --config.train.num_steps=50
    specjax --config=configs/bench.py --workdir=/tmp/bench   # the installed console script

`--config=<file>.py[:arg]` calls the file's `get_config(arg)`; `--config.a.b=value` overrides
one field (the config is locked, so a misspelt field is an error). `config.task` picks the
library function: train_lm, train_heads, train_eagle, bench, pick or quickstart. Library code never reads flags.

Several processes (one per host of a TPU pod slice, one per GPU of a cluster): the same
command on every process. TPU pods and SLURM need no flag (JAX detects them); elsewhere
`--coordinator_address=host0:1234 --num_processes=N --process_id=i` (or the variables
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID). `jax.distributed` is joined
before the config file loads, because loading it may already ask JAX for its backend.
Every process logs its index. Orbax coordinates checkpoint writes across processes and
JAX writes compilation-cache entries from process 0 only, and every task writes its own
files (metrics, exported models, results.json, report.md, plots) from process 0 only.

Compilation cache: JAX's persistent cache is on by default in `<workdir>/jax_cache`, so a
rerun (or a resumed run) loads its compiled programs instead of compiling them again;
`--compilation_cache_dir=DIR` shares one between workdirs and processes,
`--compilation_cache_dir=none` turns it off.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import sys

import flax
import jax
from absl import app, flags
from ml_collections import config_flags

import specjax
from specjax import parallel

CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, `path.py[:arg]`.")
NO_CACHE = "none"  # --compilation_cache_dir=none: no persistent compilation cache


def _check_address(value) -> bool:
    if value is not None and not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", value):
        raise flags.ValidationError(
            f"--coordinator_address={value!r} must be host:port (e.g. host0:1234)"
        )
    return True


def _check_processes(values) -> bool:
    n, i = values["num_processes"], values["process_id"]
    if n is not None and i is not None and i >= n:
        raise flags.ValidationError(
            f"--process_id={i} must be below --num_processes={n} (ids 0..{n - 1})"
        )
    return True


def define_launch_flags(flag_values=flags.FLAGS) -> dict:
    """Defines --workdir and the launcher's process and cache flags on `flag_values`.

    `parse_flags` reads these ahead of the config file (see there), so they are defined here
    once for both passes. Returns {name: FlagHolder}.
    """
    fv = dict(flag_values=flag_values)
    holders = {
        "workdir": flags.DEFINE_string(
            "workdir", None, "Directory for checkpoints, metrics and results.", **fv
        ),
        "coordinator_address": flags.DEFINE_string(
            "coordinator_address",
            None,
            "host:port of process 0's jax.distributed coordinator, the same on every process. "
            "Default: JAX_COORDINATOR_ADDRESS, or the cluster's own (TPU pod, SLURM); none of "
            "them: one process.",
            **fv,
        ),
        "num_processes": flags.DEFINE_integer(
            "num_processes",
            None,
            "Processes in the run (default: JAX_NUM_PROCESSES or the cluster's).",
            lower_bound=1,
            **fv,
        ),
        "process_id": flags.DEFINE_integer(
            "process_id",
            None,
            "This process's index, 0..num_processes-1 (default: JAX_PROCESS_ID or the cluster's).",
            lower_bound=0,
            **fv,
        ),
        "compilation_cache_dir": flags.DEFINE_string(
            "compilation_cache_dir",
            None,
            "JAX's persistent compilation cache (default: <workdir>/jax_cache; a shared "
            f"directory reuses compiles across workdirs; {NO_CACHE!r}: off).",
            **fv,
        ),
    }
    flags.register_validator("coordinator_address", _check_address, **fv)
    flags.register_multi_flags_validator(["num_processes", "process_id"], _check_processes, **fv)
    return holders


WORKDIR = define_launch_flags()["workdir"]
flags.mark_flags_as_required(["config", "workdir"])

# task -> "module:function"; imported only when that task runs.
TASKS = {
    "train_lm": "specjax.train.lm:train_lm",
    "train_heads": "specjax.train.heads:train_heads",
    "train_eagle": "specjax.train.eagle:train_eagle",
    "bench": "specjax.bench.harness:run_bench",
    "pick": "specjax.picker:pick",
    "quickstart": "specjax.pipelines.quickstart:quickstart",
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
    """Quiets orbax's INFO chatter; logs versions, this process's index, the devices, the
    compilation cache and the resolved config."""
    logging.getLogger("absl").addFilter(_DropOrbaxInfo())
    logging.info(
        "jax %s, flax %s, specjax %s", jax.__version__, flax.__version__, specjax.__version__
    )
    joined = "joined" if jax.distributed.is_initialized() else "not used"
    logging.info("process %d of %d (jax.distributed: %s)", jax.process_index(),
                 jax.process_count(), joined)  # fmt: skip
    logging.info("devices (%d processes): %s", jax.process_count(), jax.devices())
    cache = jax.config.jax_compilation_cache_dir
    logging.info("compilation cache: %s", cache or "off")
    logging.info("config:\n%s", json.dumps(config.to_dict(), indent=2, default=str))


def read_launch_flags(argv) -> dict:
    """The launcher's own flags (`define_launch_flags`) read from `argv`, the rest ignored.

    Raises:
      flags.Error naming the flag when a value is malformed or out of range.
    """
    early = flags.FlagValues()
    define_launch_flags(early)
    early.set_gnu_getopt(True)  # read past positional arguments, as the full parse does
    early(argv, known_only=True)
    return {name: early[name].value for name in early}


def start_distributed(coordinator_address=None, num_processes=None, process_id=None) -> bool:
    """Joins `jax.distributed` from the flags or the environment; False for one process.

    Raises:
      ValueError when --num_processes / --process_id come without a coordinator address (from
      the flag or JAX_COORDINATOR_ADDRESS) and no cluster environment: they would be ignored.
    """
    given = {"num_processes": num_processes, "process_id": process_id}
    if coordinator_address is None and not os.environ.get("JAX_COORDINATOR_ADDRESS"):
        clusters = ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "OMPI_MCA_orte_hnp_uri")
        passed = [f"--{k}={v}" for k, v in given.items() if v is not None]
        if passed and not any(k in os.environ for k in clusters):
            raise ValueError(
                f"{' '.join(passed)} needs --coordinator_address=host:port (or "
                "JAX_COORDINATOR_ADDRESS): without one there is nothing to join"
            )
    return parallel.initialize_distributed(coordinator_address, num_processes, process_id)


def enable_compilation_cache(cache_dir: str | None, workdir: str) -> str | None:
    """Turns on JAX's persistent compilation cache; returns its directory (None: off).

    Args:
      cache_dir: the directory, None for `<workdir>/jax_cache`, or "none" for no cache.
      workdir: the run's directory.
    Every program is cached, however short its compile or small its executable: a CPU run
    compiles many small ones, and together they are most of a short run's start-up.
    """
    if cache_dir is not None and cache_dir.strip().lower() == NO_CACHE:
        return None
    path = os.path.abspath(cache_dir or os.path.join(workdir, "jax_cache"))
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path


def parse_flags(argv):
    """absl's flag parsing, after joining jax.distributed and turning on the cache.

    The config file is loaded while flags parse, and loading it may touch JAX's backend
    (`jax.default_backend()`), after which `jax.distributed.initialize` is refused; so the
    launcher's own flags are read first, acted on, and then everything is parsed.
    """
    try:
        launch = read_launch_flags(argv)
    except flags.Error:
        return app.parse_flags_with_usage(argv)  # reports the bad flag by name and exits
    try:
        start_distributed(
            launch["coordinator_address"], launch["num_processes"], launch["process_id"]
        )
    except ValueError as e:  # as absl reports a bad flag
        sys.stderr.write(f"FATAL Flags parsing error: {e}\n")
        sys.exit(1)
    if launch["workdir"]:
        enable_compilation_cache(launch["compilation_cache_dir"], launch["workdir"])
    return app.parse_flags_with_usage(argv)


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
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    run()
