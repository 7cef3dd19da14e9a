"""The `:tiny` quickstart end to end, as a user runs it: one command, then sane numbers.

Reads the documented results.json schema: `{"runs": [{"method", "category", "batch_size",
"temperature", "tau", "acceptance_by_position", "speedup", "tokens_per_s", ...}]}`
(bench/results.json, repeated in the quickstart's own results.json next to the two models'
training summaries).

The `:tiny` run trains on the synthetic pair-cycle corpus (`specjax.data.pair_cycle_records`:
the next letter is a function of the last two, so a draft one offset off is right 1 time in
6), so its heads' acceptance tells trained from broken. Thresholds on the bench's pooled
rows (acceptance_by_position u_i = P(a step accepts >= i drafts), tau = tokens per target
call): at T=0, u_1..3 >= (0.6, 0.5, 0.4) and tau >= 2.4; at T=1 (the target samples, so
even exact drafts are rejected where it strays) u_1 >= 0.4 and tau >= 1.6. Measured on CPU
(T=0 | T=1): trained Medusa heads on the medusa_k4_8 tree u = (0.96, 0.96, 0.88), tau 4.44
| u_1 0.87, tau 4.00; as a chain (0.93, 0.89, 0.88), 4.44 | 0.59, 2.26; the trained EAGLE-3
drafter on its dynamic tree (0.91, 0.81, 0.72), 3.16 | 0.80, 2.40. The same prompts decoded
with untrained heads (the negative control below): Medusa tree (0.31, 0.11, 0), 1.38 | 0.28,
1.35; chain (0.20, 0, 0), 1.19 | 0.20, 1.20; EAGLE-3 (0, 0, 0), 1.0 | 0, 1.0.
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
from specjax import data
from specjax.bench import methods, timing, workload

REPO = Path(__file__).resolve().parents[2]
# The whole tiny pipeline (two LMs, two head trainers, the benchmark): minutes on 2 cores.
# Under `--dist loadgroup` (.ci/run's slow run) one xdist worker runs every test here, so the
# pipeline runs once, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiny_quickstart")]


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
        timeout=1200,  # minutes alone; a loaded 2-core machine has taken 14 for it
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
    assert {"medusa", "medusa_chain", "eagle3", "eagle3_chain"} <= {m for m, _, _ in cells}
    assert {r["category"] for r in summary["runs"]} == {data.PAIR_CYCLE, "overall"}
    for row in summary["runs"]:
        assert row["tau"] >= 1.0, row  # the heads' own thresholds: test_trained_heads_...
        # The reported numbers are the measured ones: medians of the timed repeats.
        t, t_ar = statistics.median(row["times_s"]), statistics.median(row["ar_times_s"])
        assert row["speedup"] == pytest.approx(t_ar / t), row
        assert row["tokens_per_s"] == pytest.approx(row["generated_tokens"] / t), row
        # Every call generates exactly max_new_tokens per row (no stop ids).
        if row["category"] == "overall":
            assert row["generated_tokens"] == config.max_new_tokens * config.num_prompts
        if row["method"] in ("draft_model", "ngram", "medusa_chain", "eagle3_chain"):  # chains
            assert row["tau"] <= config.num_speculative_tokens + 1, row
        assert row["lossy"] is False


HEAD_METHODS = ("medusa", "medusa_chain", "eagle3")
# {temperature: (minimum acceptance_by_position[0..], minimum tau)}: see the module docstring.
THRESHOLDS = {0.0: ((0.6, 0.5, 0.4), 2.4), 1.0: ((0.4,), 1.6)}


def passes(stats: dict, temperature: float) -> bool:
    """Whether pooled bench statistics reach the thresholds at `temperature`."""
    mins, min_tau = THRESHOLDS[temperature]
    u = stats["acceptance_by_position"]
    return all(a >= b for a, b in zip(u, mins, strict=False)) and stats["tau"] >= min_tau


def test_the_target_continues_the_cycle(run):
    """The tiny target learned the corpus: at T=0 each generated letter is the one the last
    two fix (what makes a wrong head visible: the continuation is neither constant nor
    predictable from one letter)."""
    workdir, _ = run
    config = quickstart.get_config("tiny").bench
    target = sj.load_model(workdir / "target")
    cycle = [" " + data.PAIR_LETTERS[i] for i in data.pair_cycle(len(data.PAIR_LETTERS))]
    after = {(cycle[i - 2], cycle[i - 1]): cycle[i] for i in range(len(cycle))}
    by_category = workload.prompts_by_category(config, target.tokenizer)
    prompts = [p for ps in by_category.values() for p in ps]
    out = sj.generate(target, prompts, config.max_new_tokens, stop_token_ids=[])
    n, hits = config.max_new_tokens, []
    for prompt, tokens in zip(prompts, out.tokens, strict=True):
        s = [target.tokenizer.decode([t]) for t in prompt + tokens]  # one letter a token
        hits += [after.get((s[i - 2], s[i - 1])) == s[i] for i in range(len(s) - n, len(s))]
    assert len(hits) == len(prompts) * n and sum(hits) / len(hits) > 0.9


def test_trained_heads_get_their_drafts_accepted(run):
    """The bench's pooled rows for the trained heads reach the thresholds; untrained heads
    (identity Medusa blocks on the target's LM head draft token t + 1 from every head, one
    offset short; a freshly initialised EAGLE-3 drafter) decoded by the bench's own runner
    on the bench's prompts with the bench's speculative config do not."""
    workdir, summary = run
    config = quickstart.get_config("tiny").bench.copy_and_resolve_references()
    rows = {
        (r["method"], r["temperature"]): r
        for r in summary["runs"]
        if r["category"] == "overall" and r["method"] in HEAD_METHODS
    }
    assert len(rows) == len(HEAD_METHODS) * len(THRESHOLDS)
    for (method, temperature), row in rows.items():
        u, tau = row["acceptance_by_position"], row["tau"]
        assert passes(row, temperature), (method, temperature, u, tau)

    target = sj.load_model(workdir / "target")
    untrained = methods.Drafts(heads=(
        ("eagle3", sj.EagleHead.for_target(target)),
        ("medusa", sj.MedusaHeads.for_target(target, num_heads=config.num_speculative_tokens)),
    ))  # fmt: skip
    prompts = workload.prompts_by_category(config, target.tokenizer)
    batches = [b for ps in prompts.values() for b in timing.make_batches(ps, 1)]
    runner = timing.Runner(target, int(config.max_new_tokens), int(config.seed))
    for method in HEAD_METHODS:
        spec = methods.speculative_config(method, config, untrained)
        _, stats = runner.run(batches, 0.0, spec)
        assert not passes(stats, 0.0), (method, stats["acceptance_by_position"], stats["tau"])
        # a head one offset short is right 1 time in 6 (2 in 6 with the tree's second child)
        assert stats["acceptance_by_position"][0] < 0.4, (method, stats)


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
