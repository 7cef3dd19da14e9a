"""report.md from a benchmark's results: tables, plots, machine and the command."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from specjax.bench.markdown import table
from specjax.speedup import expected_tokens_per_call

OVERALL = "overall"


def method_label(r: dict) -> str:
    """A row's method name, marked when its verification rule is lossy."""
    return r["method"] + (" (lossy)" if r.get("lossy") else "")


def _table(header: list[str], rows: list[list], align: str | None = None) -> list[str]:
    """The table's lines and a blank one (report sections are lists of lines)."""
    return [table(header, rows, align), ""]


def _series(values) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "—"


def _range(r: dict) -> str:
    ratios = [a / t for a, t in zip(r["ar_times_s"], r["times_s"], strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _key(r: dict):
    return (method_label(r), r["batch_size"], r["temperature"])


def _summary(runs: list[dict]) -> list[str]:
    rows = [r for r in runs if r["category"] == OVERALL and r["method"] != "autoregressive"]
    if not rows:
        return []
    best = max(rows, key=lambda r: r["speedup"])
    worst = min(rows, key=lambda r: r["speedup"])
    spreads = sorted(
        (max(r["ar_times_s"]) - min(r["ar_times_s"])) / statistics.median(r["ar_times_s"])
        for r in rows
    )
    return [
        f"Best: **{best['method']}** at batch {best['batch_size']}, T={best['temperature']:g}: "
        f"{best['speedup']:.2f}x (tau {best['tau']:.2f}). Worst: {worst['method']} at batch "
        f"{worst['batch_size']}, T={worst['temperature']:g}: {worst['speedup']:.2f}x.",
        "",
        "Timing noise: the autoregressive repeats of a cell spread by (max - min) / median = "
        f"{100 * statistics.median(spreads):.0f}% (median over cells, worst "
        f"{100 * spreads[-1]:.0f}%). Paired repeats cancel slow drifts; the range column "
        "gives the per-repeat speedups (AR time / method time of the same repeat).",
        "",
    ]


def _main_tables(runs: list[dict]) -> list[str]:
    overall = [r for r in runs if r["category"] == OVERALL]
    lines = ["## Speedup, all categories", ""]
    lines += _table(
        ["method", "batch", "T", "N", "tau", "tokens/s", "AR tokens/s", "speedup", "range"],
        [
            [
                method_label(r),
                r["batch_size"],
                f"{r['temperature']:g}",
                r.get("depth", "—"),  # the draft depth the cell ran (0: none)
                f"{r['tau']:.2f}",
                f"{r['tokens_per_s']:.1f}",
                f"{r['ar_tokens_per_s']:.1f}",
                f"**{r['speedup']:.2f}x**",
                _range(r),
            ]
            for r in overall
        ],
        "lrrrrrrrr",
    )
    per_cat = [r for r in runs if r["category"] != OVERALL]
    lines += ["## Per category", ""]
    lines += _table(
        ["method", "category", "batch", "T", "tau", "tokens/s", "speedup"],
        [
            [
                method_label(r),
                r["category"],
                r["batch_size"],
                f"{r['temperature']:g}",
                f"{r['tau']:.2f}",
                f"{r['tokens_per_s']:.1f}",
                f"{r['speedup']:.2f}x",
            ]
            for r in sorted(per_cat, key=lambda r: (*_key(r), r["category"]))
        ],
        "llrrrrr",
    )
    return lines


def _acceptance_table(runs: list[dict]) -> list[str]:
    rows = [r for r in runs if r["category"] == OVERALL and r["acceptance_by_position"]]
    lines = [
        "## Acceptance by position (all categories)",
        "",
        "Unconditional: P(a step accepts >= i drafts); conditional: P(>= i | >= i-1). "
        "alpha: accepted / attempted drafts (the i.i.d. maximum-likelihood estimate).",
        "",
    ]
    return lines + _table(
        ["method", "batch", "T", "alpha", "unconditional i=1..", "conditional i=1.."],
        [
            [
                method_label(r),
                r["batch_size"],
                f"{r['temperature']:g}",
                f"{r['alpha']:.3f}",
                _series(r["acceptance_by_position"]),
                _series(r["conditional_acceptance_by_position"]),
            ]
            for r in rows
        ],
        "lrrrll",
    )


def _tau_vs_n_table(points: list[dict]) -> list[str]:
    if not points:
        return []
    alpha = max(points, key=lambda p: p["n"])["alpha"]
    lines = [
        f"## tau vs N (draft_model, T={points[0].get('temperature', 0.0):g}, batch 1)",
        "",
        f"Theory: (1 - a^(N+1)) / (1 - a) with a = {alpha:.3f}, the alpha measured at the "
        "largest N.",
        "",
    ]
    return lines + _table(
        ["N", "tau", "theory tau", "alpha at N", "speedup"],
        [
            [
                p["n"],
                f"{p['tau']:.2f}",
                f"{expected_tokens_per_call(alpha, p['n']):.2f}",
                f"{p['alpha']:.3f}",
                f"{p['speedup']:.2f}x",
            ]
            for p in points
        ],
        "rrrrr",
    )


def _compile_table(runs: list[dict]) -> list[str]:
    rows = [r for r in runs if r["category"] == OVERALL]
    lines = [
        "## Compile times",
        "",
        "First call of each program minus a steady call of the same shape; reported apart "
        "from the timed repeats. retraced > 0 would mean a compile polluted the timings.",
        "",
    ]
    return lines + _table(
        ["method", "batch", "T", "compile s", "first call s", "AR compile s", "retraced"],
        [
            [
                method_label(r),
                r["batch_size"],
                f"{r['temperature']:g}",
                f"{r['compile_s']:.2f}",
                f"{r['warmup_s']:.2f}",
                f"{r['ar_compile_s']:.2f}",
                r["retraced"],
            ]
            for r in rows
        ],
        "lrrrrrr",
    )


def _verify_table(curves: list[dict]) -> list[str]:
    """One row per batch size: the target forward over T tokens in one-token forwards."""
    if not curves:
        return []
    blocks = curves[0]["blocks"]
    rows = [[c["batch"], f"{c['seconds'][0] * 1e3:.2f}", *(f"{x:.2f}" for x in c["cost"])]
            for c in curves]  # fmt: skip
    kernel = "on" if curves[0].get("cpu_kernel") else "off"
    return [
        "## Verify cost",
        "",
        f"The target's forward over a block of T tokens, in one-token forwards (AR steps), "
        f"over {curves[0]['context']} committed tokens; CPU kernel {kernel}. A step that "
        "verifies N draft nodes pays the T = N + 1 column (the picker prices it so).",
        "",
        table(["batch", "1-token ms", *(f"T={b}" for b in blocks)], rows),
        "",
    ]


def _weights_line(cfg: dict) -> list[str]:
    """A line naming the weights' dtypes as read, when the run set any ("" = as stored)."""
    target, drafts = cfg.get("weight_dtype") or "", cfg.get("draft_weight_dtype") or ""
    if not target and not drafts:
        return []
    return [
        f"Weights as read: the target's {target or 'as stored'} (every method and the AR "
        f"baseline), the drafts' {drafts or 'as stored'}."
    ]


def write_report(results: dict, path, plot_files: dict | None = None) -> Path:
    """Write report.md for `results` (the dict of results.json).

    Args:
      results: run_bench's results.
      path: the markdown file to write.
      plot_files: {name: png path} to embed (relative links).
    Returns:
      The path written.
    """
    path = Path(path)
    cfg, machine = results["config"], results["machine"]
    lines = [
        "# Speculative decoding benchmark",
        "",
        f"Target: `{results['models']['target']}`  ",
        f"Draft: `{results['models']['draft']}`  ",
        f"Prompts per category: {results['prompts']}, {cfg['prompt_tokens']} tokens each; "
        f"{cfg['max_new_tokens']} new tokens per row (no stop ids); {cfg['repeats']} timed "
        "repeats per cell, each interleaved with the autoregressive baseline (AR, method, "
        "AR, method, ...); speedup = median AR time / median method time; a batch of b "
        "rows cycles the category's prompts; N = the draft depth a cell ran (a chain's "
        "length, a tree's depth; 0 = none).",
        *_weights_line(cfg),
        "",
        *_summary(results["runs"]),
        *_main_tables(results["runs"]),
        *_acceptance_table(results["runs"]),
        *_tau_vs_n_table(results.get("tau_vs_n", [])),
        *_compile_table(results["runs"]),
        *_verify_table(results.get("verify_cost", [])),
    ]
    if plot_files:
        lines += ["## Plots", ""]
        for name, file in plot_files.items():
            lines += [f"![{name}]({os.path.relpath(file, path.parent)})", ""]
    lines += ["## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in machine.items()] + [""]
    lines += [
        "## Command",
        "",
        "```",
        results["command"]["invoked"],
        "```",
        "",
        "To reproduce:",
        "",
        "```",
        results["command"]["reproduce"],
        "```",
        "",
    ]
    path.write_text("\n".join(lines))
    return path
