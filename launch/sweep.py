"""Run a config's sweep: one run (and workdir) per point, then one table and one plot.

    python -m launch.sweep --config=configs/ablations/num_speculative_tokens.py \
        --workdir=workdirs/ablations/num_speculative_tokens \
        --config.bench.target=workdirs/quickstart/target --config.bench.draft=workdirs/quickstart/draft

The config file's `get_sweep()` returns a list of override dicts (`{"bench.num_speculative_tokens":
4}`, ...). Point i runs the base config (with the command-line overrides) plus its overrides,
through the same dispatch as `launch.main`, in `<workdir>/<i>_<key=value,...>`; a point whose
results.json exists is not run again, so an interrupted sweep resumes. Then every point's
results.json rows (`{"runs": [...]}`; rows pooled over categories where the bench reports
them) are joined with the point's overrides into `<workdir>/sweep.csv` (every scalar
column), `sweep.md` (the main columns) and `sweep.png` (speedup and tau, or eval loss,
against the first swept key).
"""

from __future__ import annotations

import copy
import csv
import importlib.util
import json
import logging
import re
from pathlib import Path

import ml_collections
from absl import app, flags
from ml_collections import config_flags

from specjax.bench import plotstyle
from specjax.bench.markdown import table

# The launcher's --config and --workdir flags (here: the sweep's base config and directory),
# and its process and compilation-cache flags (read by parse_flags before the config loads).
from .main import CONFIG, WORKDIR, dispatch, log_setup, parse_flags

TABLE_COLUMNS = (
    "method",
    "batch_size",
    "temperature",
    "tau",
    "speedup",
    "tokens_per_s",
    "eval_loss",
    "eval_perplexity",
    "train_loss",
)
PLOT_METRICS = ("speedup", "tau", "eval_loss")
SERIES_FIELDS = ("method", "batch_size", "temperature")


def load_sweep(config_path: str) -> list[dict]:
    """The override dicts of the config file's `get_sweep()` (`config_path`: `file.py[:arg]`)."""
    path = Path(re.sub(r"(\.py):.*$", r"\1", config_path))
    spec = importlib.util.spec_from_file_location(f"_sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_sweep"):
        raise ValueError(f"{config_path} has no get_sweep(); it is not a sweep config")
    return list(module.get_sweep())


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict):
    """A copy of `config` with dotted-key `overrides` set (each key must already exist).

    The copy keeps the config's field references, so values derived from an overridden
    field (heads from a width, a shared data source) follow it.
    """
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"sweep override {key!r}: the config has no field {leaf!r} there")
        node[leaf] = value
    return config


def point_name(index: int, overrides: dict) -> str:
    """`<index>_<key=value,...>` with each key's last component, safe as a directory name."""
    parts = [f"{key.split('.')[-1]}={_scalar(value)}" for key, value in overrides.items()]
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "", f"{index}_{','.join(parts)}")


def _scalar(value):
    """A one-element tuple (`temperatures=(0.5,)`) stands for its element."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        return value[0]
    return value


def run_sweep(config, sweep: list[dict], workdir, run=dispatch) -> list[dict]:
    """Runs every point not already done; returns the joined rows (also written out).

    Args:
      config: the base config.
      sweep: override dicts, one per point.
      workdir: the sweep directory.
      run: `run(config, workdir)` for one point (default: launch.main's dispatch).
    Returns:
      One dict per result row: `point`, the point's overrides, then the row's fields.
    """
    workdir = Path(workdir)
    for index, overrides in enumerate(sweep):
        point_dir = workdir / point_name(index, overrides)
        if (point_dir / "results.json").is_file():
            logging.info("sweep point %s: done already", point_dir.name)
            continue
        logging.info("sweep point %d/%d: %s", index + 1, len(sweep), overrides)
        run(apply_overrides(config, overrides), point_dir)
    rows = collect_rows(sweep, workdir)
    write_tables(rows, list(dict.fromkeys(k for o in sweep for k in o)), workdir)
    write_plot(rows, sweep, workdir / "sweep.png")
    return rows


def collect_rows(sweep: list[dict], workdir: Path) -> list[dict]:
    """Each point's results.json rows (the pooled "overall" ones where categories exist)."""
    rows = []
    for index, overrides in enumerate(sweep):
        name = point_name(index, overrides)
        runs = json.loads((workdir / name / "results.json").read_text())["runs"]
        pooled = [r for r in runs if r.get("category") == "overall"] or runs
        for r in pooled:
            fields = {k: v for k, v in r.items() if isinstance(v, (str, int, float, bool))}
            point = {k: _scalar(v) for k, v in overrides.items()}
            rows.append({"point": name, **point, **fields})
    return rows


def write_tables(rows: list[dict], keys: list[str], workdir: Path) -> None:
    """sweep.csv (every scalar column) and sweep.md (point, swept `keys`, the main columns)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (workdir / "sweep.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    shown = ["point", *keys] + [c for c in TABLE_COLUMNS if c in columns and c not in keys]
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else v
    markdown = table(shown, [[fmt(r.get(c)) for c in shown] for r in rows])
    (workdir / "sweep.md").write_text(markdown + "\n")


def _series_fields(rows: list[dict], x_key: str) -> list[str]:
    """Fields that tell lines apart, minus those that just follow the swept value."""
    fields = []
    for field in SERIES_FIELDS:
        if field not in (rows[0] if rows else {}):
            continue
        per_point = {}
        for r in rows:
            per_point.setdefault(r[x_key], set()).add(r.get(field))
        follows_x = all(len(v) == 1 for v in per_point.values()) and len(per_point) > 1
        if not follows_x or len({r.get(field) for r in rows}) == 1:
            fields.append(field)
    return fields


def _x_axis(rows: list[dict], sweep: list[dict]):
    """(row key, axis label, row value -> position, tick labels or None) for the plot."""
    key = next(iter(sweep[0])) if sweep and sweep[0] else "point"
    if sweep and len({_scalar(o.get(key)) for o in sweep}) == len(sweep):
        xs = list(dict.fromkeys(r.get(key) for r in rows))
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
            return key, key, (lambda x: x), None
        return key, key, xs.index, [str(x) for x in xs]
    # The first key alone does not tell the points apart (layers and width swept together):
    # one tick per point, labelled by its values.
    names = [point_name(i, o) for i, o in enumerate(sweep)]
    ticks = [", ".join(str(_scalar(v)) for v in o.values()) for o in sweep]
    label = ", ".join(k.split(".")[-1] for k in (sweep[0] if sweep else {})) or "point"
    return "point", label, names.index, ticks


def write_plot(rows: list[dict], sweep: list[dict], path: Path) -> None:
    """One PNG: each available metric (speedup and tau, or eval loss) against the swept value."""
    x_key, x_label, position, ticks = _x_axis(rows, sweep)
    metrics = [m for m in PLOT_METRICS if any(m in r for r in rows)]
    if "speedup" in metrics:
        metrics = [m for m in metrics if m != "eval_loss"]
    fields = _series_fields(rows, x_key)
    with plotstyle.figure(path, ncols=max(1, len(metrics)), height=3.6) as (_, axes):
        for ax, metric in zip(axes, metrics, strict=False):
            series: dict[str, list] = {}
            colors: dict[str, str | None] = {}
            for r in rows:
                if metric in r:
                    label = ", ".join(f"{f}={r.get(f)}" for f in fields) or metric
                    series.setdefault(label, []).append((position(r.get(x_key)), r[metric]))
                    # One line per method: the method's colour; otherwise the colour cycle.
                    colors[label] = (
                        plotstyle.method_color(r.get("method")) if fields == ["method"] else None
                    )
            for label, points in series.items():
                ax.plot(
                    *zip(*sorted(points), strict=True), marker="o", label=label, color=colors[label]
                )
            if metric == "speedup":
                ax.axhline(1.0, color="gray", lw=0.8, ls="--")
            if ticks is not None:
                ax.set_xticks(range(len(ticks)), ticks)
            ax.set(xlabel=x_label, ylabel=metric)
            ax.legend(loc="best")


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    sweep = load_sweep(config_flags.get_config_filename(flags.FLAGS["config"]))
    log_setup(CONFIG.value)
    workdir = Path(WORKDIR.value)
    workdir.mkdir(parents=True, exist_ok=True)
    run_sweep(CONFIG.value, sweep, workdir)
    logging.info("sweep table: %s; plot: %s", workdir / "sweep.md", workdir / "sweep.png")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
