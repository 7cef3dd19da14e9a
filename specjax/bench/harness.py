"""The benchmark harness: every method x batch size x temperature against autoregressive.

    results = run_bench(cfg, workdir)   # cfg = specjax.bench.default_config(), filled in

Top to bottom: load the target (and the draft, if any); take held-out prompts of each
category (code, prose) with the target's tokenizer; for every method x batch size x
temperature, warm up (the compile is timed and reported apart), then `cfg.repeats` timed
repeats interleaved with the autoregressive baseline (`timing.Runner.compare`), per category
and pooled over categories ("overall"); then the tau-vs-N sweep of draft_model at batch 1
(T=0 unless `tau_vs_n_temperature` says otherwise). Every call generates exactly
`max_new_tokens` per row (no stop ids), so all methods do the same work. Writes `results.json`, `report.md` and `plots/*.png` in workdir.

The draft's vocabulary is checked against the target's once, here; the timed calls get the
draft without its tokenizer so that `generate` does not repeat that host-side check (a
per-request validation a server does once) inside every timed call.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from pathlib import Path

from tqdm.auto import tqdm

from specjax import picker
from specjax.bench import methods as mt
from specjax.bench import plots, report, timing
from specjax.io.hf import load_model
from specjax.models import Model, as_model, check_same_vocabulary
from specjax.train import data

log = logging.getLogger(__name__)

OVERALL = "overall"


def resolve_models(cfg, target=None, draft=None) -> tuple[Model, Model | None, Model | None]:
    """(target, draft, draft for timed calls): given Models win over the config's paths.

    Args:
      cfg: a config with `target` and `draft` paths ("" = unset).
      target, draft: optional Models (or Decoders) used instead of the paths.
    Returns:
      The target, the draft (None when there is none) and the draft stripped of its
      tokenizer (its vocabulary already checked against the target's).
    """
    if target is None:
        if not cfg.target:
            raise ValueError("no target model: set the config's `target` to a checkpoint directory")
        target = load_model(cfg.target)
    target = as_model(target)
    if target.tokenizer is None:
        raise ValueError("the target model needs a tokenizer (held-out prompts are tokenised)")
    if draft is None and cfg.draft:
        draft = load_model(cfg.draft)
    if draft is None:
        return target, None, None
    draft = as_model(draft)
    check_same_vocabulary(target, draft)
    return target, draft, Model(draft.module, None, draft.source)


def prompts_by_category(cfg, tokenizer) -> dict[str, list[list[int]]]:
    """{category: prompt ids}: `cfg.num_prompts` held-out prompts of each category."""
    ds = data.load_text_dataset(cfg.data.source)
    _, eval_ds = data.split_dataset(ds, cfg.data.eval_fraction, cfg.data.seed)
    grouped: dict[str, list[list[int]]] = {}
    for category, ids in data.held_out_prompts(
        eval_ds, tokenizer, cfg.num_prompts, cfg.prompt_tokens, cfg.seed
    ):
        grouped.setdefault(category, []).append(ids)
    return grouped


def _cell_rows(name, batch_size, temperature, measured) -> list[dict]:
    """results.json rows (one per category plus "overall") from one `Runner.compare`."""
    rows, cats = [], measured["categories"]
    pooled_times = [sum(t) for t in zip(*(c["times_s"] for c in cats.values()), strict=True)]
    pooled_ar = [sum(t) for t in zip(*(c["ar_times_s"] for c in cats.values()), strict=True)]
    overall = {
        "times_s": pooled_times,
        "ar_times_s": pooled_ar,
        "stats": timing.pool_stats([c["stats"] for c in cats.values()]),
    }
    for category, entry in [*cats.items(), (OVERALL, overall)]:
        tokens = entry["stats"]["generated_tokens"]
        t, t_ar = timing.median(entry["times_s"]), timing.median(entry["ar_times_s"])
        rows.append(
            {
                "method": name,
                "category": category,
                "batch_size": batch_size,
                "temperature": temperature,
                "tau": entry["stats"]["tau"],
                "acceptance_by_position": entry["stats"]["acceptance_by_position"],
                "conditional_acceptance_by_position": entry["stats"][
                    "conditional_acceptance_by_position"
                ],
                "alpha": picker.alpha_from_acceptance(entry["stats"]["acceptance_by_position"]),
                **{key: entry["stats"][key] for key in timing.POSITION_COUNTS},
                "steps": entry["stats"]["steps"],
                "generated_tokens": tokens,
                "tokens_per_s": tokens / t,
                "ar_tokens_per_s": tokens / t_ar,
                "speedup": t_ar / t,
                "compile_s": measured["compile_s"],
                "warmup_s": measured["warmup_s"],
                "ar_compile_s": measured["ar_compile_s"],
                "retraced": measured["retraced"],
                "times_s": entry["times_s"],
                "ar_times_s": entry["ar_times_s"],
            }
        )
    return rows


def _tau_vs_n(cfg, runner, workloads, draft, progress) -> list[dict]:
    """draft_model at batch 1 and cfg.tau_vs_n_temperature, for N in cfg.tau_vs_n."""
    points = []
    temperature = float(cfg.get("tau_vs_n_temperature", 0.0))
    for n in cfg.tau_vs_n:
        spec = mt.speculative_config("draft_model", mt.with_depth(cfg, "draft_model", n), draft)
        measured = runner.compare(workloads, temperature, spec, cfg.repeats)
        row = _cell_rows("draft_model", 1, temperature, measured)[-1]
        points.append(
            {
                "n": int(n),
                "temperature": temperature,
                "tau": row["tau"],
                "speedup": row["speedup"],
                "alpha": row["alpha"],
                "acceptance_by_position": row["acceptance_by_position"],
                "compile_s": row["compile_s"],
                "times_s": row["times_s"],
                "ar_times_s": row["ar_times_s"],
            }
        )
        progress.update()
    return points


def _command(cfg, workdir, target, draft) -> dict:
    argv = sys.argv
    invoked = shlex.join(["python", "-m", "launch.main", *argv[1:]])
    if not argv or not argv[0].endswith(("launch/main.py", "launch.main")):
        invoked = shlex.join(["python", *argv])
    reproduce = shlex.join(
        [
            "python",
            "-m",
            "launch.main",
            "--config=configs/bench.py",
            f"--config.bench.target={cfg.target or target.source or '<target dir>'}",
            f"--config.bench.draft={cfg.draft or (draft.source if draft else '') or '<draft dir>'}",
            f"--workdir={workdir}",
        ]
    )
    return {"invoked": invoked, "reproduce": reproduce}


def run_bench(cfg, workdir, *, target=None, draft=None) -> dict:
    """Benchmark every method in `cfg.methods` against autoregressive decoding.

    Args:
      cfg: a `specjax.bench.default_config()` ConfigDict (target/draft paths, methods, grid).
      workdir: output directory (created).
      target, draft: optional Models used instead of `cfg.target` / `cfg.draft`.
    Returns:
      The results dict written to `<workdir>/results.json`: {"machine", "config", "runs",
      "tau_vs_n", "models", "command", "prompts"}; each run row has method, category,
      batch_size, temperature, tau, acceptance_by_position,
      conditional_acceptance_by_position, tokens_per_s, ar_tokens_per_s, speedup,
      compile_s, times_s (and more).
    """
    # Names and the need for a draft are checked before any model is loaded.
    mt.check_methods(cfg.methods, draft if draft is not None else (cfg.draft or None))
    target, draft, timed_draft = resolve_models(cfg, target, draft)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    machine = timing.machine_info()
    prompts = prompts_by_category(cfg, target.tokenizer)
    runner = timing.Runner(target, int(cfg.max_new_tokens), int(cfg.seed))
    sweep = list(cfg.tau_vs_n) if draft is not None else []
    grid = [
        (name, int(b), float(t))
        for name in cfg.methods
        for b in cfg.batch_sizes
        for t in cfg.temperatures
    ]
    runs = []
    with tqdm(total=len(grid) + len(sweep), desc="bench", unit="run") as progress:
        for name, batch_size, temperature in grid:
            progress.set_postfix_str(f"{name} b={batch_size} T={temperature}")
            spec = mt.speculative_config(name, cfg, timed_draft)
            workloads = {c: timing.make_batches(p, batch_size) for c, p in prompts.items()}
            measured = runner.compare(workloads, temperature, spec, int(cfg.repeats))
            runs += _cell_rows(name, batch_size, temperature, measured)
            progress.update()
        progress.set_postfix_str("tau vs N")
        singles = {c: timing.make_batches(p, 1) for c, p in prompts.items()}
        tau_vs_n = _tau_vs_n(cfg, runner, singles, timed_draft, progress) if sweep else []
    results = {
        "machine": machine,
        "config": cfg.to_dict(),
        "models": {"target": repr(target), "draft": repr(draft) if draft else None},
        "prompts": {c: len(p) for c, p in prompts.items()},
        "command": _command(cfg, workdir, target, draft),
        "runs": runs,
        "tau_vs_n": tau_vs_n,
    }
    (workdir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    plot_files = plots.make_plots(results, workdir / "plots")
    report.write_report(results, workdir / "report.md", plot_files)
    log.info("benchmark written to %s", workdir)
    return results
