"""The `:tiny` quickstart end to end, as a user runs it: one command, then sane numbers.

Reads the documented results.json schema: `{"runs": [{"method", "category", "batch_size",
"temperature", "tau", "speedup", "tokens_per_s", ...}]}` (bench/results.json, repeated in the
quickstart's own results.json next to the two models' training summaries).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import specjax as sj
from configs import quickstart

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("quickstart")
    argv = [sys.executable, "-m", "launch.main", "--config=configs/quickstart.py:tiny"]
    proc = subprocess.run(
        [*argv, f"--workdir={workdir}"],
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return workdir, json.loads((workdir / "results.json").read_text())


def test_every_method_has_sane_numbers(run):
    workdir, summary = run
    bench = json.loads((workdir / "bench" / "results.json").read_text())
    assert bench["runs"] == summary["runs"]
    config = quickstart.get_config("tiny").bench
    cells = {(r["method"], r["batch_size"], r["temperature"]) for r in summary["runs"]}
    want = {
        (m, b, t) for m in config.methods for b in config.batch_sizes for t in config.temperatures
    }
    assert cells == want
    for row in summary["runs"]:
        assert row["tau"] >= 1.0, row
        assert row["speedup"] > 0 and row["tokens_per_s"] > 0, row
        if row["method"] != "draft_tree":  # a chain accepts at most N drafts + 1 bonus
            assert row["tau"] <= config.num_speculative_tokens + 1, row


def test_models_trained_and_load(run):
    workdir, summary = run
    target, draft = sj.load_model(workdir / "target"), sj.load_model(workdir / "draft")
    assert target.tokenizer.vocab_strings() == draft.tokenizer.vocab_strings()
    assert target.config.num_params() > draft.config.num_params()
    for name in ("target", "draft"):
        s = summary[name]
        assert 0 < s["eval_loss"] < 6.24  # below log(512): better than uniform
        assert s["decode_ms_per_token"] > 0
    assert summary["decode_cost_ratio"] > 0


def test_report_lists_every_method(run):
    workdir, summary = run
    report = (workdir / "report.md").read_text()
    for method in quickstart.get_config("tiny").bench.methods:
        assert f"| {method} |" in report
    assert (workdir / "bench" / "report.md").is_file()
