"""Curves: each method's main metric against compute seconds along its runs (the records' traces), one PNG per problem.

A line is the median over seeds of the running value at every snapshot time of any of the method's seeds (a seed's
value between its snapshots is that of its last snapshot: a step function; a seed counts only from its first
estimate to its last snapshot, never extrapolated past its end); the band spans the seeds' minimum to maximum.
Both axes are logarithmic. A metric can be exactly 0 (a TV of 0, an SHD of 0), which a log axis cannot show:
values are clipped to a floor one decade below the smallest positive value drawn (stated on the y axis when used).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from suite.report.leaderboard import common_budget, main_metric, trace_series
from suite.report.plots import method_styles, plt, write_figure

#: Markers drawn per line at most (a line has about 20-30 snapshot points).
MARKERS_PER_LINE = 8


def seed_series(records: list[dict[str, Any]], metric: str) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Per method, each successful run's (seconds, values) of ``metric`` from its first estimate on."""
    out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for rec in records:
        series = trace_series(rec, metric) if rec["status"] == "ok" else None
        if series is None:
            continue
        points = [(t, v) for t, v in zip(*series, strict=True) if v is not None]
        if points:
            seconds, values = (np.asarray(x, dtype=float) for x in zip(*points, strict=True))
            out.setdefault(rec["method"], []).append((seconds, values))
    return out


def median_band(seeds: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Times (union of the seeds' snapshot times) and the median, minimum and maximum over the seeds there.

    At each time only the seeds whose trace covers it take part (from their first estimate to their last point).
    """
    times = np.unique(np.concatenate([s for s, _ in seeds]))
    grid = np.full((len(seeds), len(times)), np.nan)
    for row, (seconds, values) in enumerate(seeds):
        index = np.searchsorted(seconds, times, side="right") - 1  # last snapshot at or before each time
        inside = (index >= 0) & (times <= seconds[-1])
        grid[row, inside] = values[index[inside]]
    covered = ~np.isnan(grid).all(axis=0)
    grid, times = grid[:, covered], times[covered]
    return times, np.nanmedian(grid, axis=0), np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)


def draw_curves(problem: str, records: list[dict[str, Any]]) -> Any | None:
    """The curves figure of ``problem`` (one line per method with a trace of the main metric), or None."""
    mine = [rec for rec in records if rec["problem"] == problem]
    metric = main_metric(problem, mine)
    per_method = seed_series(mine, metric)
    if not per_method:
        return None
    curves = {method: median_band(seeds) for method, seeds in sorted(per_method.items())}
    positive = [v[v > 0] for _, med, lo, hi in curves.values() for v in (med, lo, hi)]
    positive = np.concatenate(positive) if positive else np.array([])
    floor = 10.0 ** (np.floor(np.log10(positive.min())) - 1) if positive.size else 1e-12
    styles = method_styles(list(curves))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for method, (times, med, lo, hi) in curves.items():
        colour, marker = styles[method]
        times = np.maximum(times, 1e-6)  # a snapshot at 0 s cannot be drawn on a log axis
        every = max(1, len(times) // MARKERS_PER_LINE)
        ax.step(
            times,
            np.maximum(med, floor),
            where="post",
            color=colour,
            marker=marker,
            markevery=every,
            ms=6,
            lw=1.5,
            label=method,
        )
        ax.fill_between(times, np.maximum(lo, floor), np.maximum(hi, floor), step="post", color=colour, alpha=0.15)
    budget = common_budget(mine, problem)
    if budget is not None:
        ax.axvline(budget, color="black", ls="--", lw=1, label=f"budget {budget:.3g} s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("compute seconds")
    clipped = any((v < floor).any() for _, med, lo, hi in curves.values() for v in (med, lo, hi))
    ax.set_ylabel(f"{metric} (log scale; a value of 0 is drawn at {floor:.0e})" if clipped else metric)
    profiles = sorted({str((rec.get("budget") or {}).get("profile")) for rec in mine} - {"None"})
    profile = f", profile {'/'.join(profiles)}" if profiles else ""
    ax.set_title(f"{problem}: {metric} along the runs (median, min-max over seeds{profile})", fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def plot_curves(problem: str, records: list[dict[str, Any]], path: Path) -> Path | None:
    """Write ``problem``'s curves to ``path`` (atomically); None, and nothing written, when no record has a trace."""
    fig = draw_curves(problem, records)
    if fig is None:
        return None
    return write_figure(fig, Path(path), fit_box=True)


def write_curves(records: list[dict[str, Any]], out: Path) -> dict[str, Path]:
    """Write ``curves_<problem>.png`` in ``out`` for every problem of ``records`` with a trace; return the paths."""
    written = {}
    for problem in sorted({rec["problem"] for rec in records}):
        path = plot_curves(problem, records, Path(out) / f"curves_{problem}.png")
        if path is not None:
            written[problem] = path
    return written
