"""The benchmark harness: every method x batch size x temperature against autoregressive.

    results = run_bench(cfg, workdir)   # cfg = specjax.bench.default_config(), filled in

Top to bottom: load the target (and the draft, if any); take held-out prompts of each
category (code, prose) with the target's tokenizer; for every method x batch size x
temperature, warm up (the compile is timed and reported apart), then `cfg.repeats` timed
repeats round-robin with one autoregressive baseline per (batch size, temperature) cell
(`timing.Runner.compare_many`: AR, m1, m2, ..., AR, m1, ...), per category and pooled over
categories ("overall"); then the tau-vs-N sweep of draft_model at batch 1 (T=0 unless
`tau_vs_n_temperature` says otherwise; the N the grid already ran is reused). Every call generates exactly
`max_new_tokens` per row (no stop ids), so all methods do the same work. Writes `results.json`, `report.md` and `plots/*.png` in workdir.

Every finished cell (and the tau-vs-N sweep) is written to `<workdir>/cells.partial.json` as it
finishes; running the same benchmark again (same config, models and machine) measures only
the cells still missing (`specjax.bench.resume`).

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

import jax
from flax import nnx
from tqdm.auto import tqdm

from specjax import parallel
from specjax.bench import methods as mt
from specjax.bench import plots, report, resume, timing
from specjax.bench.verify_cost import measure_verify_cost
from specjax.bench.workload import at_batch, check_inputs, prompts_by_category, resolve_models
from specjax.speedup import alpha_from_acceptance

log = logging.getLogger(__name__)

OVERALL = "overall"


def _cell_rows(name, batch_size, temperature, measured, depth: int) -> list[dict]:
    """results.json rows (one per category plus "overall") from one `Runner.compare` of a
    method drafting `depth` tokens deep (0 for autoregressive)."""
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
                "depth": depth,
                "tau": entry["stats"]["tau"],
                "lossy": entry["stats"]["lossy"],
                "acceptance_by_position": entry["stats"]["acceptance_by_position"],
                "conditional_acceptance_by_position": entry["stats"][
                    "conditional_acceptance_by_position"
                ],
                "alpha": alpha_from_acceptance(entry["stats"]["acceptance_by_position"]),
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


def _tau_vs_n(cfg, runner, workloads, draft, grid_rows) -> list[dict]:
    """draft_model at batch 1 and cfg.tau_vs_n_temperature, for N in cfg.tau_vs_n.

    Every N is timed in one round-robin against one baseline; an N the grid already ran
    (draft_model at batch 1 and the same temperature, at the depth it ran) reuses its row.
    """
    temperature = float(cfg.get("tau_vs_n_temperature", 0.0))
    measured_rows = {}
    for row in grid_rows:
        if (row["method"], row["batch_size"], row["temperature"], row["category"]) == (
            "draft_model",
            1,
            temperature,
            OVERALL,
        ):
            measured_rows[int(row["depth"])] = row
    specs = {
        int(n): mt.speculative_config("draft_model", mt.with_depth(cfg, "draft_model", n), draft)
        for n in cfg.tau_vs_n
        if int(n) not in measured_rows
    }
    if specs:
        many = runner.compare_many(workloads, temperature, specs, int(cfg.repeats))
        for n, measured in many.items():
            measured_rows[n] = _cell_rows("draft_model", 1, temperature, measured, n)[-1]
    return [
        {
            "n": int(n),
            "temperature": temperature,
            **{
                key: measured_rows[int(n)][key]
                for key in (
                    "tau",
                    "speedup",
                    "alpha",
                    "acceptance_by_position",
                    "compile_s",
                    "times_s",
                    "ar_times_s",
                )
            },
        }
        for n in cfg.tau_vs_n
    ]


def _invoked(argv: list[str]) -> str:
    """The command line that started this process, as a user types it."""
    path = Path(argv[0]) if argv else Path("python")
    if path.parent.name == "launch" and path.suffix == ".py":  # python -m launch.<name>
        return shlex.join(["python", "-m", f"launch.{path.stem}", *argv[1:]])
    if path.name == "specjax":  # the console script
        return shlex.join(["specjax", *argv[1:]])
    return shlex.join(["python", *argv])


def _command(cfg, workdir, target, draft) -> dict:
    invoked = _invoked(sys.argv)
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


def _describe_heads(heads) -> str:
    c = heads.config
    if c.method in ("eagle", "eagle3"):
        taps = f", taps {c.tap_layers}, draft vocab {c.draft_vocab_size}" if c.tap_layers else ""
        return (
            f"{c.method} drafter: 1 layer, {c.num_params() / 1e6:.2f}M params{taps}, "
            f"base {c.base_model or '?'}"
        )
    vocab = f", draft vocab {c.draft_vocab_size}" if c.truncated else ""
    return (
        f"{c.method} heads: K={c.num_heads}, {c.num_layers} block(s), "
        f"{c.num_params() / 1e6:.2f}M params{vocab}, base {c.base_model or '?'}"
    )


def _digests(target, draft, drafts) -> dict:
    """{name: digest of its weights} of every model the bench runs (what a resumed cell must
    have been measured with)."""
    models = {"target": target.module, "draft": draft.module if draft else None,
              **{f"heads.{slot}": h for slot, h in drafts.heads}}  # fmt: skip
    return {k: resume.params_digest(nnx.state(m)) for k, m in models.items() if m is not None}


def _verify_curves(cfg, target) -> list[dict]:
    """The target's verify-cost curve at every batch size of the grid (`cfg.verify_blocks`;
    empty: not measured)."""
    room = target.config.max_position_embeddings - int(cfg.prompt_tokens)
    blocks = [int(b) for b in cfg.get("verify_blocks", ()) if int(b) <= room]
    if not blocks:
        return []
    timing.release_programs()  # the last cell's decode programs (see there)
    return [
        measure_verify_cost(
            target,
            blocks,
            batch=int(b),
            context=int(cfg.prompt_tokens),
            repeats=max(int(cfg.repeats), 3),
            weight_dtype=mt.weight_dtype(cfg),
        )  # fmt: skip
        for b in cfg.batch_sizes
    ]


def run_bench(cfg, workdir, *, target=None, draft=None, heads=None) -> dict:
    """Benchmark every method in `cfg.methods` against autoregressive decoding.

    Args:
      cfg: a `specjax.bench.default_config()` ConfigDict (target/draft/heads paths, methods,
        grid).
      workdir: output directory (created).
      target, draft: optional Models used instead of `cfg.target` / `cfg.draft`.
      heads: optional {slot: heads} used instead of `cfg.heads.<slot>` paths.
    Returns:
      The results dict written to `<workdir>/results.json`: {"machine", "config",
      "verify_cost" (the target's forward over T-token blocks per batch size), "runs",
      "tau_vs_n", "models", "command", "prompts"}; each run row has method, category,
      batch_size, temperature, tau, acceptance_by_position,
      conditional_acceptance_by_position, tokens_per_s, ar_tokens_per_s, speedup,
      compile_s, times_s (and more).
    """
    # Names and the need for a draft or heads are checked before any model is loaded.
    check_inputs(cfg, draft, heads)
    target, draft, drafts = resolve_models(cfg, target, draft, heads)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    machine = timing.machine_info()
    prompts = prompts_by_category(cfg, target.tokenizer)
    runner = timing.Runner(target, int(cfg.max_new_tokens), int(cfg.seed), mt.weight_dtype(cfg))
    sweep = list(cfg.tau_vs_n) if draft is not None else []
    cells = [(int(b), float(t)) for b in cfg.batch_sizes for t in cfg.temperatures]
    store = resume.CellStore(
        workdir,
        resume.fingerprint(cfg.to_dict(), _digests(target, draft, drafts), machine),
        write=jax.process_index() == 0,
    )
    runs = []
    # One round-robin per (batch size, temperature): every method against one baseline.
    with tqdm(total=len(cells) + bool(sweep), desc="bench", unit="cell") as progress:
        for batch_size, temperature in cells:
            name = f"b={batch_size} T={temperature}"
            if (rows := store.get(name)) is None:
                progress.set_postfix_str(f"{name}: {', '.join(cfg.methods)}")
                cell = at_batch(cfg, batch_size)  # depth_at_batch's N at this batch size
                specs = {m: mt.speculative_config(m, cell, drafts) for m in cfg.methods}
                workloads = {c: timing.make_batches(p, batch_size) for c, p in prompts.items()}
                many = runner.compare_many(workloads, temperature, specs, int(cfg.repeats))
                rows = [
                    r
                    for m in cfg.methods
                    for r in _cell_rows(m, batch_size, temperature, many[m], mt.depth_of(cell, m))
                ]
                store.put(name, rows)
            runs += rows
            progress.update()
        tau_vs_n = []
        if sweep:
            if (tau_vs_n := store.get("tau_vs_n")) is None:
                progress.set_postfix_str("tau vs N")
                singles = {c: timing.make_batches(p, 1) for c, p in prompts.items()}
                tau_vs_n = _tau_vs_n(cfg, runner, singles, drafts, runs)
                store.put("tau_vs_n", tau_vs_n)
            progress.update()
    verify = _verify_curves(cfg, target)
    results = {
        "machine": machine,
        "config": cfg.to_dict(),
        "verify_cost": verify,
        "models": {
            "target": repr(target),
            "draft": repr(draft) if draft else None,
            **{f"heads.{slot}": _describe_heads(h) for slot, h in drafts.heads},
        },
        "prompts": {c: len(p) for c, p in prompts.items()},
        "command": _command(cfg, workdir, target, draft),
        "runs": runs,
        "tau_vs_n": tau_vs_n,
    }
    if jax.process_index() == 0:  # several processes share the workdir: one writer
        (workdir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        plot_files = plots.make_plots(results, workdir / "plots")
        report.write_report(results, workdir / "report.md", plot_files)
        store.finish()
        log.info("benchmark written to %s", workdir)
    parallel.barrier(f"bench {workdir}")  # every process returns once they exist
    return results
