"""PNG plots of a benchmark's results.json: speedup, acceptance by position, tau vs N.

The style (size, fonts, grid, a colour per method) is `plotstyle`'s, shared with the sweep
runner and the experiments.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specjax.bench import plotstyle
from specjax.speedup import expected_tokens_per_call

OVERALL = "overall"


def _overall(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["category"] == OVERALL]


def _ratio_err(rows: list[dict]) -> np.ndarray:
    """[2, n] error bars from the median speedup to the min / max per-repeat paired ratio."""
    err = []
    for r in rows:
        if not r:
            err.append((np.nan, np.nan))
            continue
        ratios = [a / t for a, t in zip(r["ar_times_s"], r["times_s"], strict=True)]
        err.append((r["speedup"] - min(ratios), max(ratios) - r["speedup"]))
    return np.clip(np.array(err, float).reshape(-1, 2).T, 0.0, None)


def speedup_plot(runs: list[dict], path: Path) -> Path:
    """Grouped bars: one group per method, one bar per (batch size, temperature)."""
    rows = _overall(runs)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cells = sorted({(r["batch_size"], r["temperature"]) for r in rows})
    by_key = {(r["method"], r["batch_size"], r["temperature"]): r for r in rows}
    width = 0.8 / max(len(cells), 1)
    x = np.arange(len(methods))
    with plotstyle.figure(path, width=max(6.0, 1.6 * len(methods) + 2), height=4.2) as (_, axes):
        ax = axes[0]
        for j, (b, t) in enumerate(cells):
            found = [by_key.get((m, b, t), {}) for m in methods]
            values = [r.get("speedup", np.nan) for r in found]
            offset = x + (j - (len(cells) - 1) / 2) * width
            bars = ax.bar(offset, values, width, label=f"b={b}, T={t:g}")
            ax.errorbar(offset, values, yerr=_ratio_err(found), fmt="none", ecolor="black", lw=0.8)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, label_type="center")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(x, methods)
        ax.set_ylabel("speedup over autoregressive (x)")
        ax.set_title(
            "Speedup over autoregressive, all categories\n(whiskers: min-max of paired repeats)"
        )
        ax.legend(ncols=min(len(cells), 4))
        ax.margins(y=0.15)
    return path


def acceptance_plot(runs: list[dict], path: Path) -> Path:
    """Acceptance by draft position per method: unconditional (solid), conditional (dashed).

    One panel per temperature, at the smallest batch size.
    """
    rows = [r for r in _overall(runs) if r["acceptance_by_position"]]
    temps = sorted({r["temperature"] for r in rows}) or [0.0]
    batch = min((r["batch_size"] for r in rows), default=1)
    with plotstyle.figure(path, ncols=len(temps)) as (fig, axes):
        for ax, t in zip(axes, temps, strict=True):
            for r in (r for r in rows if r["temperature"] == t and r["batch_size"] == batch):
                pos = np.arange(1, len(r["acceptance_by_position"]) + 1)
                color = plotstyle.method_color(r["method"])
                ax.plot(pos, r["acceptance_by_position"], "o-", color=color, label=r["method"])
                ax.plot(pos, r["conditional_acceptance_by_position"], "s--", color=color, alpha=0.6)
            ax.set_ylim(-0.02, 1.05)
            ax.set_xlabel("draft position i")
            ax.set_title(f"T={t:g}, batch {batch}")
            ax.xaxis.get_major_locator().set_params(integer=True)
        axes[0].set_ylabel("acceptance")
        handles, labels = axes[0].get_legend_handles_labels()
        for ax in axes[1:]:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        if handles:
            axes[-1].legend(handles, labels, loc="best")
        fig.suptitle("Acceptance by position: solid P(accept >= i), dashed P(>= i | >= i-1)")
    return path


def tau_vs_n_plot(points: list[dict], path: Path) -> Path:
    """tau vs N (with the i.i.d. curve for the measured alpha) and speedup vs N."""
    ns = np.array([p["n"] for p in points])
    color = plotstyle.method_color("draft_model")
    with plotstyle.figure(path, ncols=2) as (_, (ax, ax2)):
        ax.plot(ns, [p["tau"] for p in points], "o", ms=7, color=color, label="measured tau")
        alpha = points[int(np.argmax(ns))]["alpha"] if points else None
        if alpha is not None:
            grid = np.arange(1, ns.max() + 1)
            theory = [expected_tokens_per_call(alpha, int(n)) for n in grid]
            ax.plot(grid, theory, "-", color="black", lw=1,
                    label=f"(1 - a^(N+1)) / (1 - a), a = {alpha:.2f}")  # fmt: skip
        ax.plot(ns, ns + 1, ":", color="gray", label="N + 1 (every draft accepted)")
        ax.set_xlabel("N (draft tokens per step)")
        ax.set_ylabel("tau (tokens per target call)")
        temperature = points[0].get("temperature", 0.0) if points else 0.0
        ax.set_title(f"tau vs N: draft_model, T={temperature:g}, batch 1")
        ax.legend()
        ax2.errorbar(
            ns,
            [p["speedup"] for p in points],
            yerr=_ratio_err(points),
            fmt="o-",
            color=color,
            capsize=3,
        )
        ax2.axhline(1.0, color="black", lw=0.8, ls="--")
        ax2.set_xlabel("N (draft tokens per step)")
        ax2.set_ylabel("speedup over autoregressive (x)")
        ax2.set_title("Measured speedup vs N\n(whiskers: min-max of paired repeats)")
        for a in (ax, ax2):
            a.set_xticks(ns)
    return path


def make_plots(results: dict, out_dir) -> dict[str, Path]:
    """Write speedup.png, acceptance.png and tau_vs_n.png (those with data) into out_dir.

    Returns:
      {plot name: path} of the files written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    if _overall(results["runs"]):
        files["speedup"] = speedup_plot(results["runs"], out_dir / "speedup.png")
    if any(r["acceptance_by_position"] for r in results["runs"]):
        files["acceptance"] = acceptance_plot(results["runs"], out_dir / "acceptance.png")
    if results.get("tau_vs_n"):
        files["tau_vs_n"] = tau_vs_n_plot(results["tau_vs_n"], out_dir / "tau_vs_n.png")
    return files
