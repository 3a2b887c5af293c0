"""Sweeps: one metric across a family of problems that differ in one number (e.g. VTI Fig. 4's cardinality sweep).

A problem joins a sweep through its class attribute ``sweep = (name, x)``, which its records carry in
``problem_facts["sweep"]``; the sweep's table has one row per x and one column per method (mean ± standard
error over seeds of the metric), and its plot draws the metric against x. A NaN that was computed prints
``nan``; a method not run at an x prints ``-``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.report.leaderboard import format_mean_se, is_computed_nan, long_table, mean_and_se, problem_facts
from suite.report.plots import plt, save_figure

#: The metric a sweep reports (VTI Fig. 4: the cross-entropy of gold draws under q).
SWEEP_METRIC = "cross_entropy"


def sweep_slug(name: str) -> str:
    """The file-name part of a sweep's outputs: ``sweep_<slug>.csv`` / ``.png``."""
    return "".join(c if c.isalnum() else "-" for c in name.split(" (")[0]).strip("-")


def sweep_of(records: list[dict[str, Any]], problem: str) -> tuple[str, Any] | None:
    """The (sweep name, x) ``problem`` belongs to according to its records' facts, or None."""
    sweep = (problem_facts(records, problem) or {}).get("sweep")
    return None if not sweep else (str(sweep[0]), sweep[1])


def sweep_tables(records: list[dict[str, Any]], metric: str = SWEEP_METRIC) -> dict[str, pd.DataFrame]:
    """Per sweep: rows x (and the problem), per method the mean and standard error over seeds of ``metric``.

    ``table.attrs["nan_cells"]``: the (problem, method) cells whose NaN was computed.
    """
    long = long_table(records)
    long = long[(long["status"] == "ok") & (long["metric"] == metric)]
    tables: dict[str, pd.DataFrame] = {}
    groups: dict[str, list[tuple[int, str]]] = {}
    for problem in sorted(long["problem"].unique()):
        position = sweep_of(records, problem)
        if position is not None:
            groups.setdefault(position[0], []).append((position[1], problem))
    for name, members in groups.items():
        rows = []
        nan_cells = []
        for x, problem in sorted(members):
            row: dict[str, Any] = {"x": x, "problem": problem}
            for method, values in long[long["problem"] == problem].groupby("method"):
                row[method], row[f"{method}_se"] = mean_and_se(values["value"])
                if values["value"].isna().any():
                    nan_cells.append((problem, str(method)))
            rows.append(row)
        tables[name] = pd.DataFrame(rows)
        tables[name].attrs["nan_cells"] = nan_cells
    return tables


def format_sweep(name: str, table: pd.DataFrame, metric: str = SWEEP_METRIC) -> str:
    """The sweep as a plain-text table: one row per x, ``mean ± se`` per method."""
    methods = [c for c in table.columns if c not in ("x", "problem") and not c.endswith("_se")]
    shown = table[["x", "problem"]].copy()
    for method in methods:
        se = table.get(f"{method}_se", pd.Series([math.nan] * len(table)))
        shown[method] = [
            format_mean_se(m, s, computed=is_computed_nan(table, problem, method))
            for problem, m, s in zip(table["problem"], table[method], se, strict=True)
        ]
    return f"== sweep: {name} ({metric}, lower is better)\n" + shown.to_string(index=False)


def plot_sweep(name: str, table: pd.DataFrame, path: Path, metric: str = SWEEP_METRIC) -> Path | None:
    """The metric against x, one line per method with standard-error bars; None when nothing is finite."""
    methods = [c for c in table.columns if c not in ("x", "problem") and not c.endswith("_se")]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    drawn = False
    for method in methods:
        y = table[method].to_numpy(dtype=float)
        finite = np.isfinite(y)
        if not finite.any():
            continue
        se = table.get(f"{method}_se", pd.Series(np.nan, index=table.index)).to_numpy(dtype=float)
        ax.errorbar(table["x"][finite], y[finite], yerr=np.nan_to_num(se[finite]), marker="o", capsize=3, label=method)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("x (e.g. number of candidate covariates: 2^x models)")
    ax.set_ylabel(metric)
    ax.set_title(f"sweep: {name}")
    return save_figure(fig, ax, path)
