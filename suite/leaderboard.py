"""Leaderboards: records -> long table -> one summary table per problem (mean and SE over seeds)."""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.registry import problem_class

LONG_COLUMNS = ["problem", "method", "seed", "config_hash", "metric", "value", "se", "status", "reason"]
#: Column order of the summary tables (metrics absent for a problem are dropped).
METRIC_ORDER = [
    "neg_elbo",
    "model_prob_tv",
    "model_prob_kl",
    "model_prob_max_abs",
    "model_prob_missed",
    "cross_entropy",
    "kl_joint",
    "kl_reverse",
    "walltime_s",
]
LEGEND = "mean ± standard error over seeds; (MC ± x): the metric's own Monte Carlo error (gold draws / reference)"
#: Status of a leaderboard row for a method that does not apply to a problem (no run, the reason shown).
NOT_APPLICABLE = "not_applicable"


def long_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (run, metric): problem, method, seed, metric, value, se, status, reason.

    Failed runs keep one row with metric ``status`` so that they are counted
    and their reasons shown, never silently turned into missing values.
    """
    rows = []
    for rec in records:
        base = {
            "problem": rec["problem"],
            "method": rec["method"],
            "seed": rec["seed"],
            "config_hash": rec.get("config_hash"),
            "status": rec["status"],
            "reason": rec.get("reason"),
        }
        if rec["status"] != "ok":
            rows.append({**base, "metric": "status", "value": math.nan, "se": math.nan})
            continue
        for metric, est in rec.get("metrics", {}).items():
            se = est.get("se")
            rows.append({**base, "metric": metric, "value": est["value"], "se": math.nan if se is None else se})
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def main_metric(problem: str) -> str:
    """The metric a problem's leaderboard is sorted by."""
    try:
        return problem_class(problem).main_metric
    except KeyError:
        return "model_prob_tv"


def mean_and_se(values: pd.Series) -> tuple[float, float]:
    """Mean and standard error over seeds; no standard error for one value or when a value is infinite."""
    v = values.to_numpy(dtype=float)
    if len(v) == 0:
        return math.nan, math.nan
    if np.isinf(v).any():
        return float(np.mean(v)), math.nan
    return float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan


def summary_table(long: pd.DataFrame, problem: str) -> pd.DataFrame:
    """Per-method mean and standard error over seeds of each metric, best first by the main metric."""
    sub = long[long["problem"] == problem]
    metrics = [m for m in METRIC_ORDER if m in set(sub["metric"])]
    metrics += sorted(set(sub["metric"]) - set(metrics) - {"status"})
    out = []
    for method, group in sub.groupby("method", sort=True):
        ok = group[group["status"] == "ok"]
        failed = group[~group["status"].isin(["ok", NOT_APPLICABLE])]
        row: dict[str, Any] = {
            "method": method,
            "runs": int(group["seed"].nunique()),
            "failed": int(failed["seed"].nunique()),
        }
        for metric in metrics:
            values = ok[ok["metric"] == metric]
            row[metric], row[f"{metric}_se"] = mean_and_se(values["value"])
            if values["se"].notna().any():  # the estimator's own Monte Carlo error, averaged over seeds
                row[f"{metric}_mc_se"] = float(values["se"].mean())
        reasons = sorted(set(failed["reason"].dropna()))
        row["failure_reasons"] = "; ".join(reasons)
        row["not_applicable"] = "; ".join(sorted(set(group.loc[group["status"] == NOT_APPLICABLE, "reason"].dropna())))
        out.append(row)
    table = pd.DataFrame(out)
    if table.empty:
        return table
    key = main_metric(problem)
    if key in table:
        table = table.sort_values(
            key, ascending=key not in higher_is_better(problem), na_position="last", kind="stable"
        )
    return table.reset_index(drop=True)


def higher_is_better(problem: str) -> frozenset[str]:
    """The metrics of a problem's leaderboard where higher is better (all others: lower is better)."""
    try:
        return problem_class(problem).higher_is_better
    except KeyError:
        return frozenset()


def _direction(problem: str) -> str:
    return "higher" if main_metric(problem) in higher_is_better(problem) else "lower"


def format_mean_se(mean: float, se: float, mc_se: float = math.nan) -> str:
    """``mean ± se (MC ± mc_se)`` with the parts that are defined; ``-`` for a missing value."""
    if isinstance(mean, float) and math.isnan(mean):
        return "-"
    if math.isinf(mean):
        return "inf"
    text = f"{mean:.4g}"
    if not math.isnan(se):
        text += f" ± {se:.2g}"
    if not math.isnan(mc_se):
        text += f" (MC ± {mc_se:.2g})"
    return text


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The summary table with ``mean ± se`` strings, ready to print."""
    if table.empty:
        return table
    metrics = [c for c in table.columns if f"{c}_se" in table.columns]
    shown = table[["method", "runs", "failed"]].copy()
    for metric in metrics:
        mc = table[f"{metric}_mc_se"] if f"{metric}_mc_se" in table else [math.nan] * len(table)
        shown[metric] = [
            format_mean_se(m, s, e) for m, s, e in zip(table[metric], table[f"{metric}_se"], mc, strict=True)
        ]
    if table["failure_reasons"].str.len().gt(0).any():
        shown["failure_reasons"] = table["failure_reasons"]
    if "not_applicable" in table and table["not_applicable"].str.len().gt(0).any():
        shown["not_applicable"] = table["not_applicable"]
    return shown


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row.tolist()) + " |")
    return "\n".join(lines) + "\n"


def write_leaderboards(records: list[dict[str, Any]], out: Path) -> dict[str, pd.DataFrame]:
    """Write ``records_long.csv`` and, per problem, ``leaderboard_<problem>.md`` / ``.csv``; return the tables."""
    out = Path(out)
    long = long_table(records)
    write_atomically(out / "records_long.csv", lambda path: long.to_csv(path, index=False))
    profiles = ", ".join(sorted({str((rec.get("budget") or {}).get("profile")) for rec in records} - {"None"}))
    tables = {}
    for problem in sorted(long["problem"].unique()):
        table = summary_table(long, problem)
        tables[problem] = table
        write_atomically(out / f"leaderboard_{problem}.csv", lambda path, table=table: table.to_csv(path, index=False))
        title = f"# Leaderboard: {problem}\n\nSorted by `{main_metric(problem)}` ({_direction(problem)} is better). "
        title += f"{LEGEND}\n\n"
        kind = reference_kind(records, problem)
        title += f"Reference: {kind}.\n\n" if kind else ""
        title += f"Profile: {profiles}.\n\n" if profiles else ""
        text = title + to_markdown(display_table(table))
        write_atomically(out / f"leaderboard_{problem}.md", lambda path, text=text: path.write_text(text))
    return tables


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Have ``write`` fill a temporary file beside ``path``, then rename it there: never a half-written file.

    A full disk is raised as ``OSError`` ENOSPC naming ``path``; the temporary file is removed on any error.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # created by ``write``, so with the usual permissions
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def reference_kind(records: list[dict[str, Any]], problem: str) -> str | None:
    """Where a problem's ground truth came from in its records ("exact", "estimated", ...), or None if unrecorded."""
    kinds = {(rec.get("reference") or {}).get("kind") for rec in records if rec["problem"] == problem}
    return "/".join(sorted(k for k in kinds if k)) or None


def format_for_terminal(problem: str, table: pd.DataFrame, reference: str | None = None) -> str:
    """A plain-text rendering of one problem's leaderboard (``reference``: its ground truth's kind, if known)."""
    shown = f"; reference: {reference}" if reference else ""
    header = f"== {problem}  (sorted by {main_metric(problem)}, {_direction(problem)} is better{shown}; {LEGEND})"
    return header + "\n" + display_table(table).to_string(index=False)


def reported_comparison(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Measured negative ELBO per (problem, method) next to the source paper's figure, where it reports one."""
    long = long_table(records)
    rows = []
    for problem in sorted(long["problem"].unique()):
        try:
            cls = problem_class(problem)
        except KeyError:
            continue
        reported: dict[str, float] = getattr(cls, "reported_neg_elbo", {})
        if not reported:
            continue
        table = summary_table(long, problem)
        measured = (
            {}
            if table.empty or "neg_elbo" not in table
            else {m: i for m, i in zip(table["method"], table.index, strict=True) if pd.notna(table.loc[i, "neg_elbo"])}
        )
        for method in sorted(set(reported) | set(measured)):
            row: dict[str, Any] = {"problem": problem, "method": method, "paper": reported.get(method, math.nan)}
            if method in measured:
                i = measured[method]
                row["measured"], row["measured_se"] = table.loc[i, "neg_elbo"], table.loc[i, "neg_elbo_se"]
                row["mc_se"] = table.loc[i, "neg_elbo_mc_se"] if "neg_elbo_mc_se" in table else math.nan
            else:
                row["measured"] = row["measured_se"] = row["mc_se"] = math.nan
            row["difference"] = row["measured"] - row["paper"]
            row["source"] = getattr(cls, "reported_source", "")
            rows.append(row)
    return pd.DataFrame(rows)


def format_reported_comparison(table: pd.DataFrame) -> str:
    """The comparison as Markdown (empty string when no problem reports figures)."""
    if table.empty:
        return ""
    shown = pd.DataFrame(
        {
            "problem": table["problem"],
            "method": table["method"],
            "measured -ELBO": [
                format_mean_se(m, s, e)
                for m, s, e in zip(table["measured"], table["measured_se"], table["mc_se"], strict=True)
            ],
            "paper": ["-" if math.isnan(v) else f"{v:.2f}" for v in table["paper"]],
            "difference": ["-" if math.isnan(v) else f"{v:+.2f}" for v in table["difference"]],
        }
    )
    sources = sorted(set(f"{p}: {s}" for p, s in zip(table["problem"], table["source"], strict=True)))
    return to_markdown(shown) + "\nSources: " + "; ".join(sources) + "\n"
