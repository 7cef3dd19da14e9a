"""Runs `tests/mesh/` in its own process with 8 emulated CPU devices.

The device count is fixed when JAX starts, so the mesh tests cannot share this process (whose
JAX already runs on one CPU device). The child gets XLA_FLAGS with
--xla_force_host_platform_device_count=8 and the same marker selection as this run: the fast
mesh tests run with the README's command, the `slow` ones with `pytest -m slow`.
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
        "-m",
        marker,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"the 8-device mesh suite ({marker}) failed:\n{tail}"
    # The summary line ("N passed in ..."; the ini's -q keeps it) proves tests ran.
    assert " passed" in proc.stdout, f"the 8-device mesh suite ran no test:\n{tail}"


@pytest.mark.slow  # 1.5 min of 8-device programs: CI runs it with the slow tests
def test_mesh_suite():
    run_mesh_suite("not slow and not gpu")


@pytest.mark.slow
def test_mesh_suite_slow():
    run_mesh_suite("slow")
