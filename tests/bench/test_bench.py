"""The benchmark harness end to end on tiny models, plus its registry and statistics."""

import importlib.util
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.bench import default_config, timing
from specjax.bench import methods as mt
from specjax.bench.harness import run_bench
from specjax.bench.pairs import truncated_draft

REPO = Path(__file__).resolve().parents[2]
N = 2  # num_speculative_tokens and tree depth: tau_vs_n's N=2 reuses the grid's program


@pytest.fixture(scope="module")
def pair(tiny_bench_pair):
    return tiny_bench_pair


def tiny_config(methods):
    cfg = default_config()
    cfg.methods = tuple(methods)
    cfg.num_speculative_tokens = N
    cfg.draft_tree.depth = N
    cfg.batch_sizes = (1,)
    cfg.temperatures = (0.0,)
    cfg.repeats = 1
    cfg.max_new_tokens = 16
    cfg.prompt_tokens = 16
    cfg.num_prompts = 2
    cfg.tau_vs_n = (1, N)
    cfg.verify_blocks = (1, 3)
    return cfg


@pytest.fixture(scope="module")
def heads(pair):
    """Untrained Medusa heads for the tiny target (identity blocks, its LM head)."""
    return sj.MedusaHeads.for_target(pair[0], num_heads=N)


@pytest.fixture(scope="module")
def bench(pair, heads, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bench")
    target, draft = pair
    cfg = tiny_config(mt.registered_methods())
    cfg.medusa_tree = "small_2x3"  # depth 2 = N
    cfg.dynamic_tree.update(depth=2, top_k=2, total_tokens=4)
    cfg.lookahead.update(window=2, candidate_length=N, max_candidates=2)
    eagle = {m: sj.EagleHead.for_target(target, method=m) for m in ("eagle", "eagle3")}
    results = run_bench(cfg, workdir, target=target, draft=draft,
                        heads={"medusa": heads, **eagle})  # fmt: skip
    return workdir, results


def test_results_json_has_every_method_and_category(bench):
    workdir, results = bench
    on_disk = json.loads((workdir / "results.json").read_text())
    assert set(on_disk) >= {"machine", "config", "runs", "tau_vs_n"}
    assert on_disk["machine"]["cpu_count"] >= 1 and on_disk["config"]["repeats"] == 1
    runs = on_disk["runs"]
    assert {r["method"] for r in runs} == {
        "autoregressive", "draft_model", "draft_tree", "ngram", "lookahead", "medusa",
        "medusa_chain", "eagle1", "eagle2", "eagle3", "eagle3_chain",
    }  # fmt: skip
    for method in mt.registered_methods():
        cats = sorted(r["category"] for r in runs if r["method"] == method)
        assert cats == ["code", "overall", "prose"]
    for r in runs:
        assert r["tau"] >= 1.0 and r["retraced"] == 0 and r["lossy"] is False
        # The reported speeds are the timed ones: medians of the repeats, AR interleaved.
        t, t_ar = np.median(r["times_s"]), np.median(r["ar_times_s"])
        assert r["speedup"] == pytest.approx(t_ar / t)
        assert r["tokens_per_s"] == pytest.approx(r["generated_tokens"] / t)
        assert r["ar_tokens_per_s"] == pytest.approx(r["generated_tokens"] / t_ar)
        assert 0 <= r["compile_s"] <= r["warmup_s"]
        assert len(r["times_s"]) == 1 and r["batch_size"] == 1 and r["temperature"] == 0.0
        # Fixed budget, no stop ids: 2 prompts x 16 tokens per category, 4 overall.
        assert r["generated_tokens"] == (64 if r["category"] == "overall" else 32)
    # One round-robin per cell: every method is timed against the same baseline runs.
    for category in ("code", "prose", "overall"):
        baselines = {tuple(r["ar_times_s"]) for r in runs if r["category"] == category}
        assert len(baselines) == 1


def test_acceptance_statistics_are_consistent(bench):
    _, results = bench
    depth = {"autoregressive": 0, "draft_model": N, "draft_tree": N, "ngram": N, "medusa": N,
             "medusa_chain": N, "eagle1": N, "eagle2": N, "eagle3": N, "eagle3_chain": N,
             "lookahead": N}  # fmt: skip
    for r in results["runs"]:
        u, c = r["acceptance_by_position"], r["conditional_acceptance_by_position"]
        assert len(u) == len(c) == depth[r["method"]] == r["depth"]
        offered, reached = r["offered_by_position"], r["reached_by_position"]
        at_least = r["accepted_by_position"]
        # Accepted drafts = sum_i #(steps accepting >= i), exactly, for pooled counts.
        assert r["tau"] == pytest.approx(1.0 + sum(at_least) / r["steps"], abs=1e-9)
        for i in range(len(u)):
            assert at_least[i] <= reached[i] <= offered[i] <= r["steps"]
            assert u[i] == (at_least[i] / offered[i] if offered[i] else 0.0)
            assert c[i] == (at_least[i] / reached[i] if reached[i] else 0.0)
        assert all(a >= b for a, b in zip(offered, offered[1:], strict=False))
    ar = [r for r in results["runs"] if r["method"] == "autoregressive"]
    assert all(r["tau"] == 1.0 for r in ar)
    # The truncated draft shares the target's embedding and head: it is accepted sometimes.
    dm = next(
        r for r in results["runs"] if (r["method"], r["category"]) == ("draft_model", "overall")
    )
    assert 1.0 < dm["tau"] <= N + 1


def test_tau_vs_n_sweep(bench):
    _, results = bench
    points = results["tau_vs_n"]
    assert [p["n"] for p in points] == [1, N]
    for p in points:
        assert 1.0 <= p["tau"] <= p["n"] + 1 and p["speedup"] > 0
    # Greedy decoding is deterministic: the sweep's N=2 point is the grid's draft_model run.
    grid = next(
        r for r in results["runs"] if (r["method"], r["category"]) == ("draft_model", "overall")
    )
    assert points[-1]["tau"] == grid["tau"]
    assert points[-1]["acceptance_by_position"] == grid["acceptance_by_position"]
    # ... reused, not re-run: the same timings; N=1 was timed in its own round-robin.
    assert points[-1]["times_s"] == grid["times_s"]
    assert points[0]["ar_times_s"] != grid["ar_times_s"]


def test_report_and_plots(bench):
    workdir, results = bench
    report = (workdir / "report.md").read_text()
    for needle in (
        "| method | batch | T | N | tau | tokens/s",
        "Acceptance by position",
        "tau vs N",
    ):
        assert needle in report
    for method in mt.registered_methods():
        assert f"| {method} |" in report
    assert "Compile times" in report and "launch.main --config=configs/bench.py" in report
    (curve,) = results["verify_cost"]  # one batch size: the target's forward over 1 and 3 tokens
    assert curve["blocks"] == [1, 3] and curve["batch"] == 1 and curve["cost"][0] == 1.0
    assert "## Verify cost" in report and "CPU kernel on" in report
    assert f"| 1 | {curve['seconds'][0] * 1e3:.2f} | 1.00 | {curve['cost'][1]:.2f} |" in report
    assert results["machine"]["cpu"]["caches"] and results["machine"]["cpu_kernel"] is True
    for name in ("speedup", "acceptance", "tau_vs_n"):
        png = workdir / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert f"plots/{name}.png" in report


def test_unknown_method_is_a_clear_error(tmp_path):
    cfg = tiny_config(["draft_model", "medusa-typo"])
    with pytest.raises(ValueError, match=r"unknown benchmark method 'medusa-typo'.*draft_model"):
        run_bench(cfg, tmp_path)  # fails before any model is loaded
    with pytest.raises(ValueError, match="needs a draft model"):
        run_bench(tiny_config(["draft_tree"]), tmp_path)
    with pytest.raises(
        ValueError, match=r"'medusa' needs medusa heads: set the config's `heads.medusa`"
    ):
        run_bench(tiny_config(["ngram", "medusa"]), tmp_path)


def test_registry_builds_configs_and_varies_depth(pair):
    target, draft = pair
    cfg = tiny_config(["draft_tree"])
    assert mt.speculative_config("autoregressive", cfg, None) is None
    tree = mt.speculative_config("draft_tree", mt.with_depth(cfg, "draft_tree", 3), draft)
    assert tree["draft_tree"] == {"depth": 3, "width": 2} and tree["num_speculative_tokens"] == 3
    assert cfg.draft_tree.depth == N  # with_depth copies
    ngram = mt.speculative_config("ngram", mt.with_depth(cfg, "ngram", 5), None)
    assert ngram == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    }
    assert mt.depth_of(cfg, "draft_model") == N and mt.depth_of(cfg, "autoregressive") == 0

    @mt.register_method("test_only_chain", needs_draft=True)
    def _chain(c, d):
        return {"method": "draft_model", "model": d, "num_speculative_tokens": 1}

    try:
        assert "test_only_chain" in mt.registered_methods()
        with pytest.raises(ValueError, match="already registered"):
            mt.register_method("test_only_chain")(lambda c, d: None)
    finally:
        mt._REGISTRY.pop("test_only_chain")


def test_make_batches_cycles_to_full_batches():
    p = [[1], [2], [3]]
    assert timing.make_batches(p, 2) == [[[1], [2]], [[3], [1]]]
    assert timing.make_batches(p, 1) == [[[1]], [[2]], [[3]]]
    assert timing.make_batches(p, 4) == [[[1], [2], [3], [1]]]
    with pytest.raises(ValueError):
        timing.make_batches([], 1)


def test_pool_stats_pools_by_counts():
    a = {
        "row_steps": [4],
        "accepted_tokens": 4,
        "draft_tokens": 8,
        "generated_tokens": [8],
        "offered_by_position": [4, 4],
        "reached_by_position": [4, 3],
        "accepted_by_position": [3, 1],
    }
    b = {
        "row_steps": [2, 2],
        "accepted_tokens": 1,
        "draft_tokens": 7,
        "generated_tokens": [3, 2],
        "offered_by_position": [4, 3],
        "reached_by_position": [4, 1],
        "accepted_by_position": [1, 0],
    }
    pooled = timing.pool_stats([a, b])
    assert pooled["steps"] == 8 and pooled["generated_tokens"] == 13
    assert pooled["tau"] == pytest.approx((5 + 8) / 8)
    assert pooled["offered_by_position"] == [8, 7]
    assert pooled["acceptance_by_position"] == pytest.approx([4 / 8, 1 / 7])
    assert pooled["conditional_acceptance_by_position"] == pytest.approx([4 / 8, 1 / 4])
    assert timing.pool_stats([pooled]) == pooled  # pooling is associative
    auto = timing.pool_stats(
        [{"row_steps": [3], "accepted_tokens": 0, "draft_tokens": 0, "generated_tokens": [4]}]
    )
    assert auto["acceptance_by_position"] == [] and auto["offered_by_position"] == []


def test_truncated_draft_copies_the_first_layers(pair):
    target, draft = pair
    assert draft.config.num_layers == 1 and draft.tokenizer is target.tokenizer
    tl = nnx.state(target.module.layers[0], nnx.Param)
    dl = nnx.state(draft.module.layers[0], nnx.Param)
    for x, y in zip(jax.tree.leaves(tl), jax.tree.leaves(dl), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(
        np.asarray(target.module.lm_head.kernel.get_value()),
        np.asarray(draft.module.lm_head.kernel.get_value()),
    )
    with pytest.raises(ValueError, match="num_layers=3"):
        truncated_draft(target, 3)


@pytest.mark.parametrize("arg", [None, "small"])
def test_bench_config_file(arg):
    spec = importlib.util.spec_from_file_location("bench_config", REPO / "configs" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(arg)
    assert config.task == "bench" and config.bench.num_speculative_tokens == 4
    assert tuple(config.bench.batch_sizes) == ((1,) if arg else (1, 8))
    with pytest.raises(ValueError, match="unknown variant"):
        module.get_config("huge")


def test_method_builders_forward_the_verification_rule():
    cfg = default_config()
    cfg.verification = "typical"
    cfg.allow_lossy = True
    spec = mt.speculative_config("draft_model", cfg, "draft")
    assert spec["verification"] == "typical" and spec["allow_lossy"] is True
    plain = mt.speculative_config("ngram", default_config(), None)
    assert "verification" not in plain and "allow_lossy" not in plain


def test_method_builders_forward_the_draft_weight_dtype(heads):
    cfg = default_config()
    drafts = mt.Drafts(model="draft", heads=(("medusa", heads), ("eagle3", "e3")))
    for name in ("draft_model", "medusa_chain", "eagle3"):
        assert "draft_weight_dtype" not in mt.speculative_config(name, cfg, drafts)
    cfg.draft_weight_dtype = "bfloat16"
    for name in ("draft_model", "draft_tree", "medusa", "medusa_chain", "eagle3", "eagle3_chain"):
        assert mt.speculative_config(name, cfg, drafts)["draft_weight_dtype"] == "bfloat16"
    for name in ("ngram", "lookahead"):  # nothing to read in bfloat16
        assert "draft_weight_dtype" not in mt.speculative_config(name, cfg, drafts)


def test_depth_at_batch_shortens_the_chains_at_that_batch_size(pair, heads, tmp_path):
    target, _ = pair
    cfg = tiny_config(["ngram", "medusa_chain", "lookahead"])
    cfg.update(batch_sizes=(1, 2), depth_at_batch=((2, 1),), tau_vs_n=(), verify_blocks=())
    cfg.lookahead.update(window=2, candidate_length=N, max_candidates=2)
    results = run_bench(cfg, tmp_path, target=target, heads={"medusa": heads})
    for r in results["runs"]:
        want = {"autoregressive": 0, "lookahead": N}.get(
            r["method"], 1 if r["batch_size"] == 2 else N
        )
        # the row names the depth it ran, and its statistics are that deep
        assert r["depth"] == want == len(r["acceptance_by_position"])
    assert {r["batch_size"] for r in results["runs"]} == {1, 2}
    assert "| ngram | 2 | 0 | 1 |" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        (((8, 2),), r"names batch size 8, which the run does not time: batch_sizes is \(1,\)"),
        (((1, 0),), r"\(1, 0\) is not a \(batch_size, num_speculative_tokens\) pair"),
        ((1, 2), r"1 is not a \(batch_size, num_speculative_tokens\) pair"),
        (((1, 2), (1, 3)), "names batch size 1 twice"),
    ],
)
def test_bad_depth_at_batch_is_refused_before_loading(tmp_path, pairs, match):
    cfg = tiny_config(["ngram"])
    cfg.depth_at_batch = pairs
    with pytest.raises(ValueError, match=match):
        run_bench(cfg, tmp_path)  # no target set: the check comes before any load


@pytest.mark.parametrize("key", ["weight_dtype", "draft_weight_dtype"])
def test_bad_weight_dtypes_are_refused_before_loading(tmp_path, key):
    cfg = tiny_config(["ngram"])
    cfg[key] = "float16"
    with pytest.raises(ValueError, match=rf"{key}='float16' is not one of \(None, 'bfloat16'\)"):
        run_bench(cfg, tmp_path)  # no target set: the check comes before any load


def test_report_names_the_weights_as_read(bench, tmp_path):
    from specjax.bench.report import write_report

    _, results = bench
    text = write_report(results, tmp_path / "plain.md").read_text()
    assert "Weights as read" not in text
    cfg = {**results["config"], "weight_dtype": "bfloat16", "draft_weight_dtype": "bfloat16"}
    text = write_report({**results, "config": cfg}, tmp_path / "bf16.md").read_text()
    assert "the target's bfloat16 (every method and the AR baseline), the drafts' bfloat16" in text


def test_medusa_methods_cut_the_tree_to_the_heads_used(heads):
    cfg = default_config()
    cfg.medusa_tree = "mc_sim_7b_63"
    drafts = mt.Drafts(heads=(("medusa", heads),))
    full = mt.speculative_config("medusa", mt.with_depth(cfg, "medusa", 4), drafts)
    assert full["model"] is heads and full["draft_tree"].num_drafts == 63
    two = mt.speculative_config("medusa", mt.with_depth(cfg, "medusa", 2), drafts)
    assert two["draft_tree"].max_depth == 2 and two["draft_tree"].num_drafts == 38
    assert mt.get_method("medusa").num_nodes(cfg, 1) == 10  # mc_sim_7b_63's first level
    chain = mt.speculative_config("medusa_chain", cfg, drafts)
    assert "draft_tree" not in chain and chain["num_speculative_tokens"] == 4


def test_lossy_rows_are_labelled():
    from specjax.bench.report import method_label

    assert timing.pool_stats([{"row_steps": [1], "accepted_tokens": 0, "draft_tokens": 0,
                               "generated_tokens": [2], "lossy": True}])["lossy"] is True  # fmt: skip
    assert method_label({"method": "medusa", "lossy": True}) == "medusa (lossy)"
    assert method_label({"method": "medusa", "lossy": False}) == "medusa"


def test_every_prompt_bucket_is_compiled_in_the_warm_up(pair):
    """Categories whose prompts fall in different buckets (Spec-Bench's do: 40 to 250 tokens)
    are each compiled in the warm-up, so no timed repeat includes a compile."""
    target = pair[0]
    rng = np.random.default_rng(0)
    V = target.config.vocab_size
    workloads = {
        "short": timing.make_batches([rng.integers(0, V, 10).tolist()], 1),  # bucket 16
        "long": timing.make_batches([rng.integers(0, V, 40).tolist()], 1),  # bucket 64
        "same": timing.make_batches([rng.integers(0, V, 12).tolist()], 1),  # bucket 16
    }
    assert [len(b[0]) for b in timing.warmup_batches(workloads)] == [10, 40]
    assert [len(b[0]) for b in timing.warmup_batches(workloads, skip=[[0] * 9])] == [40]
    runner = timing.Runner(target, 4, 0)
    spec = {"method": "ngram", "num_speculative_tokens": N}
    measured = runner.compare_many(workloads, 0.0, {"ngram": spec}, 1)
    assert measured["ngram"]["retraced"] == 0


def test_each_round_robin_releases_the_previous_ones_programs(pair):
    """Compiled programs are dropped before a round-robin compiles its own: XLA:CPU maps each
    executable in many regions, and a run that kept them all hit the kernel's cap on a
    process's mappings (`timing.release_programs`)."""
    from specjax.decoding import engine

    def live():
        return sum(
            f._cache_size() for f in (engine._generate_jit, engine._prefill_jit, engine._step_jit)
        )

    target = pair[0]
    workloads = {"code": timing.make_batches([list(range(3, 13))], 1)}
    runner = timing.Runner(target, 4, 0)
    runner.compare_many(workloads, 0.0, {"a": {"method": "ngram", "num_speculative_tokens": 2}}, 1)
    first = live()
    assert first >= 2  # AR and the method
    runner.compare_many(workloads, 0.0, {"b": {"method": "ngram", "num_speculative_tokens": 1}}, 1)
    assert live() == first  # kept, the AR program would be shared: first + 1


def test_a_crashed_bench_resumes_from_its_finished_cells(pair, tmp_path, monkeypatch):
    """Cells are written as they finish; a re-run measures only the missing ones, and a
    changed config is measured afresh."""
    target, _ = pair
    cfg = tiny_config(["ngram"])
    cfg.temperatures = (0.0, 1.0)
    cfg.tau_vs_n = ()
    cfg.verify_blocks = ()
    real = timing.Runner.compare_many
    calls = []

    def counting(self, workloads, temperature, specs, repeats):
        calls.append(temperature)
        if crash and len(calls) == 2:
            raise RuntimeError("simulated crash in the second cell")
        return real(self, workloads, temperature, specs, repeats)

    monkeypatch.setattr(timing.Runner, "compare_many", counting)
    crash = True
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_bench(cfg, tmp_path, target=target)
    partial = json.loads((tmp_path / "cells.partial.json").read_text())
    assert list(partial["cells"]) == ["b=1 T=0.0"] and not (tmp_path / "results.json").exists()
    first = partial["cells"]["b=1 T=0.0"]

    crash, calls[:] = False, []
    results = run_bench(cfg, tmp_path, target=target)
    assert calls == [1.0]  # only the cell the crash lost
    assert results["runs"][: len(first)] == first  # the finished cell, as it was measured
    assert {r["temperature"] for r in results["runs"]} == {0.0, 1.0}
    assert (tmp_path / "results.json").exists() and not (tmp_path / "cells.partial.json").exists()

    # A partial file from another config is not resumed from.
    crash, calls[:] = True, []
    with pytest.raises(RuntimeError):
        run_bench(cfg, tmp_path, target=target)
    crash, calls[:] = False, []
    cfg.max_new_tokens = 12
    run_bench(cfg, tmp_path, target=target)
    assert calls == [0.0, 1.0]
