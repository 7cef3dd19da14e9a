"""LM training: a SIGKILLed run resumes to the uninterrupted parameters; NaN guard; export.

The resume test also pins determinism across processes: the reference run initialises in
this process, the killed run in a subprocess, and both must reach the same parameters.
"""

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import specjax as sj
from configs import train_lm as train_lm_configs
from specjax.io.hf import export_state
from specjax.train import lm, loop
from specjax.train.metrics import read_jsonl

REPO = Path(__file__).resolve().parents[2]

# Long enough (150 steps, ~2 s, after the first checkpoint) to be killed in the middle.
OVERRIDES = {
    "data.max_chars": 30_000,
    "train.num_steps": 200,
    "train.checkpoint_every": 50,
    "train.log_every": 10,
    "train.eval_every": 100,
    "train.progress": False,
}


def tiny_config(**overrides):
    config = train_lm_configs.get_config("tiny")
    for key, value in {**OVERRIDES, **overrides}.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


def committed_steps(workdir: Path) -> list[int]:
    """Steps orbax has committed (interrupted saves live in *.orbax-checkpoint-tmp* dirs)."""
    root = workdir / lm.CHECKPOINTS
    return sorted(int(p.name) for p in root.glob("*") if p.name.isdigit()) if root.is_dir() else []


def params(workdir: Path) -> dict[str, np.ndarray]:
    return export_state(sj.load_model(workdir).module)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: (workdir, summary)."""
    workdir = tmp_path_factory.mktemp("reference")
    return workdir, lm.train_lm(tiny_config(), workdir)


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_parameters(tmp_path, reference, child_env):
    workdir = tmp_path / "killed"
    argv = [sys.executable, "-m", "launch.main", "--config=configs/train_lm.py:tiny"]
    argv += [f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
    log_path = tmp_path / "stderr.txt"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log, env=child_env)
        deadline = time.monotonic() + 180
        while not committed_steps(workdir) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, log_path.read_text()[-3000:]
    first = committed_steps(workdir)
    assert first and first[-1] < OVERRIDES["train.num_steps"], first
    assert not (workdir / lm.HF).exists()  # killed before the end

    summary = lm.train_lm(tiny_config(), workdir)

    assert summary["resumed_from"] >= first[-1] > 0
    ref_dir, ref_summary = reference
    want, got = params(ref_dir), params(workdir)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert summary["eval_loss"] == pytest.approx(ref_summary["eval_loss"], rel=1e-5)
    # The resumed metrics file reads as one run: the same records at the same steps.
    steps = lambda d: [(r["step"], sorted(r)) for r in read_jsonl(d / "metrics.jsonl")]
    assert steps(workdir) == steps(ref_dir)


def test_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    config = tiny_config(**{"train.debug_nan_at_step": 7, "train.checkpoint_every": 5})
    config.train.log_every = 5
    with pytest.raises(FloatingPointError, match="at step 7"):
        lm.train_lm(config, tmp_path)
    assert committed_steps(tmp_path) == [5]  # nothing saved after the NaN
    assert not (tmp_path / lm.HF).exists()


def test_trained_model_loads_exports_and_learned(tmp_path, reference):
    workdir, summary = reference
    model = sj.load_model(workdir)
    assert model.config.vocab_size == model.tokenizer.vocab_size == 512
    assert model.config.num_params() == summary["num_params"]
    assert summary["eval_perplexity"] == pytest.approx(math.exp(summary["eval_loss"]))
    records = read_jsonl(workdir / "metrics.jsonl")
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert len(losses) == OVERRIDES["train.num_steps"] // OVERRIDES["train.log_every"]
    assert losses[-1] < losses[0] - 1.0  # from ~log(512) = 6.2 at init
    assert summary["eval_loss"] < math.log(512) - 1.0
    assert any((workdir / "tensorboard").iterdir())

    exported = sj.save_hf(model, tmp_path / "export")
    again = sj.load_model(exported)
    for name, value in export_state(model.module).items():
        np.testing.assert_array_equal(export_state(again.module)[name], value)
    out = sj.generate(again, ["def f(x):"], max_new_tokens=4)
    assert len(out.tokens[0]) == 4


def test_a_checkpoint_of_another_run_is_refused():
    config = tiny_config()
    saved = config.to_dict()
    loop.check_resumable(saved, config, 10, lm.RESUME_KEYS)
    saved["model"]["num_layers"] += 1
    with pytest.raises(ValueError, match="model differ"):
        loop.check_resumable(saved, config, 10, lm.RESUME_KEYS)
    with pytest.raises(ValueError, match="past train.num_steps"):
        loop.check_resumable(config.to_dict(), config, 10_000, lm.RESUME_KEYS)


def test_a_resumed_config_matches_its_json_round_trip():
    # The checkpoint's config is saved as JSON, so a tuple in this run's config comes back a list.
    config = tiny_config()
    with config.unlocked():
        config.data.extra = (1, 2)
    saved = json.loads(json.dumps(config.to_dict()))
    assert saved["data"]["extra"] == [1, 2]
    loop.check_resumable(saved, config, 10, lm.RESUME_KEYS)
    saved["data"]["extra"] = [1, 3]
    with pytest.raises(ValueError, match="data differ"):
        loop.check_resumable(saved, config, 10, lm.RESUME_KEYS)
