"""The picker: its formulas against hand-computed values, and a tiny end-to-end pick."""

import importlib.util
import json
from pathlib import Path

import pytest

from specjax import picker

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- formulas


@pytest.mark.parametrize(
    "alpha, n, expected",
    [
        (0.5, 2, 1.75),  # 1 + 0.5 + 0.25
        (0.8, 1, 1.8),
        (0.0, 5, 1.0),  # nothing accepted: the target's own token only
        (1.0, 3, 4.0),  # everything accepted: N + 1
        (0.6, 3, 2.176),  # 1 + 0.6 + 0.36 + 0.216
        (0.5, 0, 1.0),
    ],
)
def test_expected_tokens_per_call(alpha, n, expected):
    assert picker.expected_tokens_per_call(alpha, n) == pytest.approx(expected, abs=1e-12)
    if alpha < 1:
        closed = (1 - alpha ** (n + 1)) / (1 - alpha)
        assert picker.expected_tokens_per_call(alpha, n) == pytest.approx(closed)


@pytest.mark.parametrize(
    "alpha, n, c, expected",
    [
        (0.5, 2, 0.1, 1.75 / 1.2),
        (0.6, 2, 0.2, 1.96 / 1.4),  # = 1.4
        (0.6, 1, 0.2, 1.6 / 1.2),
        (0.8, 4, 0.0, 3.3616),  # free drafts: speedup = tokens per call
        (0.2, 1, 0.5, 1.2 / 1.5),  # 0.8: slower than autoregressive
        (0.9, 0, 0.3, 1.0),  # N = 0 is autoregressive
    ],
)
def test_expected_speedup(alpha, n, c, expected):
    assert picker.expected_speedup(alpha, n, c) == pytest.approx(expected, abs=1e-12)


def test_optimal_n_hand_computed():
    # alpha 0.6, c 0.2: N=1 1.333, N=2 1.400, N=3 1.360 -> 2.
    assert picker.optimal_n(0.6, 0.2, 8) == 2
    # alpha 0.2, c 0.5: every N is below 1 -> do not speculate.
    assert picker.optimal_n(0.2, 0.5, 8) == 0
    # alpha 0.8, c 0.05: 1.714, 2.218, 2.567, 2.801, 2.951, 3.040, 3.082, 3.092, (N=9) 3.078.
    assert picker.optimal_n(0.8, 0.05, 8) == 8
    assert picker.optimal_n(0.8, 0.05, 12) == 8
    assert picker.optimal_n(0.8, 0.05, 5) == 5
    # Free drafts and perfect acceptance: ties never happen, the longest chain wins.
    assert picker.optimal_n(1.0, 0.0, 6) == 6
    # alpha 0: speculation never helps; the tie at c = 0 goes to the smaller N.
    assert picker.optimal_n(0.0, 0.0, 8) == 0


def test_alpha_from_tau_inverts_expected_tokens():
    assert picker.alpha_from_tau(1.75, 2) == pytest.approx(0.5, abs=1e-12)
    assert picker.alpha_from_tau(1.8, 1) == pytest.approx(0.8, abs=1e-12)
    assert picker.alpha_from_tau(1.0, 4) == pytest.approx(0.0, abs=1e-12)
    assert picker.alpha_from_tau(5.0, 4) == pytest.approx(1.0, abs=1e-12)
    for n in (1, 2, 4, 8):
        for alpha in (0.05, 0.3, 0.55, 0.8, 0.97):
            tau = picker.expected_tokens_per_call(alpha, n)
            assert picker.alpha_from_tau(tau, n) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="tau=3.5 is out of range"):
        picker.alpha_from_tau(3.5, 2)
    with pytest.raises(ValueError, match="n=0"):
        picker.alpha_from_tau(1.5, 0)


def test_alpha_from_acceptance():
    # i.i.d. acceptance u_i = alpha^i gives alpha back exactly.
    assert picker.alpha_from_acceptance([0.5, 0.25]) == pytest.approx(0.5)
    assert picker.alpha_from_acceptance([0.7**i for i in range(1, 6)]) == pytest.approx(0.7)
    # (0.8 + 0.4) / (1 + 0.8): accepted over attempted drafts.
    assert picker.alpha_from_acceptance([0.8, 0.4]) == pytest.approx(2 / 3)
    assert picker.alpha_from_acceptance([0.0, 0.0, 0.0]) == 0.0
    assert picker.alpha_from_acceptance([1.0, 1.0]) == 1.0
    assert picker.alpha_from_acceptance([]) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: picker.expected_tokens_per_call(1.5, 2),
        lambda: picker.expected_tokens_per_call(0.5, -1),
        lambda: picker.expected_speedup(0.5, 2, -0.1),
        lambda: picker.optimal_n(0.5, 0.1, 2.5),
    ],
)
def test_formulas_reject_bad_inputs(call):
    with pytest.raises(ValueError):
        call()


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


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def pair(tiny_bench_pair):
    return tiny_bench_pair


def tiny_pick_config():
    cfg = picker.default_config()
    cfg.methods = ("draft_model", "ngram")
    cfg.num_speculative_tokens = 2
    cfg.n_max = 4
    cfg.num_prompts = 2
    cfg.prompt_tokens = 16
    cfg.max_new_tokens = 16
    cfg.cost_tokens = 16  # the same program buckets as the rest: nothing new to compile
    cfg.measure_top = 1
    cfg.repeats = 1
    return cfg


def test_pick_end_to_end(pair, tmp_path):
    target, draft = pair
    cfg = tiny_pick_config()
    rec = picker.pick(cfg, tmp_path, target=target, draft=draft)
    on_disk = json.loads((tmp_path / "recommendation.json").read_text())
    assert on_disk["choice"] == rec["choice"]
    cost = rec["cost"]
    assert cost["target_step_s"] > 0 and cost["draft_step_s"] > 0 and cost["c"] > 0
    assert cost["lengths"] == [9, 16]
    assert set(rec["methods"]) == {"draft_model", "ngram"}
    for name, entry in rec["methods"].items():
        assert 0.0 <= entry["alpha"] <= 1.0 and entry["n_measured"] == 2
        assert entry["c"] == (cost["c"] if name == "draft_model" else 0.0)
        assert [p["n"] for p in entry["predictions"]] == [1, 2, 3, 4]
        for p in entry["predictions"]:
            want = picker.expected_speedup(entry["alpha"], p["n"], entry["c"])
            assert p["speedup"] == pytest.approx(want)
    # The truncated draft shares embedding and head with the target: some drafts accepted.
    assert rec["methods"]["draft_model"]["alpha"] > 0
    ranked = [r["predicted_speedup"] for r in rec["ranked"]]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) == 8
    (measured,) = rec["measured"]
    best = rec["ranked"][0]
    assert (measured["method"], measured["n"]) == (best["method"], best["n"])
    assert measured["measured_speedup"] > 0 and measured["measured_tau"] >= 1.0
    c = rec["methods"][best["method"]]["c"]
    implied = measured["measured_tau"] / measured["measured_speedup"] - (best["n"] * c + 1)
    assert measured["overhead_steps"] == pytest.approx(implied)
    assert rec["choice"]["method"] in {"draft_model", "ngram", "autoregressive"}
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
