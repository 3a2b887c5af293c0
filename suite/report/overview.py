"""One compact grid of a results folder (problem x method), for the README: generated from records, never typed.

Each cell is ``main metric / cross-entropy / walltime`` (means over the seeds that finished), ``failed`` when
every run failed, and ``-`` where the folder holds no run (the method does not apply, or was not run) or a metric
was not computed (``nan``: computed, but NaN). The problems' main metrics come from the records' facts. Usage::

    tdbench overview results/quick            # Markdown on standard output
    tdbench overview results/quick --problems sas,robust-vs --methods rjmcmc-baseline,trj
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from suite.report.leaderboard import MISSING, is_computed_nan, long_table, main_metric, summary_table

#: Methods in the order of the grid's columns (others follow, alphabetically).
COLUMN_ORDER = ["rjmcmc-baseline", "rjmcmc-naive", "vti-surrogate", "vti-mcg", "trj", "ctrj"]


def _number(value: float, computed: bool = False) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan" if computed else MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.3g}"


def _cell(table: pd.DataFrame, row: pd.Series, metric: str) -> str:
    if row["failed"] == row["runs"]:
        return "failed"
    method = row["method"]
    parts = [_number(row.get(metric, math.nan), is_computed_nan(table, method, metric))]
    parts.append(_number(row.get("cross_entropy", math.nan), is_computed_nan(table, method, "cross_entropy")))
    seconds = row.get("walltime_s", math.nan)
    parts.append(MISSING if math.isnan(seconds) else f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s")
    return " / ".join(parts)


def overview(
    records: list[dict[str, Any]], problems: list[str] | None = None, methods: list[str] | None = None
) -> pd.DataFrame:
    """The grid: one row per problem, one column per method; cells ``main metric / cross-entropy / walltime``."""
    long = long_table(records)
    names = sorted(long["problem"].unique()) if problems is None else problems
    order = {name: i for i, name in enumerate(COLUMN_ORDER)}
    if methods is None:
        methods = sorted(long["method"].dropna().unique(), key=lambda m: (order.get(m, len(order)), m))
    rows = []
    for problem in names:
        table = summary_table(long, problem, records)
        metric = main_metric(problem, records)
        row: dict[str, str] = {"problem": f"`{problem}` ({metric})"}
        for method in methods:
            match = table[table["method"] == method] if not table.empty else table
            row[method] = MISSING if match.empty else _cell(table, match.iloc[0], metric)
        rows.append(row)
    grid = pd.DataFrame(rows)
    return grid
