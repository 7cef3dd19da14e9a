"""The house's arrows, read from the source: data flows one way and every import is in sight.

    specjax.data  <-  specjax.train  <-  specjax.pipelines  ->  specjax.bench  ->  specjax.data

`bench` never imports `train` and `train` never imports `bench`; a pipeline (train, then
benchmark) imports both, and nothing in the library imports a pipeline (the launcher, configs,
experiments and tests do). Every import of a specjax module sits at module level, where a
reader sees what a module depends on (`if TYPE_CHECKING:` blocks count as module level). No
library file is over 600 lines.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "specjax"
MAX_LINES = 600

# (importer's package, imported package): arrows that must not exist.
FORBIDDEN = (
    ("specjax.bench", "specjax.train"),
    ("specjax.bench", "specjax.pipelines"),
    ("specjax.train", "specjax.bench"),
    ("specjax.train", "specjax.pipelines"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports(module: str, source: str, is_package: bool = False) -> list[tuple[str, int, bool]]:
    """(imported specjax module, line, inside a function or class body) of every import.

    Relative imports are resolved against `module`; `from specjax.x import y` counts as an
    import of `specjax.x.y` too when y is a submodule, so both names are checked.
    """
    found = []

    def visit(node, nested: bool):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
            )
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - child.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                found.append((base, child.lineno, inner))
                found.extend((f"{base}.{a.name}", child.lineno, inner) for a in child.names)
            visit(child, inner)

    visit(ast.parse(source), False)
    return [(name, line, inner) for name, line, inner in found if _within(name, "specjax")]


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """What `module` (with this source) does against the arrows; [] when nothing."""
    out = []
    for name, line, nested in imports(module, source, is_package):
        if nested:
            out.append(f"{module}:{line}: imports {name} inside a function or class")
        for importer, imported in FORBIDDEN:
            if _within(module, importer) and _within(name, imported):
                out.append(f"{module}:{line}: {importer} imports {imported} ({name})")
        if _within(name, "specjax.pipelines") and not _within(module, "specjax.pipelines"):
            out.append(f"{module}:{line}: a library module imports a pipeline ({name})")
    return sorted(set(out))


def library_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_checker_sees_each_kind_of_violation():
    backwards = "from specjax.train import batching\nimport specjax.pipelines.quickstart\n"
    assert violations("specjax.bench.workload", backwards) == [
        "specjax.bench.workload:1: specjax.bench imports specjax.train (specjax.train)",
        "specjax.bench.workload:1: specjax.bench imports specjax.train (specjax.train.batching)",
        "specjax.bench.workload:2: a library module imports a pipeline "
        "(specjax.pipelines.quickstart)",
        "specjax.bench.workload:2: specjax.bench imports specjax.pipelines "
        "(specjax.pipelines.quickstart)",
    ]
    hidden = "def f():\n    from specjax import data\n    return data\n"
    assert violations("specjax.picker", hidden) == [
        "specjax.picker:2: imports specjax inside a function or class",
        "specjax.picker:2: imports specjax.data inside a function or class",
    ]
    relative = "from ..bench import harness\n"  # specjax/train/x.py reaching up and over
    assert violations("specjax.train.x", relative) == [
        "specjax.train.x:1: specjax.train imports specjax.bench (specjax.bench)",
        "specjax.train.x:1: specjax.train imports specjax.bench (specjax.bench.harness)",
    ]
    typing_only = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specjax import data\n"
    )
    assert violations("specjax.bench.x", typing_only) == []
    assert violations("specjax.pipelines.quickstart", backwards) == []


@pytest.mark.parametrize("path", library_files(), ids=lambda p: module_name(p))
def test_module_keeps_the_arrows(path):
    source = path.read_text(encoding="utf-8")
    assert violations(module_name(path), source, path.name == "__init__.py") == []


def test_pipelines_sit_above_train_and_bench():
    source = (PACKAGE / "pipelines" / "quickstart.py").read_text()
    names = {name for name, _, _ in imports("specjax.pipelines.quickstart", source)}
    assert any(_within(n, "specjax.train") for n in names)
    assert any(_within(n, "specjax.bench") for n in names)


def test_no_library_file_over_the_limit():
    long = {
        str(p.relative_to(REPO)): n
        for p in library_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"over {MAX_LINES} lines (split by job): {long}"
