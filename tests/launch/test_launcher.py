"""The launcher's process and compilation-cache flags.

Read ahead of the config file (`parse_flags`), refused by name when malformed; with no flag,
no variable and no cluster environment nothing joins jax.distributed; the persistent
compilation cache written by one run is read by the next.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from absl import flags

from launch import main

REPO = Path(__file__).resolve().parents[2]
CLUSTER_VARIABLES = (
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "SLURM_JOB_ID",
    "TPU_WORKER_HOSTNAMES",
    "OMPI_MCA_orte_hnp_uri",
)


@pytest.fixture
def no_cluster(monkeypatch):
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def launch(*argv: str, env: dict | None = None, timeout: int = 300):
    """`python -m launch.main <argv>` in a child process (CPU)."""
    clean = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "launch.main", *argv],
        cwd=REPO,
        env={**clean, "JAX_PLATFORMS": "cpu", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_launch_flags_are_read_without_loading_the_config():
    values = main.read_launch_flags(
        ["launch.main", "--config=configs/missing.py:x", "--config.a.b=1", "--workdir", "w",
         "--coordinator_address=host0:1234", "positional", "--num_processes=4",
         "--process_id=3", "--compilation_cache_dir=none"]
    )  # fmt: skip
    assert values == {
        "workdir": "w",
        "coordinator_address": "host0:1234",
        "num_processes": 4,
        "process_id": 3,
        "compilation_cache_dir": "none",
    }
    assert main.read_launch_flags(["launch.main"]) == dict.fromkeys(values)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--num_processes=0"], "--num_processes=0"),
        (["--num_processes=two"], "--num_processes=two"),
        (["--process_id=-1"], "--process_id=-1"),
        (["--num_processes=2", "--process_id=2"], "--process_id=2 must be below --num_processes=2"),
        (["--coordinator_address=host0"], "--coordinator_address='host0' must be host:port"),
    ],
)
def test_bad_launch_flags_are_refused_by_name(argv, message):
    with pytest.raises(flags.Error, match=message):
        main.read_launch_flags(["launch.main", *argv])


def test_no_flags_and_no_environment_join_nothing(no_cluster):
    assert main.start_distributed() is False
    assert not jax.distributed.is_initialized()


def test_process_flags_without_a_coordinator_are_refused(no_cluster):
    with pytest.raises(ValueError, match="--num_processes=2 --process_id=1 needs --coord"):
        main.start_distributed(num_processes=2, process_id=1)


def test_the_launcher_exits_naming_the_bad_flag(tmp_path):
    proc = launch("--config=configs/train_lm.py:tiny", f"--workdir={tmp_path}", "--process_id=1")
    assert proc.returncode != 0
    assert "--process_id=1 needs --coordinator_address" in proc.stderr
    proc = launch("--config=configs/train_lm.py:tiny", f"--workdir={tmp_path}", "--num_processes=0")
    assert proc.returncode != 0
    assert "flag --num_processes=0" in proc.stderr


def test_no_cache_dir_means_no_cache(tmp_path):
    assert main.enable_compilation_cache("none", str(tmp_path)) is None
    assert main.enable_compilation_cache("None", str(tmp_path)) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # 18 s: a launcher child joining jax.distributed (CI runs it with the slow tests)
def test_one_process_joins_through_the_flags(tmp_path):
    port = _free_port()
    proc = launch(
        "--config=configs/train_lm.py:tiny",
        f"--workdir={tmp_path}",
        "--config.train.num_steps=1",
        f"--coordinator_address=localhost:{port}",
        "--num_processes=1",
        "--process_id=0",
        "--compilation_cache_dir=none",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "process 0 of 1 (jax.distributed: joined)" in proc.stderr
    assert "compilation cache: off" in proc.stderr


def _cache_files(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


@pytest.mark.slow  # two launcher processes: 20 s
def test_the_second_run_hits_the_compilation_cache(tmp_path):
    """Run 1 compiles and writes `<workdir>/jax_cache`; run 2, in another workdir given that
    cache, compiles nothing: no persistent-cache miss logged and no entry added."""
    argv = ["--config=configs/train_lm.py:tiny", "--config.train.num_steps=2"]
    env = {"JAX_EXPLAIN_CACHE_MISSES": "1"}  # each persistent-cache miss is logged
    first = launch(*argv, f"--workdir={tmp_path / 'a'}", env=env)
    assert first.returncode == 0, first.stderr[-4000:]
    cache = tmp_path / "a" / "jax_cache"
    assert f"compilation cache: {cache}" in first.stderr
    assert "process 0 of 1 (jax.distributed: not used)" in first.stderr
    written = _cache_files(cache)
    assert written, "the first run wrote no cache entries"
    assert first.stderr.count("PERSISTENT COMPILATION CACHE MISS") > 0

    second = launch(
        *argv, f"--workdir={tmp_path / 'b'}", f"--compilation_cache_dir={cache}", env=env
    )
    assert second.returncode == 0, second.stderr[-4000:]
    assert second.stderr.count("PERSISTENT COMPILATION CACHE MISS") == 0
    assert _cache_files(cache) == written
    assert not (tmp_path / "b" / "jax_cache").exists()
