"""DAG posterior study in the format of BayesDAG Fig. 2: MMD and E-CPDAG-SHD to the exact posterior per method.

Problems whose records carry both ``mmd_hamming`` and ``expected_cpdag_shd`` (those with an exact posterior over
DAGs: ``linear-dag-bge-er``, ``linear-dag-bge-sf``, ``linear-dag*``) get one column group each; a row is a method,
a cell the mean ± standard error over all of its successful records (data sets x seeds; a record's data set is
``problem_config["data_seed"]``), with the runs and data sets counted and failed runs left out of the means but
counted. ``model_prob_tv`` is shown too where recorded. BayesDAG prints Fig. 2 as an image only, so there are no
paper numbers to put beside ours (:data:`PAPER_NOTE`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.report.leaderboard import NOT_APPLICABLE, format_mean_se, mean_and_se
from suite.report.plots import method_styles, plt, write_figure
from suite.report.text import GAP, WIDTH, fit_columns, short_mean_se, wrap

#: (record metric, column title) in the order of BayesDAG Fig. 2, then the total variation to the exact posterior.
METRICS = (("mmd", "MMD"), ("mmd_hamming", "MMD²"), ("expected_cpdag_shd", "E-CPDAG-SHD"), ("model_prob_tv", "TV"))
#: A problem is in the study when its records carry all of these.
REQUIRED = ("mmd_hamming", "expected_cpdag_shd")
TITLE = "DAG posterior against the exact one, in the format of BayesDAG Fig. 2 (all lower is better)"
PAPER_NOTE = "BayesDAG Fig. 2 is a plot only (no numbers in the paper's text): no paper rows to show beside these."
LEGEND = "Mean ± standard error over runs (data sets x seeds); runs: successful runs (distinct data sets)."


def _data_set(record: dict[str, Any]) -> Any:
    return (record.get("problem_config") or {}).get("data_seed")


def _value(record: dict[str, Any], metric: str) -> float | None:
    metrics = record.get("metrics") or {}
    if metric == "mmd" and "mmd" not in metrics and isinstance(metrics.get("mmd_hamming"), dict):
        squared = metrics["mmd_hamming"].get("value")  # records written before "mmd" existed
        return None if squared is None else math.sqrt(max(float(squared), 0.0))
    estimate = metrics.get(metric)
    if not isinstance(estimate, dict) or estimate.get("value") is None:
        return None
    return float(estimate["value"])


def posterior_problems(records: list[dict[str, Any]]) -> list[str]:
    """The problems (sorted) with a successful record carrying every metric of :data:`REQUIRED`."""
    found = {
        r["problem"]
        for r in records
        if r["status"] == "ok" and all(_value(r, metric) is not None for metric in REQUIRED)
    }
    return sorted(found)


def problem_labels(records: list[dict[str, Any]], problems: list[str]) -> dict[str, str]:
    """A short column label per problem: its graph type (``ER``, ``SF``) when that tells them apart, else its name."""
    labels = {}
    for problem in problems:
        kinds = {
            str((r.get("problem_config") or {}).get("graph_type"))
            for r in records
            if r["problem"] == problem and (r.get("problem_config") or {}).get("graph_type")
        }
        labels[problem] = kinds.pop().upper() if len(kinds) == 1 else problem
    if len(set(labels.values())) < len(labels):
        return {problem: problem for problem in problems}
    return labels


def posterior_values(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per successful run of a study problem and metric: problem, label, method, seed, data_set, metric, value.

    ``metric`` is the column title of :data:`METRICS`; metrics a record lacks have no row.
    """
    problems = posterior_problems(records)
    labels = problem_labels(records, problems)
    rows = []
    for record in records:
        if record["problem"] not in labels or record["status"] != "ok":
            continue
        for metric, title in METRICS:
            value = _value(record, metric)
            if value is None:
                continue
            rows.append(
                {
                    "problem": record["problem"],
                    "label": labels[record["problem"]],
                    "method": str(record["method"]),
                    "seed": record.get("seed"),
                    "data_set": _data_set(record),
                    "metric": title,
                    "value": value,
                }
            )
    return pd.DataFrame(rows, columns=["problem", "label", "method", "seed", "data_set", "metric", "value"])


def posterior_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per (problem, method): label, runs, data_sets, failed and per metric title its mean and ``<title>_se``.

    Empty when no problem of the study ran. ``table.attrs["computed_nan"]``: the (problem, method, title) cells whose
    NaN was computed (shown ``nan``; a metric not recorded shows ``-``).
    """
    values = posterior_values(records)
    columns = ["problem", "label", "method", "runs", "data_sets", "failed"]
    columns += [c for _, title in METRICS for c in (title, f"{title}_se")]
    if values.empty:
        return pd.DataFrame(columns=columns)
    failed: dict[tuple[str, str], int] = {}
    studied = set(values["problem"])
    for record in records:
        if record["problem"] in studied and record["status"] not in ("ok", NOT_APPLICABLE):
            key = (record["problem"], str(record["method"]))
            failed[key] = failed.get(key, 0) + 1
    ok: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "ok" and r["problem"] in studied:
            ok.setdefault((r["problem"], str(r["method"])), []).append(r)
    rows, computed_nan = [], []
    for (problem, method), group in values.groupby(["problem", "method"], sort=True):
        runs = ok.get((problem, method), [])
        row: dict[str, Any] = {
            "problem": problem,
            "label": group["label"].iloc[0],
            "method": method,
            "runs": len(runs),
            "data_sets": len({repr(_data_set(r)) for r in runs}),
            "failed": failed.pop((problem, method), 0),
        }
        for _, title in METRICS:
            metric = group.loc[group["metric"] == title, "value"]
            row[title], row[f"{title}_se"] = mean_and_se(metric)
            if len(metric) and metric.isna().any():
                computed_nan.append((problem, method, title))
        rows.append(row)
    labels = dict(zip(values["problem"], values["label"], strict=True))
    for (problem, method), count in failed.items():  # methods whose every run failed
        rows.append(
            {"problem": problem, "label": labels[problem], "method": method, "runs": 0, "data_sets": 0, "failed": count}
        )
    table = pd.DataFrame(rows, columns=columns)
    table.attrs["computed_nan"] = computed_nan
    return table


def shown_metrics(table: pd.DataFrame) -> list[str]:
    """The metric titles some row of ``table`` has (TV only where recorded)."""
    return [title for _, title in METRICS if title in table and table[title].notna().any()]


def _cell(table: pd.DataFrame, row: pd.Series, title: str, short: bool) -> str:
    computed = (row["problem"], row["method"], title) in set(table.attrs.get("computed_nan", ()))
    mean, se = float(row[title]), float(row[f"{title}_se"])
    return short_mean_se(mean, se, computed) if short else format_mean_se(mean, se, computed=computed)


def wide_cells(table: pd.DataFrame, problems: list[str], short: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows (one per method) of the study table restricted to ``problems``, cells as text."""
    metrics = shown_metrics(table)
    header = ["method"]
    for problem in problems:
        label = table.loc[table["problem"] == problem, "label"].iloc[0]
        header += [f"{label} runs", *(f"{label} {title}" for title in metrics)]
    rows = []
    for method in sorted(table["method"].unique()):
        cells = [str(method)]
        for problem in problems:
            mine = table[(table["problem"] == problem) & (table["method"] == method)]
            if mine.empty:
                cells += ["-"] * (1 + len(metrics))
                continue
            row = mine.iloc[0]
            cells.append(f"{int(row['runs'])} ({int(row['data_sets'])})")
            cells += [_cell(table, row, title, short) for title in metrics]
        rows.append(cells)
    return header, rows


def _notes(table: pd.DataFrame) -> list[str]:
    lines = []
    labels = dict(zip(table["problem"], table["label"], strict=True))
    if any(label != problem for problem, label in labels.items()):
        named = [f"{label} = {problem}" for problem, label in labels.items() if label != problem]
        lines.append("Problems: " + "; ".join(named))
    failed = table[table["failed"] > 0]
    if not failed.empty:
        lines.append(
            "Failed runs (left out of the means): "
            + ", ".join(
                f"{m} on {lab} ({int(f)})"
                for m, lab, f in zip(failed["method"], failed["label"], failed["failed"], strict=True)
            )
        )
    return [*lines, LEGEND, PAPER_NOTE]


def format_posterior_compact(table: pd.DataFrame, width: int | None = None) -> list[str]:
    """The study table fitted to ``width`` columns: problems that do not fit beside each other go in a block below."""
    width = WIDTH if width is None else width
    lines = wrap(f"== {TITLE}", "   ", width)
    problems = list(dict.fromkeys(table["problem"]))
    start = 0
    while start < len(problems):
        end = start + 1
        while end < len(problems) and _width(*wide_cells(table, problems[start : end + 1])) <= width:
            end += 1
        header, rows = wide_cells(table, problems[start:end])
        lines += ([""] if start else []) + fit_columns(header, rows, keep=len(header), width=width)[0]
        start = end
    for note in _notes(table):
        lines += wrap(note, "   ", width)
    return lines


def _width(header: list[str], rows: list[list[str]]) -> int:
    cells = [header, *rows]
    return sum(max(len(line[i]) for line in cells) for i in range(len(header))) + len(GAP) * (len(header) - 1)


def format_posterior_table(table: pd.DataFrame) -> str:
    """The whole study table as plain text (no width limit), with its notes."""
    header, rows = wide_cells(table, list(dict.fromkeys(table["problem"])), short=False)
    text = pd.DataFrame(rows, columns=header).to_string(index=False)
    return "\n".join([f"== {TITLE}", text, *_notes(table)])


def display_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The study table as display strings, one row per method (for the HTML page)."""
    header, rows = wide_cells(table, list(dict.fromkeys(table["problem"])), short=False)
    return pd.DataFrame(rows, columns=header)


def plot_posterior(records: list[dict[str, Any]], path: Path) -> Path | None:
    """Like BayesDAG Fig. 2: a panel per metric, a group per problem, per method its runs and mean ± se.

    Returns the path, or None (and an earlier picture at ``path`` removed) when no problem of the study ran.
    """
    values = posterior_values(records)
    values = values[np.isfinite(values["value"].to_numpy(dtype=float))]
    if values.empty:
        Path(path).unlink(missing_ok=True)
        return None
    metrics = [title for _, title in METRICS if title in set(values["metric"])]
    problems = list(dict.fromkeys(values.sort_values("problem")["problem"]))
    labels = dict(zip(values["problem"], values["label"], strict=True))
    methods = sorted(values["method"].unique())
    styles = method_styles(methods)
    step = 0.8 / len(methods)
    fig, axes = plt.subplots(
        1,
        len(metrics),
        figsize=(max(3.0, 0.5 + 0.45 * len(methods) * len(problems)) * len(metrics), 3.6),
        squeeze=False,
    )
    rng = np.random.default_rng(0)  # jitter of the single runs only
    for ax, title in zip(axes[0], metrics, strict=True):
        mine = values[values["metric"] == title]
        labelled: set[str] = set()
        for j, method in enumerate(methods):
            colour, marker = styles[method]
            for i, problem in enumerate(problems):
                v = mine.loc[(mine["problem"] == problem) & (mine["method"] == method), "value"].to_numpy(dtype=float)
                if not len(v):
                    continue
                x = i - 0.4 + step * (j + 0.5)
                ax.scatter(x + rng.uniform(-step / 4, step / 4, len(v)), v, s=8, color=colour, alpha=0.4, lw=0)
                mean, se = mean_and_se(pd.Series(v))
                ax.errorbar(
                    x,
                    mean,
                    yerr=0 if math.isnan(se) else se,
                    color=colour,
                    marker=marker,
                    ms=5,
                    capsize=3,
                    label=None if method in labelled else method,
                )
                labelled.add(method)
        ax.set_xticks(range(len(problems)), [labels[p] for p in problems], fontsize=8)
        ax.set_xlim(-0.5, len(problems) - 0.5)
        ax.set_title(f"{title} (lower is better)", fontsize=9)
        ax.tick_params(labelsize=7)
    handles, names = {}, []
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in handles:
                handles[name] = handle
                names.append(name)
    fig.legend(
        [handles[n] for n in names],
        names,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(len(names), 6),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle("DAG posterior against the exact one (BayesDAG Fig. 2 format): runs and mean ± se", fontsize=10)
    return write_figure(fig, path, fit_box=True)
