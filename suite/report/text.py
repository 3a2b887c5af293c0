"""Plain-text building blocks of the terminal output: width, wrapping, fitted tables and short numbers."""

from __future__ import annotations

import math
import textwrap

from suite.report.leaderboard import MISSING, beyond_bound

#: Columns of the compact output.
WIDTH = 120
GAP = "  "


def clip(line: str, width: int = WIDTH) -> str:
    """``line`` cut to ``width`` columns, ending in ``...`` when cut."""
    return line if len(line) <= width else line[: width - 3] + "..."


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` broken into lines of at most ``width`` columns (continuation lines indented by ``indent``)."""
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def fit_columns(header: list[str], rows: list[list[str]], keep: int, width: int = WIDTH) -> tuple[list[str], int]:
    """A left-aligned text table of at most ``width`` columns, and how many of its columns were left out.

    Columns are left out from the right (never the first ``keep``); a line still too long is clipped.
    """
    shown = len(header)
    while True:
        cells = [header[:shown]] + [row[:shown] for row in rows]
        widths = [max(len(line[i]) for line in cells) for i in range(shown)]
        if sum(widths) + len(GAP) * (shown - 1) <= width or shown <= keep:
            break
        shown -= 1
    lines = [clip(GAP.join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip(), width) for line in cells]
    return lines, len(header) - shown


def short_mean_se(mean: float, se: float, computed: bool = False, metric: str | None = None) -> str:
    """``mean ± se`` in few characters (``-``: not computed; ``nan``: computed as NaN; ``>1e6``: beyond its bound)."""
    if isinstance(mean, float) and math.isnan(mean):
        return "nan" if computed else MISSING
    if math.isinf(mean):
        return "inf" if mean > 0 else "-inf"
    if beyond_bound(metric, mean):
        return str(beyond_bound(metric, mean))
    text = f"{mean:.3g}"
    return text if isinstance(se, float) and math.isnan(se) else f"{text} ± {se:.2g}"


def short_seconds(seconds: float) -> str:
    """A walltime in seconds, with precision for short ones."""
    if isinstance(seconds, float) and math.isnan(seconds):
        return MISSING
    return f"{seconds:.2f} s" if seconds < 1 else f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"
