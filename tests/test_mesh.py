"""Runs `tests/mesh/` in its own process with 8 emulated CPU devices.

The device count is fixed when JAX starts, so the mesh tests cannot share this process (whose
JAX already runs on one CPU device). The child gets XLA_FLAGS with
--xla_force_host_platform_device_count=8. The whole mesh suite (its fast and slow tests) runs in
one child, from `pytest -m slow`.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_mesh_suite(marker: str) -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    env["SPECJAX_MESH_SUITE"] = "1"
    env["JAX_PLATFORMS"] = "cpu"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/mesh",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",  # one process: the 8 emulated devices and the mesh fixtures are built once
        "-m",
        marker,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"the 8-device mesh suite ({marker}) failed:\n{tail}"
    # The summary line ("N passed in ..."; the ini's -q keeps it) proves tests ran.
    assert " passed" in proc.stdout, f"the 8-device mesh suite ran no test:\n{tail}"


@pytest.mark.slow  # minutes of 8-device programs: CI runs it with the slow tests
def test_mesh_suite():
    """The fast and the slow mesh tests in one child: one start-up and one set of fixtures."""
    run_mesh_suite("not gpu")
