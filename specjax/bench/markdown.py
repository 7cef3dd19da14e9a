"""The one writer of markdown tables: benchmark and sweep reports, the picker, experiments.

    table(["method", "tau", "speedup"], [["ngram", "2.25", "1.15x"]], align="lrr")
    # | method | tau | speedup |
    # | --- | ---: | ---: |
    # | ngram | 2.25 | 1.15x |

Cells are written with `str` (format numbers before passing them); None is an empty cell
and a `|` inside a cell is escaped, so a row always has as many cells as the header.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_RULES = {"l": ":---", "r": "---:", "c": ":---:", "-": "---"}


def _cell(value) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence, rows: Iterable[Sequence], align: str | None = None) -> str:
    """A GitHub-flavoured markdown table, its lines joined by newlines (no trailing one).

    Args:
      header: the column names.
      rows: one sequence of cells per row, each as long as `header`.
      align: one letter per column, "l" / "r" / "c" or "-" (the renderer's default);
        None = default for every column.
    Returns:
      The header line, the rule line and one line per row.
    """
    align = align or "-" * len(header)
    if len(align) != len(header) or set(align) - set(_RULES):
        raise ValueError(
            f"align={align!r} must have one of {sorted(_RULES)} per column ({len(header)})"
        )
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("| " + " | ".join(_RULES[a] for a in align) + " |")
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"row {i} has {len(row)} cells; the header has {len(header)}")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines)
