"""The picker: its predictions per method x N, and a tiny end-to-end pick."""

import importlib.util
import json
from pathlib import Path

import pytest

import specjax as sj
from specjax import picker
from specjax.bench import default_config as bench_config
from specjax.bench import methods as mt
from specjax.bench import timing
from specjax.bench.verify_cost import cost_at
from specjax.speedup import expected_speedup

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- predictions


def test_predictions_cap_tree_size():
    cfg = picker.default_config()  # draft_tree width 2, max_draft_nodes 64, n_max 8
    chain = picker._predictions(cfg, "draft_model", 0.5, 0.1)
    assert [p["n"] for p in chain] == list(range(1, 9))
    assert [p["draft_nodes"] for p in chain] == list(range(1, 9))
    assert chain[1]["tokens_per_call"] == pytest.approx(1.75)
    assert chain[1]["speedup"] == pytest.approx(1.75 / 1.2)
    tree = picker._predictions(cfg, "draft_tree", 0.5, 0.1)
    # 2, 6, 14, 30, 62 nodes; depth 6 would verify 126 > 64.
    assert [p["draft_nodes"] for p in tree] == [2, 6, 14, 30, 62]


def test_picker_and_bench_read_one_set_of_method_knobs(monkeypatch):
    knobs = mt.method_knobs().to_dict()
    assert set(knobs["heads"]) == {"medusa", "eagle", "eagle3"}  # the registry's head slots
    assert knobs["lookahead"]["candidate_length"] == mt.lookahead_defaults()[1] - 1
    for cfg in (picker.default_config(), bench_config()):
        assert {k: cfg.to_dict()[k] for k in knobs} == knobs
        cfg.dynamic_tree.score_temperature = 0.5  # a float placeholder, None by default
    # one definition: a default changed in the registry shows in both configs
    monkeypatch.setattr(mt, "DEFAULT_MEDUSA_TREE", "medusa_k4_16")
    monkeypatch.setattr(mt, "DEFAULT_DYNAMIC_TREE", {"depth": 3, "top_k": 2, "total_tokens": 6})
    for cfg in (picker.default_config(), bench_config()):
        assert cfg.medusa_tree == "medusa_k4_16" and cfg.dynamic_tree.depth == 3


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def pair(tiny_bench_pair):
    return tiny_bench_pair


def tiny_pick_config():
    cfg = picker.default_config()
    cfg.methods = ("draft_model", "ngram", "medusa_chain", "eagle3")
    cfg.dynamic_tree.update(depth=2, top_k=2, total_tokens=4)
    cfg.num_speculative_tokens = 2
    cfg.n_max = 4
    cfg.num_prompts = 2
    cfg.prompt_tokens = 16
    cfg.max_new_tokens = 16
    cfg.cost_tokens = 16  # the same program buckets as the rest: nothing new to compile
    cfg.measure_top = 1
    cfg.repeats = 1
    cfg.verify_blocks = (1, 3, 9)  # few compiles; sizes between are interpolated
    return cfg


@pytest.mark.slow
def test_pick_end_to_end(pair, tmp_path):
    target, draft = pair
    cfg = tiny_pick_config()
    heads = sj.MedusaHeads.for_target(target, num_heads=3)
    eagle3 = sj.EagleHead.for_target(target, method="eagle3")
    rec = picker.pick(cfg, tmp_path, target=target, draft=draft,
                      heads={"medusa": heads, "eagle3": eagle3})  # fmt: skip
    on_disk = json.loads((tmp_path / "recommendation.json").read_text())
    assert on_disk["choice"] == rec["choice"]
    cost = rec["cost"]
    assert cost["c"] == pytest.approx(cost["draft_step_s"] / cost["target_step_s"])
    assert cost["lengths"] == [9, 16]
    head_cost = cost["heads"]["medusa"]  # the heads' own forward, 2 heads (N = 2)
    assert head_cost["c"] == pytest.approx(head_cost["heads_step_s"] / (2 * cost["target_step_s"]))
    drafter = cost["heads"]["eagle3"]  # one drafter call per drafted token
    assert drafter["c"] == pytest.approx(drafter["heads_step_s"] / cost["target_step_s"])
    assert drafter["heads_step_s"] > 0
    curve = cost["verify_curve"]  # the target's own forward over 1, 3 and 9-token blocks
    assert curve["blocks"] == [1, 3, 9] and curve["cost"][0] == 1.0 and curve["cpu_kernel"]
    assert all(x > 0 for x in curve["seconds"])
    assert set(rec["methods"]) == {"draft_model", "ngram", "medusa_chain", "eagle3"}
    for name, entry in rec["methods"].items():
        assert 0.0 <= entry["alpha"] <= 1.0 and entry["n_measured"] == 2
        want_c = {"draft_model": cost["c"], "ngram": 0.0, "medusa_chain": head_cost["c"],
                  "eagle3": drafter["c"]}[name]  # fmt: skip
        assert entry["c"] == want_c
        # Medusa cannot use more heads than the 3 stored; an EAGLE drafter has no limit.
        want_n = [1, 2, 3] if name == "medusa_chain" else [1, 2, 3, 4]
        assert [p["n"] for p in entry["predictions"]] == want_n
        for p in entry["predictions"]:
            v = cost_at(curve, p["draft_nodes"] + 1)
            assert p["verify_cost"] == v
            want = expected_speedup(entry["alpha"], p["n"], entry["c"], v)
            assert p["speedup"] == pytest.approx(want)
    # The truncated draft shares embedding and head with the target: some drafts accepted.
    assert rec["methods"]["draft_model"]["alpha"] > 0
    ranked = [r["predicted_speedup"] for r in rec["ranked"]]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) == 15
    (measured,) = rec["measured"]
    best = rec["ranked"][0]
    assert (measured["method"], measured["n"]) == (best["method"], best["n"])
    assert measured["measured_speedup"] > 0 and measured["measured_tau"] >= 1.0
    c = rec["methods"][best["method"]]["c"]
    v = cost_at(curve, best["draft_nodes"] + 1)
    implied = measured["measured_tau"] / measured["measured_speedup"] - (best["n"] * c + v)
    assert measured["overhead_steps"] == pytest.approx(implied)
    # The pick is the measured candidate when it beats autoregressive, else do not speculate.
    if measured["measured_speedup"] > 1.0:
        assert (rec["choice"]["method"], rec["choice"]["n"]) == (best["method"], best["n"])
        assert rec["choice"]["basis"] == "measured_speedup"
    else:
        assert rec["choice"]["method"] == "autoregressive" and rec["choice"]["n"] == 0
        assert f"{measured['measured_speedup']:.2f}x <= 1" in rec["choice"]["basis"]
    md = (tmp_path / "recommendation.md").read_text()
    assert "## Predicted vs measured" in md
    assert f"| {best['method']} | {best['n']} | {best['draft_nodes']} |" in md


def test_pick_errors_early(tmp_path):
    cfg = tiny_pick_config()
    cfg.methods = ("draft_model", "eagle-typo")
    with pytest.raises(ValueError, match="unknown benchmark method 'eagle-typo'"):
        picker.pick(cfg, tmp_path)
    cfg.methods = ("ngram",)
    cfg.n_max = 0
    with pytest.raises(ValueError, match="n_max=0"):
        picker.pick(cfg, tmp_path)
    cfg.n_max = 4
    cfg.batch_size = 0
    with pytest.raises(ValueError, match="batch_size=0"):
        picker.pick(cfg, tmp_path)


def test_pick_at_batch(pair, tmp_path, monkeypatch):
    """batch_size prices the workload's batch: the target and heads' steps, the verify curve
    and the measured candidates at that many rows; alpha per row at batch 1."""
    target, _ = pair
    cfg = tiny_pick_config()
    cfg.methods = ("ngram", "medusa_chain")
    cfg.batch_size = 2
    rows = {"run": set(), "compare": set()}
    run, compare = timing.Runner.run, timing.Runner.compare

    def spy_run(self, batches, *a, **k):
        rows["run"].update(len(b) for b in batches)
        return run(self, batches, *a, **k)

    def spy_compare(self, workloads, *a, **k):
        rows["compare"].update(len(b) for batches in workloads.values() for b in batches)
        return compare(self, workloads, *a, **k)

    monkeypatch.setattr(timing.Runner, "run", spy_run)
    monkeypatch.setattr(timing.Runner, "compare", spy_compare)
    heads = sj.MedusaHeads.for_target(target, num_heads=3)
    rec = picker.pick(cfg, tmp_path, target=target, heads={"medusa": heads})
    cost = rec["cost"]
    assert cost["batch"] == 2 and cost["verify_curve"]["batch"] == 2
    assert rows["compare"] == {2}  # the measured candidate against AR, 2 rows a call
    assert rows["run"] == {1, 2}  # alpha per row (batch 1); the target's step at 2 rows
    head_cost = cost["heads"]["medusa"]
    assert head_cost["c"] == pytest.approx(head_cost["heads_step_s"] / (2 * cost["target_step_s"]))
    # An EAGLE drafter's call at 2 rows (its cache and inputs batched), priced the same way.
    eagle3 = sj.EagleHead.for_target(target, method="eagle3")
    drafter = picker.measure_head_cost(eagle3, 2, cost["target_step_s"], 1, target, batch=2)
    assert drafter["c"] == pytest.approx(drafter["heads_step_s"] / cost["target_step_s"])
    assert drafter["heads_step_s"] > 0
    md = (tmp_path / "recommendation.md").read_text()
    assert "the costs and the measured speedups at batch 2" in md
    choice = rec["choice"]["method"]
    assert ("at batch 2:" if choice == "autoregressive" else ", batch 2: predicted") in md


def test_prompts_file(pair, tmp_path):
    target, _ = pair
    cfg = tiny_pick_config()
    lines = ["def add(a, b):", "", "The quick brown fox", "third"]
    (tmp_path / "p.txt").write_text("\n".join(lines))
    cfg.prompts_file = str(tmp_path / "p.txt")
    prompts = picker.sample_prompts(cfg, target.tokenizer)
    assert list(prompts) == ["user"]
    assert prompts["user"] == [target.tokenizer.encode(t) for t in lines[::2]]  # 2, no blanks
    (tmp_path / "p.jsonl").write_text('{"prompt": "x = 1"}\n{"text": "y"}\n')
    cfg.prompts_file = str(tmp_path / "p.jsonl")
    assert picker.sample_prompts(cfg, target.tokenizer)["user"][1] == target.tokenizer.encode("y")


@pytest.mark.parametrize("arg", [None, "small"])
def test_pick_config_file(arg):
    spec = importlib.util.spec_from_file_location("pick_config", REPO / "configs" / "pick.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(arg)
    assert config.task == "pick" and config.pick.n_max == 8
    assert config.pick.measure_top == (1 if arg else 3)
