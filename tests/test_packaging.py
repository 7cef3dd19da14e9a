"""What `pip install` puts on sys.path: specjax and its launcher, nothing called launch/configs.

The repository keeps `launch/` and `configs/` at its top level; installed, the launcher is
`specjax_launch` and the configs are read from the repository root. These checks read the
installed distribution, so they fail until the project is reinstalled after a packaging change.
"""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_installed_top_level_names():
    dist = importlib.metadata.distribution("specjax")
    assert set(dist.read_text("top_level.txt").split()) == {"specjax", "specjax_launch"}
    (script,) = [e for e in dist.entry_points if e.group == "console_scripts"]
    assert (script.name, script.value) == ("specjax", "specjax_launch.main:run")


def test_launch_and_configs_are_not_importable_outside_the_repository(tmp_path):
    code = (
        "import importlib.util as u; "
        "print([u.find_spec(n) is not None for n in ('launch', 'configs', 'specjax_launch')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[False, False, True]"


def test_every_specjax_package_is_listed():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "specjax").rglob("__init__.py")
    }
    assert set(listed) == found | {"specjax_launch"}
