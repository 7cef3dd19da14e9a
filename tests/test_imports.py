"""A bare accelerator machine: jax, flax, optax and orbax, not necessarily the rest.

`import specjax`, a generate call and the prepared accelerator check
(experiments/device_check.py, its tiny CPU mode) run in a child process where the optional
modules cannot be imported (a `sys.meta_path` finder refuses them), so an import of one of
them at the top of a module on those paths fails here.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OPTIONAL = (
    "datasets",
    "tensorboardX",
    "tokenizers",
    "ml_collections",
    "matplotlib",
    "transformers",
    "torch",
)

# Prepended to the child's code: every OPTIONAL module (and its submodules) refuses to import.
BLOCK = textwrap.dedent(
    f"""
    import sys

    class _Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {OPTIONAL!r}:
                raise ImportError(f"{{name}} is not installed here (blocked by the test)")
            return None

    sys.meta_path.insert(0, _Refuse())
    """
)


def run_blocked(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_block_refuses_the_optional_modules():
    proc = run_blocked("import tokenizers")
    assert proc.returncode != 0
    assert "tokenizers is not installed here" in proc.stderr


def test_import_specjax_and_generate_without_the_optional_modules():
    proc = run_blocked(
        f"""
        import specjax as sj
        from specjax.bench import methods, timing  # the device check's helpers

        model = sj.Decoder(sj.ModelConfig(vocab_size=64, hidden_size=32, num_layers=2,
                                          num_heads=4, num_kv_heads=2, head_dim=8,
                                          intermediate_size=64), seed=0)
        prompts = [[1, 2, 3, 4, 1, 2, 3], [5, 6, 7]]
        ar = sj.generate(model, prompts, 8)
        ngram = sj.generate(model, prompts, 8, speculative_config={{
            "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}})
        assert ar.tokens == ngram.tokens, (ar.tokens, ngram.tokens)
        assert ngram.stats["mean_accepted_length"] >= 1.0
        loaded = sorted(m for m in {OPTIONAL!r} if m in sys.modules)
        assert not loaded, loaded
        print("ok", ar.tokens)
        """
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.startswith("ok")


@pytest.mark.slow  # a child interpreter running the device check: 20 s
def test_device_check_tiny_runs_without_the_optional_modules(tmp_path):
    out = tmp_path / "device_check.json"
    argv = ["device_check.py", "--tiny", f"--out={out}"]
    proc = run_blocked(
        f"""
        import runpy
        sys.argv = {argv!r}
        runpy.run_path("experiments/device_check.py", run_name="__main__")
        """,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "tiny"
    assert result["bandwidth"]["bytes_per_s"] > 0
    ar = result["autoregressive"]
    assert ar["model"]["bytes"] > 0
    assert [r["batch"] for r in ar["runs"]] == [1, 8]
    for run in ar["runs"]:
        assert run["floor_ms_per_step"] > 0 and run["ms_per_step"] > 0
        assert run["tokens_per_s"] == pytest.approx(run["batch"] * 1e3 / run["ms_per_step"])
        assert run["fraction_of_floor"] == pytest.approx(
            run["floor_ms_per_step"] / run["ms_per_step"]
        )
    device_check = load_device_check()
    runs = result["methods"]["runs"]
    assert list(runs) == list(device_check.TINY_METHODS)
    for name, run in runs.items():
        assert run["tau"] >= 1.0, (name, run)
        assert run["speedup"] > 0, (name, run)
        assert run["step_cost_ar_steps"] == pytest.approx(run["tau"] / run["speedup"])
        assert run["retraced"] == 0, (name, run)  # the timed runs compiled nothing
    assert set(result["methods"]["pair"]) == {"target", "draft", "medusa", "eagle", "eagle3"}


def load_device_check():
    spec = importlib.util.spec_from_file_location(
        "device_check", REPO / "experiments" / "device_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_check_knobs_are_the_benchmarks_defaults():
    from specjax.bench import default_config

    knobs = load_device_check().method_knobs()
    bench = default_config().to_dict()
    assert knobs == {key: bench[key] for key in knobs}


def test_device_check_refuses_an_unknown_method():
    with pytest.raises(SystemExit):
        load_device_check().parse_args(["--tiny", "--methods", "ngram", "medusa3"])
