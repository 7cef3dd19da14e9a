"""The one plotting style: every PNG specjax writes (benchmark, sweep, experiments).

    with plotstyle.figure(path, ncols=2) as (fig, axes):
        axes[0].plot(x, y, color=plotstyle.method_color("ngram"), label="ngram")
    # saved to path on leaving the block

Figures are built with `matplotlib.figure.Figure` on the Agg canvas, never through pyplot,
so plotting touches no global backend state and needs no display. The style (`RC`: fonts,
grid) applies inside the block; the size is `PANEL` per panel unless given; every file is
written at `DPI`. A method has the same colour in every figure (`method_color`).
"""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 120
PANEL = (5.0, 4.0)  # inches (width, height) of one panel
RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.dpi": DPI,
}
# Tableau colours; autoregressive (the baseline) in grey.
METHOD_COLORS = {
    "autoregressive": "#7f7f7f",
    "draft_model": "#1f77b4",
    "draft_tree": "#ff7f0e",
    "ngram": "#2ca02c",
    "medusa": "#d62728",
    "eagle": "#9467bd",
    "eagle3": "#8c564b",
    "lookahead": "#e377c2",
}
_SPARE = ("#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39")


def method_color(name: str) -> str:
    """The colour of method `name` in every figure (a stable spare one for other names)."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    return _SPARE[zlib.crc32(str(name).encode()) % len(_SPARE)]


@contextlib.contextmanager
def figure(path, ncols: int = 1, nrows: int = 1, *, width=None, height=None):
    """A styled figure whose block draws it; written to `path` when the block ends.

    Args:
      path: the PNG to write (parent directories are created).
      ncols, nrows: the grid of panels.
      width, height: inches; default `PANEL` times the number of columns / rows.
    Yields:
      (fig, axes): axes is a 1-D array of ncols panels when nrows == 1, else [nrows, ncols].
    """
    width = PANEL[0] * ncols if width is None else width
    height = PANEL[1] * nrows if height is None else height
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False)
        yield fig, (axes[0] if nrows == 1 else axes)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
