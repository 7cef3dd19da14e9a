"""A two-point ablation sweep runs end to end and writes one table (md + csv) and one plot."""

import csv

import pytest

import specjax as sj
from configs.ablations import num_speculative_tokens
from launch.sweep import _x_axis, point_name, run_sweep, write_plot
from specjax import data
from specjax.io.tokenizer import train_bpe


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A random tiny target and draft sharing a BPE tokenizer, saved as HF directories."""
    root = tmp_path_factory.mktemp("pair")
    tokenizer = train_bpe(data.load_text_dataset(max_chars=30_000)["text"], vocab_size=300)
    config = sj.ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_position_embeddings=128,
        eos_token_ids=tuple(tokenizer.eos_token_ids),
    )
    sj.save_hf(sj.Model(sj.Decoder(config, seed=0), tokenizer), root / "target")
    sj.save_hf(
        sj.Model(sj.Decoder(config.replace(num_layers=1), seed=1), tokenizer), root / "draft"
    )
    return root / "target", root / "draft"


@pytest.mark.slow  # 19 s: two launcher runs and a report (CI runs it with the slow tests)
def test_two_point_sweep_writes_table_and_plot(tmp_path, pair):
    config = num_speculative_tokens.get_config("tiny")
    config.bench.target, config.bench.draft = map(str, pair)
    config.bench.methods = ("draft_model",)
    sweep = num_speculative_tokens.get_sweep()[:2]

    rows = run_sweep(config, sweep, tmp_path)

    assert [r["bench.num_speculative_tokens"] for r in rows] == [1, 2]
    assert [r["point"] for r in rows] == [
        "0_num_speculative_tokens=1",
        "1_num_speculative_tokens=2",
    ]
    for row in rows:
        assert row["method"] == "draft_model" and row["category"] == "overall"
        assert 1.0 <= row["tau"] <= row["bench.num_speculative_tokens"] + 1
        assert row["speedup"] > 0
    for name in rows[0]["point"], rows[1]["point"]:
        assert (tmp_path / name / "results.json").is_file()

    with (tmp_path / "sweep.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [float(r["tau"]) for r in table] == pytest.approx([r["tau"] for r in rows])
    markdown = (tmp_path / "sweep.md").read_text().splitlines()
    assert "bench.num_speculative_tokens" in markdown[0] and "speedup" in markdown[0]
    assert len(markdown) == 2 + len(rows)
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # A second call finds every point done and only re-aggregates.
    fail = lambda *args: pytest.fail("a finished point was run again")
    assert run_sweep(config, sweep, tmp_path, run=fail) == rows


def test_plot_of_keys_swept_together_uses_one_tick_per_point(tmp_path):
    sweep = [{"draft.model.num_layers": 1, "draft.model.hidden_size": w} for w in (64, 128)]
    rows = [
        {"point": point_name(i, o), **o, "method": "draft_model", "tau": 2.0 + i, "speedup": 1.1}
        for i, o in enumerate(sweep)
    ]
    key, label, position, ticks = _x_axis(rows, sweep)
    assert (key, label, ticks) == ("point", "num_layers, hidden_size", ["1, 64", "1, 128"])
    assert [position(r["point"]) for r in rows] == [0, 1]
    write_plot(rows, sweep, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
