"""The `:tiny` quickstart end to end, as a user runs it: one command, then sane numbers.

Reads the documented results.json schema: `{"runs": [{"method", "category", "batch_size",
"temperature", "tau", "speedup", "tokens_per_s", ...}]}` (bench/results.json, repeated in the
quickstart's own results.json next to the two models' training summaries).
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import specjax as sj
from configs import quickstart

REPO = Path(__file__).resolve().parents[2]
# The whole tiny pipeline (two LMs, two head trainers, the benchmark): minutes on 2 cores.
pytestmark = pytest.mark.slow


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
    assert {"medusa", "medusa_chain", "eagle3"} <= {m for m, _, _ in cells}
    for row in summary["runs"]:
        assert row["tau"] >= 1.0, row
        # The reported numbers are the measured ones: medians of the timed repeats.
        t, t_ar = statistics.median(row["times_s"]), statistics.median(row["ar_times_s"])
        assert row["speedup"] == pytest.approx(t_ar / t), row
        assert row["tokens_per_s"] == pytest.approx(row["generated_tokens"] / t), row
        # Every call generates exactly max_new_tokens per row (no stop ids).
        if row["category"] == "overall":
            assert row["generated_tokens"] == config.max_new_tokens * 2 * config.num_prompts
        if row["method"] in ("draft_model", "ngram", "medusa_chain"):  # chains: <= N + 1
            assert row["tau"] <= config.num_speculative_tokens + 1, row
        assert row["lossy"] is False


def test_models_trained_and_load(run):
    workdir, summary = run
    target, draft = sj.load_model(workdir / "target"), sj.load_model(workdir / "draft")
    assert target.tokenizer.vocab_strings() == draft.tokenizer.vocab_strings()
    assert target.config.num_params() > draft.config.num_params()
    for name in ("target", "draft"):
        s = summary[name]
        assert 0 < s["eval_loss"] < 6.24  # below log(512): better than uniform
        assert s["decode_ms_per_token"] > 0
    assert summary["decode_cost_ratio"] == pytest.approx(
        summary["draft"]["decode_ms_per_token"] / summary["target"]["decode_ms_per_token"]
    )


def test_medusa_heads_trained_and_load(run):
    workdir, summary = run
    medusa = summary["medusa"]
    target = sj.load_model(workdir / "target")
    heads = sj.load_draft(workdir / "medusa", target=target)
    assert heads.config.num_heads == len(medusa["top1"]) == 4
    assert all(0.0 <= a <= b <= 1.0 for a, b in zip(medusa["top1"], medusa["top5"], strict=True))
    assert (workdir / "medusa" / "features" / "train" / "hidden.npy").is_file()  # computed once


def test_eagle3_drafter_trained_and_loads(run):
    workdir, summary = run
    eagle3 = summary["eagle3"]
    target = sj.load_model(workdir / "target")
    drafter = sj.load_draft(workdir / "eagle3", target=target)
    assert drafter.config.method == "eagle3" and len(eagle3["top1"]) == eagle3["ttt_steps"]
    assert list(drafter.config.tap_layers) == eagle3["tap_layers"]
    assert all(0.0 <= a <= 1.0 for a in eagle3["top1"])
    # Both head trainers read one self-distillation of the target (generated once).
    assert len(list((workdir / "distill").glob("distill-*"))) == 2  # train and eval rows
    assert not (workdir / "medusa" / "distill").exists()
    assert not (workdir / "eagle3" / "distill").exists()
    assert "EAGLE-3 drafter" in (workdir / "report.md").read_text()


def test_report_lists_every_method(run):
    workdir, summary = run
    report = (workdir / "report.md").read_text()
    for method in quickstart.get_config("tiny").bench.methods:
        assert f"| {method} |" in report
    assert (workdir / "bench" / "report.md").is_file()
