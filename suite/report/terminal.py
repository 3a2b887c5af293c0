"""What a run or a report prints: compact blocks of at most :data:`WIDTH` columns, or the full tables (``wide``).

Compact: per problem one line per method with its runs, the main metric (mean ± standard error over seeds), the
time and at most three more key metrics; failures and methods that do not apply get a line each. The sweeps, DAG
tables and the comparison with the papers' numbers follow, fitted to the width by leaving out columns (their files
hold every one). Wide: the full tables, as written to the leaderboard files. A metric that was not computed prints
``-``; one that was computed but is NaN prints ``nan``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from suite.report.dag_tables import COLUMNS, format_dag_table
from suite.report.leaderboard import (
    MISSING,
    format_for_terminal,
    format_rank,
    format_reported_comparison,
    is_computed_nan,
    reference_kind,
)
from suite.report.posterior_tables import format_posterior_compact, format_posterior_table
from suite.report.sweeps import format_sweep
from suite.report.text import WIDTH, clip, fit_columns, short_mean_se, short_seconds, wrap

#: Metrics shown beside the main metric and the time, the first three a problem has (its main metric left out).
KEY_METRICS = (
    "cross_entropy",
    "model_prob_kl",
    "neg_elbo",
    "edge_f1",
    "expected_shd",
    "shd",
    "auroc",
    "kl_reverse",
    "kl_joint",
    "q_true_k",
    "k_abs_error",
    "model_prob_max_abs",
    "model_prob_tv",
)
#: At most this many key metrics besides the main one.
MAX_KEY_METRICS = 3
LEGEND = (
    "Mean ± standard error over seeds; time: mean walltime; -: not computed; nan: computed as NaN. Full tables: "
    "--wide, and the leaderboard files."
)


def key_metrics(table: pd.DataFrame) -> list[str]:
    """The (at most three) metrics shown beside a problem's main metric: the first of :data:`KEY_METRICS` it has."""
    main = table.attrs.get("main_metric")
    have = [m for m in KEY_METRICS if m != main and m in table and f"{m}_se" in table]
    return have[:MAX_KEY_METRICS]


def format_problem(problem: str, table: pd.DataFrame, reference: str | None = None) -> list[str]:
    """The compact block of one problem's leaderboard (a table of :func:`suite.report.leaderboard.summary_table`)."""
    main = table.attrs.get("main_metric", "model_prob_tv")
    higher = main in table.attrs.get("higher_is_better", ())
    info = table.attrs.get("trace") or {}
    if info.get("budget_s") is not None:
        sort = f"sorted by the median {main} at the common budget of {info['budget_s']:.3g} s"
    else:
        sort = f"sorted by {main}"
    header = f"== {problem}: {sort}, {'higher' if higher else 'lower'} is better"
    header += f"; reference: {reference}" if reference else ""
    lines = wrap(header, "   ")
    if table.empty:
        return [*lines, "   no runs"]
    if table.attrs.get("verdict"):
        lines += wrap(f"   {table.attrs['verdict']} (rank: 95% interval over seeds; =: tied with the best)", "     ")
    ran = table[table["runs"] > 0]  # methods that do not apply have a row without runs
    extra = key_metrics(table)
    columns = ["method", "runs", "rank", main, "time", *extra]
    rows = []
    for _, row in ran.iterrows():
        method = str(row["method"])
        runs = f"{int(row['runs'])}" + (f" ({int(row['failed'])} failed)" if row["failed"] else "")
        runs += f" ({int(row['over_budget'])} over budget)" if row.get("over_budget", 0) else ""
        runs += f" ({int(row['unreliable'])} unreliable)" if row.get("unreliable", 0) else ""
        rank = format_rank(row.get("rank_low"), row.get("rank_high"))
        rank = f"={rank}" if row.get("tied_with_best") else rank
        main_cell = _mean_se(table, row, main)
        final = row.get(f"{main}_final", math.nan)
        if isinstance(final, float) and not math.isnan(final):  # over budget: ranked at the budget, final beside
            main_cell += f" (final {final:.3g})"
        cells = [method, runs, rank, main_cell, short_seconds(float(row.get("walltime_s", math.nan)))]
        cells += [_mean_se(table, row, metric) for metric in extra]
        rows.append(cells)
    if rows:
        body, left_out = fit_columns(columns, rows, keep=5)
        lines += body
        if left_out:
            lines.append(f"   ({left_out} more column{'s' if left_out != 1 else ''}: --wide)")
    for _, row in ran[ran["failed"] > 0].iterrows():
        reason = str(row.get("failure_reasons") or "")
        lines.append(clip(f"   failed: {row['method']} ({int(row['failed'])} of {int(row['runs'])}): {reason}"))
    skipped = table.loc[table["runs"] == 0, "method"].astype(str).tolist()
    if skipped:
        lines += wrap(f"   does not apply: {', '.join(skipped)}", "     ")
    return lines


def _mean_se(table: pd.DataFrame, row: pd.Series, metric: str) -> str:
    if metric not in row:
        return MISSING
    return short_mean_se(
        float(row[metric]),
        float(row.get(f"{metric}_se", math.nan)),
        is_computed_nan(table, row["method"], metric),
        metric,
    )


def format_sweep_compact(name: str, table: pd.DataFrame, metric: str) -> list[str]:
    """A sweep with one row per method and one column per x, fitted to the width."""
    methods = [c for c in table.columns if c not in ("x", "problem") and not c.endswith("_se")]
    header = ["method", *(f"x={x}" for x in table["x"])]
    rows = []
    for method in methods:
        se = table[f"{method}_se"] if f"{method}_se" in table else [math.nan] * len(table)
        cells = [
            short_mean_se(float(m), float(s), is_computed_nan(table, problem, method))
            for problem, m, s in zip(table["problem"], table[method], se, strict=True)
        ]
        rows.append([method, *cells])
    lines = wrap(f"== sweep: {name} ({metric}, lower is better)", "   ")
    body, left_out = fit_columns(header, rows, keep=2)
    lines += body
    if left_out:
        lines.append(f"   ({left_out} more x value{'s' if left_out != 1 else ''} in the sweep's CSV)")
    return lines


def format_dag_compact(problem: str, table: pd.DataFrame) -> list[str]:
    """A DAG table (:func:`suite.report.dag_tables.dag_tables`) fitted to the width."""

    titles = [title for _, title in COLUMNS]
    rows = []
    for _, row in table.iterrows():
        runs = row["runs"]
        cells = [str(row["method"]), str(row["source"]), "" if runs is None or runs != runs else str(int(runs))]
        computed = row["source"] == "this run"
        cells += [
            short_mean_se(
                float(row[t]), float(row[f"{t}_se"]), computed and is_computed_nan(table, str(row["method"]), t)
            )
            for t in titles
        ]
        rows.append(cells)
    lines = wrap(f"== {problem}: DAG metrics as in VTI Table 1 (F1, AUROC higher is better; SHD, Brier lower)", "   ")
    body, left_out = fit_columns(["method", "source", "runs", *titles], rows, keep=4)
    lines += body
    if left_out:
        lines.append(f"   ({left_out} more column{'s' if left_out != 1 else ''}: --wide)")
    return lines


def format_comparison_compact(comparison: pd.DataFrame) -> list[str]:
    """The negative ELBO against the papers' figures, fitted to the width."""
    rows = []
    for _, row in comparison.iterrows():
        measured = short_mean_se(float(row["measured"]), float(row["measured_se"]), bool(row["computed"]))
        paper = MISSING if math.isnan(row["paper"]) else f"{row['paper']:.2f}"
        difference = float(row["difference"])
        if math.isnan(difference):
            shown = "nan" if row["computed"] and paper != MISSING else MISSING
        else:
            shown = f"{difference:+.2f}"
        rows.append([str(row["problem"]), str(row["method"]), measured, paper, shown])
    lines = ["== Negative ELBO against the source papers (lower is better)"]
    lines += fit_columns(["problem", "method", "measured -ELBO", "paper", "difference"], rows, keep=5)[0]
    sources = sorted({f"{p}: {s}" for p, s in zip(comparison["problem"], comparison["source"], strict=True)})
    lines += wrap("Sources: " + "; ".join(sources), "   ")
    return lines


def summarise_not_applicable(skipped_rows: list[dict[str, Any]]) -> list[str]:
    """One line per method naming the problems it does not apply to, each at most :data:`WIDTH` columns.

    ``skipped_rows``: not-applicable rows (``problem``, ``method``, ``reason``), e.g. ``Skipped.as_record()``.
    """
    by_method: dict[str, list[str]] = {}
    for row in skipped_rows:
        if row.get("method") is None:
            continue
        problems = by_method.setdefault(str(row["method"]), [])
        if row["problem"] not in problems:
            problems.append(str(row["problem"]))
    lines = []
    for method, problems in by_method.items():
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        head = f"{method}: does not apply to {count}"
        for shown in range(len(problems), 0, -1):
            rest = len(problems) - shown
            names = ", ".join(problems[:shown]) + (f", and {rest} more" if rest else "")
            line = f"{head} ({names})"
            if len(line) <= WIDTH:
                break
        lines.append(clip(line))
    return lines


def render(
    records: list[dict[str, Any]],
    tables: dict[str, pd.DataFrame],
    sweeps: dict[str, pd.DataFrame],
    dags: dict[str, pd.DataFrame],
    comparison: pd.DataFrame,
    out: Path,
    profile: str | None = None,
    wide: bool = False,
    pictures: dict[str, list[str]] | None = None,
    sweep_metric: str = "cross_entropy",
    posterior: pd.DataFrame | None = None,
) -> str:
    """The text a run or report prints: compact (every line at most :data:`WIDTH` columns) or ``wide``.

    ``pictures``: per problem (and per sweep name) lines naming the plots written, in the wide output only.
    ``posterior``: the DAG posterior study table (:func:`suite.report.posterior_tables.posterior_table`), printed after
    the DAG tables when not empty.
    """
    pictures = pictures or {}
    if wide:
        return _render_wide(records, tables, sweeps, dags, comparison, out, profile, pictures, posterior)
    lines = wrap(LEGEND) + ([f"Profile: {profile}."] if profile else [])
    for problem, table in tables.items():
        lines += ["", *format_problem(problem, table, reference_kind(records, problem))]
    for name, table in sweeps.items():
        lines += ["", *format_sweep_compact(name, table, sweep_metric)]
    for problem, table in dags.items():
        lines += ["", *format_dag_compact(problem, table)]
    if posterior is not None and not posterior.empty:
        lines += ["", *format_posterior_compact(posterior)]
    if not comparison.empty:
        lines += ["", *format_comparison_compact(comparison)]
    lines += ["", f"Records, leaderboards (Markdown, CSV) and plots: {out}/"]
    return "\n".join(lines)


def _render_wide(
    records: list[dict[str, Any]],
    tables: dict[str, pd.DataFrame],
    sweeps: dict[str, pd.DataFrame],
    dags: dict[str, pd.DataFrame],
    comparison: pd.DataFrame,
    out: Path,
    profile: str | None,
    pictures: dict[str, list[str]],
    posterior: pd.DataFrame | None = None,
) -> str:
    lines: list[str] = []
    for problem, table in tables.items():
        lines += ["", format_for_terminal(problem, table, reference_kind(records, problem))]
        if profile:
            lines.append(f"   profile: {profile}")
        lines += [f"   {line}" for line in pictures.get(problem, [])]
    for name, table in sweeps.items():
        lines += ["", format_sweep(name, table)]
        lines += [f"   {line}" for line in pictures.get(name, [])]
    for problem, table in dags.items():
        lines += ["", format_dag_table(problem, table)]
    if posterior is not None and not posterior.empty:
        lines += ["", format_posterior_table(posterior)]
        lines += [f"   {line}" for line in pictures.get("posterior", [])]
    text = format_reported_comparison(comparison)
    if text:
        lines += ["", "== Negative ELBO against the source papers (lower is better)", text]
    lines += ["", f"Records, leaderboards (Markdown, CSV) and plots: {out}/"]
    return "\n".join(lines)
