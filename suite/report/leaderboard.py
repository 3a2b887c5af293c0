"""Leaderboards: records -> long table -> one summary table per problem (mean and SE over seeds).

Besides the end-of-run metrics, a leaderboard built from records (``summary_table(..., records=records)``) shows
the main metric along each run's trace (its running estimates, scored at snapshots of its compute clock): the
value at a few common compute times and the time to reach the stated accuracy of :data:`REACH_TARGETS`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.core.files import write_atomically
from suite.report.configurations import configuration_notes
from suite.report.verdicts import Scores, problem_seed, tie_text, verdicts
from suite.results import schema
from suite.results.records import NOT_APPLICABLE, over_budget

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
#: Shown for a metric that was not computed (a computed NaN shows as ``nan``).
MISSING = "-"
#: How to add facts to records written before they were kept.
FACTS_FIX = "tdbench facts RESULTS_DIR"
#: Keys of ``problem_facts`` the report reads, with their types.
FACT_TYPES: dict[str, type] = {
    "main_metric": str,
    "higher_is_better": list,
    "reported_neg_elbo": dict,
    "reported_dag_table": dict,
}

#: Stated accuracy per main metric for the time-to-reach column: (comparison, threshold). A main metric not listed
#: (``neg_elbo``, ``cross_entropy``: end-of-run metrics with no trace) gets no such column.
REACH_TARGETS: dict[str, tuple[str, float]] = {
    "model_prob_tv": ("<=", 0.05),
    "model_prob_kl": ("<=", 0.01),
    "model_prob_max_abs": ("<=", 0.05),
    "k_abs_error": ("<=", 0.1),
    "q_true_k": (">=", 0.9),
    "edge_f1": (">=", 0.8),
    "shd": ("<=", 2.0),
    "expected_shd": ("<=", 1.0),
}
#: Short metric names for the compact trace columns (``TV@3s``, ``t(TV<=0.05)``).
SHORT_NAMES = {
    "model_prob_tv": "TV",
    "model_prob_kl": "KL",
    "model_prob_max_abs": "maxerr",
    "k_abs_error": "kerr",
    "q_true_k": "q(k*)",
    "edge_f1": "F1",
    "shd": "SHD",
    "expected_shd": "ESHD",
}
#: Fractions of the common time budget at which the main metric is shown, when a problem's runs share one budget.
BUDGET_FRACTIONS = (0.1, 0.3, 1.0)
#: Compute seconds at which the main metric is shown otherwise.
FIXED_TIMES_S = (1.0, 10.0, 100.0)


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


def record_file(record: dict[str, Any]) -> str:
    """Where a run record is stored, relative to its results folder (``records/<problem>__<method>__...json``)."""
    stem = f"{record['problem']}__{record['method']}__seed{record.get('seed')}__{record.get('config_hash')}"
    return f"records/{stem}.json"


def facts_problem(record: dict[str, Any], folder: Path | None = None) -> str | None:
    """Why a record's ``problem_facts`` cannot be used (absent, or a key missing or of the wrong type), or None.

    ``folder``: the results folder the record is in, named in the message with the command that adds facts.
    """
    name = record_file(record) if folder is None else str(Path(folder) / record_file(record))
    facts = record.get("problem_facts")
    if facts is None:
        fix = FACTS_FIX if folder is None else FACTS_FIX.replace("RESULTS_DIR", str(folder))
        return f"{name} has no problem_facts (written before records kept them); add them with `{fix}`"
    if not isinstance(facts, dict):
        return f"{name}: problem_facts is a {type(facts).__name__}, not an object"
    for key, kind in FACT_TYPES.items():
        if not isinstance(facts.get(key), kind):
            return f"{name}: problem_facts[{key!r}] is missing or not a {kind.__name__}"
    return None


def problem_facts(records: list[dict[str, Any]], problem: str) -> dict[str, Any] | None:
    """The facts of ``problem`` from its records (None when only rows without a run, or failed ones, mention it).

    A successful run's record without usable facts raises ValueError naming the record and the fix; a failed
    stand-in (a run that ended without its record) carries none and is passed over.
    """
    for rec in records:
        if rec["problem"] != problem or rec["status"] == NOT_APPLICABLE:
            continue
        why = facts_problem(rec)
        if why is None:
            return rec["problem_facts"]
        if rec["status"] == "ok":
            raise ValueError(why)
    return None


def main_metric(problem: str, records: list[dict[str, Any]]) -> str:
    """The metric a problem's leaderboard is sorted by (``model_prob_tv`` when no record states it)."""
    facts = problem_facts(records, problem)
    return "model_prob_tv" if facts is None else str(facts["main_metric"])


def mean_and_se(values: pd.Series) -> tuple[float, float]:
    """Mean and standard error over seeds; no standard error for one value or when a value is infinite."""
    v = values.to_numpy(dtype=float)
    if len(v) == 0:
        return math.nan, math.nan
    if np.isinf(v).any():
        return float(np.mean(v)), math.nan
    with np.errstate(over="ignore"):  # a diverged run's 1e200 squares to inf: its SE is inf, said as such
        return float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan


def summary_table(long: pd.DataFrame, problem: str, records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-method mean and standard error over seeds of each metric, best first by the main metric.

    The table also has the trace columns of :func:`trace_columns` (named in ``table.attrs["trace"]``) and the
    verdict columns :data:`VERDICT_COLUMNS` (:mod:`suite.report.verdicts`, on :func:`ranked_value`: the main metric,
    at the common budget when the problem's runs share one), and is sorted by their mean, best first; methods
    without a value follow by name. ``table.attrs`` also holds ``verdict`` (the sentence naming the best or the tie
    group), ``main_metric``, ``higher_is_better`` (from the records' facts) and ``nan_cells``: the (method, metric)
    cells whose NaN was computed (shown ``nan``; other NaNs: not computed).
    """
    sub = long[long["problem"] == problem]
    metrics = [m for m in METRIC_ORDER if m in set(sub["metric"])]
    metrics += sorted(set(sub["metric"]) - set(metrics) - {"status"})
    out = []
    nan_cells: set[tuple[str, str]] = set()
    main = main_metric(problem, records)
    for method, group in sub.groupby("method", sort=True):
        ok = group[group["status"] == "ok"]
        failed = group[~group["status"].isin(["ok", NOT_APPLICABLE])]
        row: dict[str, Any] = {
            "method": method,
            "runs": int(group["seed"].nunique()),
            "failed": int(failed["seed"].nunique()),
            # the configuration of the row's runs (one: a method's other configurations are rows of their own)
            "config_hash": ", ".join(sorted(set(group.loc[group["status"] != NOT_APPLICABLE, "config_hash"].dropna()))),
        }
        for metric in metrics:
            values = ok[ok["metric"] == metric]
            row[metric], row[f"{metric}_se"] = mean_and_se(values["value"])
            if len(values) and math.isnan(row[metric]):
                nan_cells.add((str(method), metric))
            if values["se"].notna().any():  # the estimator's own Monte Carlo error, averaged over seeds
                row[f"{metric}_mc_se"] = float(values["se"].mean())
        row["over_budget"] = sum(
            1
            for rec in records
            if rec["problem"] == problem and rec["method"] == method and rec["status"] == "ok" and over_budget(rec)
        )
        main_values = ok[ok["metric"] == main]
        row["unreliable"] = sum(
            schema.is_unreliable(main, v, s) for v, s in zip(main_values["value"], main_values["se"], strict=True)
        )
        reasons = sorted(set(failed["reason"].dropna()))
        row["failure_reasons"] = shown_reason("; ".join(reasons))
        not_applicable = sorted(set(group.loc[group["status"] == NOT_APPLICABLE, "reason"].dropna()))
        row["not_applicable"] = shown_reason("; ".join(not_applicable))
        out.append(row)
    table = pd.DataFrame(out)
    key = main
    higher = higher_is_better(problem, records)
    if table.empty:
        return table
    columns, info = trace_columns(records, problem)
    if info:
        for name in info["columns"]:
            table[name] = [columns.get(m, {}).get(name, math.nan) for m in table["method"]]
    scores = method_scores(records, problem)
    rows = verdicts(scores, lower_is_better=key not in higher, seed=problem_seed(problem))
    verdict = {row.method: row for row in rows}
    _show_ranked_values(table, key, scores)
    position = {row.method: i for i, row in enumerate(rows)}
    table["ranked_mean"] = [verdict[m].mean if m in verdict else math.nan for m in table["method"]]
    table["ci_low"] = [verdict[m].ci_low if m in verdict else math.nan for m in table["method"]]
    table["ci_high"] = [verdict[m].ci_high if m in verdict else math.nan for m in table["method"]]
    table["rank_low"] = pd.array([verdict[m].rank_low if m in verdict else None for m in table["method"]], "Int64")
    table["rank_high"] = pd.array([verdict[m].rank_high if m in verdict else None for m in table["method"]], "Int64")
    table["tied_with_best"] = [bool(m in verdict and verdict[m].tied_with_best) for m in table["method"]]
    table["_order"] = [position.get(m, len(position)) for m in table["method"]]
    table = table.sort_values(["_order", "method"], kind="stable").drop(columns="_order").reset_index(drop=True)
    table.attrs.update(
        trace=info,
        main_metric=key,
        higher_is_better=sorted(higher),
        nan_cells=sorted(nan_cells),
        verdict=tie_text(rows),
    )
    return table


def _show_ranked_values(table: pd.DataFrame, metric: str, scores: dict[str, Scores]) -> None:
    """Where a method has runs over budget, its ``metric`` column becomes the value ranked (at the budget).

    Every output reads the table, so the terminal, the CSV and the Markdown show the number the ranking used; the
    final value, which the over-budget runs reached only after their budget, is kept as ``<metric>_final``.
    """
    if metric not in table or "over_budget" not in table or not table["over_budget"].gt(0).any():
        return
    final = f"{metric}_final"
    table[final] = math.nan
    for position, method in enumerate(table["method"]):
        if table["over_budget"].iat[position] and method in scores and scores[method].values:
            ranked, ranked_se = mean_and_se(pd.Series(scores[method].values, dtype=float))
            table.loc[table.index[position], final] = table[metric].iat[position]
            table.loc[table.index[position], metric] = ranked
            table.loc[table.index[position], f"{metric}_se"] = ranked_se


def is_computed_nan(table: pd.DataFrame, method: str, column: str) -> bool:
    """Whether ``table``'s cell (method, column) is a NaN that was computed (not a metric left uncomputed)."""
    return (method, column) in {tuple(cell) for cell in table.attrs.get("nan_cells", ())}


def table_csv(table: pd.DataFrame, path: Path, key: str = "method") -> None:
    """Write ``table`` as CSV: a computed NaN as ``nan``, a metric not computed as an empty cell.

    ``key``: the column naming a row in ``table.attrs["nan_cells"]`` (its cells are (row name, column) pairs).
    """
    cells = table.attrs.get("nan_cells") or ()
    if cells and key in table:
        table = table.copy()
        for name, column in cells:
            if column in table:
                table[column] = table[column].astype(object)
                table.loc[(table[key] == name) & table[column].isna(), column] = "nan"
    table.to_csv(path, index=False)


def common_budget(records: list[dict[str, Any]], problem: str) -> float | None:
    """The time budget (compute seconds) all of a problem's runs had, or None if they differ or had none.

    Rows for methods that do not apply are not runs; a record written before budgets were recorded counts as none.
    """
    budgets = {
        (rec.get("budget") or {}).get("time_budget_s")
        for rec in records
        if rec["problem"] == problem and rec["status"] != NOT_APPLICABLE
    }
    if len(budgets) != 1:
        return None
    (budget,) = budgets
    return float(budget) if isinstance(budget, int | float) and budget > 0 else None


def trace_series(record: dict[str, Any], metric: str) -> tuple[list[float], list[float | None]] | None:
    """A record's snapshot seconds and running values of ``metric`` (None before an estimate), or None if untraced."""
    trace = record.get("trace") or {}
    values = (trace.get("metrics") or {}).get(metric)
    seconds = trace.get("seconds")
    if not seconds or values is None or len(values) != len(seconds):
        return None
    return [float(t) for t in seconds], [None if v is None or math.isnan(v) else float(v) for v in values]


def value_at(seconds: list[float], values: list[float | None], at: float) -> float | None:
    """The running value at compute time ``at``: the value of the last snapshot at or before it (no extrapolation).

    None before the first snapshot or where that snapshot had no estimate yet. A run that ended before ``at`` keeps
    its final value: it had finished.
    """
    last = None
    for t, v in zip(seconds, values, strict=True):
        if t > at:
            break
        last = v
    return last


def time_to_reach(seconds: list[float], values: list[float | None], target: tuple[str, float]) -> float:
    """The first snapshot time after which the running value stays within ``target`` until the run's end; inf if never.

    A dip into the target that is left again does not count: only the final stretch inside the target does.
    """
    op, threshold = target
    reached = math.inf
    for t, v in zip(reversed(seconds), reversed(values), strict=True):
        if v is None or not (v <= threshold if op == "<=" else v >= threshold):
            break
        reached = t
    return reached


def ranked_value(
    record: dict[str, Any],
    metric: str,
    budget_s: float | None,
    series: tuple[list[float], list[float | None]] | None = None,
) -> float | None:
    """The value of ``metric`` a leaderboard ranks a run by (None: no estimate).

    Its final value, except for a run over the common budget ``budget_s``: the last running estimate it took by
    the budget. A run without a final value keeps its last running estimate. ``series``: its trace, if known.
    """
    if series is None:
        series = trace_series(record, metric)
    if budget_s is not None and over_budget(record):
        return value_at(*series, budget_s) if series else None  # only what it had estimated by the budget
    final = (record.get("metrics") or {}).get(metric, {}).get("value")
    return final if final is not None else (series[1][-1] if series else None)


def method_scores(records: list[dict[str, Any]], problem: str) -> dict[str, Scores]:
    """Per method, the per-seed ranked values (:func:`ranked_value`) of the problem's main metric, and its reference
    error (the mean over seeds of the metric's ``se``; 0 where the truth is exact)."""
    metric = main_metric(problem, records)
    budget = common_budget(records, problem)
    out: dict[str, Scores] = {}
    runs = [rec for rec in records if rec["problem"] == problem and rec["status"] == "ok"]
    for method in sorted({rec["method"] for rec in runs}):
        mine = [rec for rec in runs if rec["method"] == method]
        values = [ranked_value(rec, metric, budget) for rec in mine]
        errors = [(rec.get("metrics") or {}).get(metric, {}).get("se") for rec in mine]
        errors = [float(e) for e in errors if isinstance(e, int | float) and math.isfinite(e)]
        kept = tuple(float(v) for v in values if v is not None and not math.isnan(v))
        out[method] = Scores(kept, float(np.mean(errors)) if errors else 0.0)
    return out


#: Columns of a summary table that carry its verdict (:mod:`suite.report.verdicts`).
VERDICT_COLUMNS = ["ranked_mean", "ci_low", "ci_high", "rank_low", "rank_high", "tied_with_best"]


def trace_columns(records: list[dict[str, Any]], problem: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per method, the main metric along the traces of its successful runs, and a description of the columns.

    Columns (``<m>``: the main metric's short name, e.g. ``TV``):

    - ``<m>@<T>s``: the median over seeds of the running value at ``T`` compute seconds (:func:`value_at`), over the
      seeds that had an estimate by then (NaN, shown ``-``, when none had). ``T`` is 10%, 30% and 100% of the common
      time budget when the problem's runs share one (:func:`common_budget`), else 1, 10 and 100 s. At the common
      budget a run's value is its final one (a run stops at the budget, overshooting by at most the allowance of
      :func:`suite.core.budget.budget_allowance_s`; a run without a trace contributes its final metric there),
      except for a run over budget (:func:`suite.results.records.over_budget`): its value there is the last
      running estimate it took by the budget.
    - ``t(<m><=x)`` (or ``>=``): the median over traced seeds of :func:`time_to_reach` for the target of
      :data:`REACH_TARGETS`, a seed that never reached it counting as infinite (so inf, shown ``not reached``, when
      at least half the seeds did not); ``t(...) seeds``: ``k/n``, how many of the n traced seeds reached it.

    The description (``{}`` when no run of the problem has a trace of its main metric): ``metric``, ``budget_s``,
    ``times``, ``at`` (the names of the value columns), ``reach`` (the time-to-reach column or None), ``target``
    and ``columns`` (all names, in order).
    """
    metric = main_metric(problem, records)
    runs = [rec for rec in records if rec["problem"] == problem and rec["status"] == "ok"]
    series = {id(rec): trace_series(rec, metric) for rec in runs}
    if not any(s is not None for s in series.values()):
        return {}, {}
    budget = common_budget(records, problem)
    times = [budget * f for f in BUDGET_FRACTIONS] if budget is not None else list(FIXED_TIMES_S)
    short = SHORT_NAMES.get(metric, metric)
    at_names = [f"{short}@{t:.3g}s" for t in times]
    target = REACH_TARGETS.get(metric)
    reach = None if target is None else f"t({short}{target[0]}{target[1]:g})"
    names = at_names + ([reach, f"{reach} seeds"] if reach else [])
    out: dict[str, dict[str, Any]] = {}
    for method in sorted({rec["method"] for rec in runs}):
        mine = [rec for rec in runs if rec["method"] == method]
        row: dict[str, Any] = {}
        for name, t in zip(at_names, times, strict=True):
            values = []
            for rec in mine:
                s = series[id(rec)]
                if budget is not None and t == times[-1]:
                    v = ranked_value(rec, metric, budget, s)
                else:
                    v = value_at(*s, t) if s else None
                if v is not None and not math.isnan(v):
                    values.append(v)
            row[name] = float(np.median(values)) if values else math.nan
        if reach and target is not None:
            traced = [series[id(rec)] for rec in mine if series[id(rec)] is not None]
            hits = [time_to_reach(*s, target) for s in traced if s is not None]
            row[reach] = float(np.median(hits)) if hits else math.nan
            row[f"{reach} seeds"] = f"{sum(math.isfinite(h) for h in hits)}/{len(hits)}" if hits else ""
        out[method] = row
    info = {
        "metric": metric,
        "budget_s": budget,
        "times": times,
        "at": at_names,
        "reach": reach,
        "target": target,
        "columns": names,
    }
    return out, info


def trace_note(table: pd.DataFrame) -> str:
    """A sentence explaining a summary table's trace columns ("" when it has none)."""
    info = table.attrs.get("trace") or {}
    if not info:
        return ""
    metric, times = info["metric"], info["times"]
    spelled = ", ".join(f"{t:.3g}" for t in times[:-1]) + f" and {times[-1]:.3g} compute s"
    if info["budget_s"] is not None:
        spelled += f" ({', '.join(f'{f:.0%}' for f in BUDGET_FRACTIONS)} of the common budget: the final value)"
    text = f"{', '.join(info['at'])}: running {metric} at {spelled}, median over seeds; -: no estimate yet."
    if info["reach"]:
        op, threshold = info["target"]
        text += (
            f" {info['reach']}: first compute time after which it stays {op} {threshold:g} until the run's end, "
            "median over seeds (k/n: k of n seeds reached it; not reached: half or more never did)."
        )
    return text


def higher_is_better(problem: str, records: list[dict[str, Any]]) -> frozenset[str]:
    """The metrics of a problem's leaderboard where higher is better (all others: lower is better).

    The suite's own metrics take their direction from the metric registry (:data:`schema.HIGHER_IS_BETTER`), never
    from a record; a plug-in problem's own metrics from its records' facts.
    """
    facts = problem_facts(records, problem)
    stated = frozenset() if facts is None else frozenset(facts["higher_is_better"])
    return (stated - schema.LOWER_IS_BETTER) | schema.HIGHER_IS_BETTER


def _direction(table: pd.DataFrame) -> str:
    return "higher" if table.attrs.get("main_metric") in table.attrs.get("higher_is_better", ()) else "lower"


#: Metrics shown as ``>1e6`` beyond this magnitude (records and CSVs keep the value): a cross-entropy of 1e91 says
#: that a method diverged, and is not a number to compare with others.
DISPLAY_BOUNDS: dict[str, float] = {"cross_entropy": 1e6, "kl_joint": 1e6, "neg_elbo": 1e6, "kl_reverse": 1e6}


def beyond_bound(metric: str | None, value: float | None) -> str | None:
    """``>1e6`` (or ``<-1e6``) when a finite ``value`` of ``metric`` lies beyond its display bound, else None.

    Example:
        >>> beyond_bound("cross_entropy", 3.2e91), beyond_bound("cross_entropy", 12.5), beyond_bound("tv", 1e9)
        ('>1e6', None, None)
    """
    bound = DISPLAY_BOUNDS.get(metric or "")
    if bound is None or value is None or not math.isfinite(value) or abs(value) <= bound:
        return None
    exponent = round(math.log10(bound))
    return f">1e{exponent}" if value > 0 else f"<-1e{exponent}"


def format_mean_se(
    mean: float | None, se: float, mc_se: float = math.nan, computed: bool = False, metric: str | None = None
) -> str:
    """``mean ± se (MC ± mc_se)`` with the parts that are defined; a NaN mean is ``nan`` if ``computed`` else ``-``.

    ``computed``: the mean is of values that were computed (a NaN among them makes it NaN), not of none at all.
    ``metric``: its name, so that a value beyond its display bound shows as ``>1e6`` (:func:`beyond_bound`).
    """
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "nan" if computed and mean is not None else MISSING
    if math.isinf(mean):
        return "inf" if mean > 0 else "-inf"
    if beyond_bound(metric, mean):
        return str(beyond_bound(metric, mean))
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
    if "tied_with_best" in table:
        shown["best"] = ["tied" if tied else "" for tied in table["tied_with_best"]]
        shown["rank (95%)"] = [
            format_rank(lo, hi) for lo, hi in zip(table["rank_low"], table["rank_high"], strict=True)
        ]
        shown["mean (95% CI)"] = [
            format_interval(m, lo, hi, table.attrs.get("main_metric"))
            for m, lo, hi in zip(table["ranked_mean"], table["ci_low"], table["ci_high"], strict=True)
        ]
    info = table.attrs.get("trace") or {}
    for name in info.get("at", []):
        shown[name] = ["-" if math.isnan(v) else f"{v:.3g}" for v in table[name]]  # -inf prints as -inf
    if info.get("reach"):
        reach = info["reach"]
        shown[reach] = [format_reach(t, k) for t, k in zip(table[reach], table[f"{reach} seeds"], strict=True)]
    for metric in metrics:
        mc = table[f"{metric}_mc_se"] if f"{metric}_mc_se" in table else [math.nan] * len(table)
        shown[metric] = [
            format_mean_se(m, s, e, is_computed_nan(table, method, metric), metric)
            for method, m, s, e in zip(table["method"], table[metric], table[f"{metric}_se"], mc, strict=True)
        ]
        if f"{metric}_final" in table:  # over budget: the value ranked, and beside it the final one
            shown[metric] = [
                cell if math.isnan(final) else f"{cell} (final {final:.3g})"
                for cell, final in zip(shown[metric], table[f"{metric}_final"], strict=True)
            ]
    if "over_budget" in table and table["over_budget"].gt(0).any():
        pairs = zip(table["over_budget"], table["runs"], strict=True)
        shown["over_budget"] = [f"{k}/{n}" if k else "" for k, n in pairs]
    if "unreliable" in table and table["unreliable"].gt(0).any():
        pairs = zip(table["unreliable"], table["runs"], strict=True)
        shown["unreliable"] = [f"{k}/{n}" if k else "" for k, n in pairs]
    if table["failure_reasons"].str.len().gt(0).any():
        shown["failure_reasons"] = table["failure_reasons"]
    if "not_applicable" in table and table["not_applicable"].str.len().gt(0).any():
        shown["not_applicable"] = table["not_applicable"]
    return shown


def format_rank(low: Any, high: Any) -> str:
    """A rank interval: ``2``, ``1-3``, or ``-`` without one.

    Example:
        >>> format_rank(1, 3), format_rank(2, 2), format_rank(None, None)
        ('1-3', '2', '-')
    """
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return MISSING
    return str(int(low)) if int(low) == int(high) else f"{int(low)}-{int(high)}"


def format_interval(mean: float, low: float, high: float, metric: str | None = None) -> str:
    """``mean [low, high]``; the mean alone without an interval (one seed), ``-`` without a mean."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return MISSING
    bound = beyond_bound(metric, mean)
    if bound or math.isinf(mean):
        return bound or ("inf" if mean > 0 else "-inf")
    text = f"{mean:.3g}"
    return text if math.isnan(low) else f"{text} [{low:.3g}, {high:.3g}]"


def format_reach(seconds: float, seeds: str) -> str:
    """``2.3s``, ``not reached`` or ``-`` (no trace), with ``(k/n)`` when only some (k of n) seeds reached it."""
    if isinstance(seconds, float) and math.isnan(seconds):
        return "-"
    text = "not reached" if math.isinf(seconds) else f"{seconds:.3g}s"
    reached, _, total = str(seeds).partition("/")
    return text + (f" ({seeds})" if total and reached not in ("0", total) else "")


#: Characters of a failure reason shown in the leaderboards, the page and the terminal; the record keeps it all.
MAX_SHOWN_REASON = 500
#: What Markdown renderers (GitHub's, IDEs') would read as markup in text from records: shown as entities.
_MARKDOWN_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "\n": " ", "\r": " "})


def shown_reason(text: str, limit: int = MAX_SHOWN_REASON) -> str:
    """A failure reason cut to ``limit`` characters for display, saying how much more the record holds.

    Example:
        >>> shown_reason("x" * 600, 10)
        'xxxxxxxxxx... (590 more characters in the record)'
    """
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters in the record)"


def markdown_text(value: Any) -> str:
    """``value`` as text inside a Markdown table or line: HTML shown as text, ``|`` escaped, on one line.

    Records are files anyone could have written; ``<script>`` or ``<img onerror=...>`` in a reason must not become
    markup where a Markdown file is rendered (issue 51, H5).

    Example:
        >>> markdown_text("<img src=x onerror=alert(1)> | a")
        '&lt;img src=x onerror=alert(1)&gt; \\\\| a'
    """
    return str(value).translate(_MARKDOWN_ESCAPES)


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency); cells are :func:`markdown_text`."""
    cols = [markdown_text(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(markdown_text(v) for v in row.tolist()) + " |")
    return "\n".join(lines) + "\n"


def write_leaderboards(records: list[dict[str, Any]], out: Path) -> dict[str, pd.DataFrame]:
    """Write ``records_long.csv`` and, per problem, ``leaderboard_<problem>.md`` / ``.csv``; return the tables."""
    out = Path(out)
    long = long_table(records)
    write_atomically(out / "records_long.csv", lambda path: long.to_csv(path, index=False))
    profiles = ", ".join(sorted({str((rec.get("budget") or {}).get("profile")) for rec in records} - {"None"}))
    tables = {}
    for problem in sorted(long["problem"].unique()):
        table = summary_table(long, problem, records)
        tables[problem] = table
        write_atomically(out / f"leaderboard_{problem}.csv", lambda path, table=table: table_csv(table, path))
        sort_key = _sort_key(table, "`")
        title = f"# Leaderboard: {problem}\n\nSorted by {sort_key} ({_direction(table)} is better). "
        title += f"{LEGEND}\n\n"
        title += f"{verdict_line(table)}\n\n" if table.attrs.get("verdict") else ""
        note = trace_note(table)
        title += f"{note}\n\n" if note else ""
        notes = configuration_notes(records, problem)
        title += f"Configurations (a row each): {markdown_text('; '.join(notes))}.\n\n" if notes else ""
        kind = reference_kind(records, problem)
        title += f"Reference: {markdown_text(kind)}.\n\n" if kind else ""
        title += f"Profile: {markdown_text(profiles)}.\n\n" if profiles else ""
        text = title + to_markdown(display_table(table))
        write_atomically(out / f"leaderboard_{problem}.md", lambda path, text=text: path.write_text(text))
    return tables


#: How a leaderboard's verdict columns are made, said under every verdict.
VERDICT_LEGEND = (
    "rank (95%): the rank interval over seeds; best: tied when the data cannot separate the method from the best "
    "mean (Welch 95% interval of the difference, the reference's Monte Carlo error, the rank interval; "
    "docs/metrics.md, How verdicts are made); mean (95% CI): Student t over seeds"
)


def verdict_line(table: pd.DataFrame) -> str:
    """The sentence naming the best method or the tie group, and how it was decided."""
    return f"Verdict: {table.attrs['verdict']}. {VERDICT_LEGEND}."


def _reference_label(reference: dict[str, Any]) -> str | None:
    """A reference's kind; a stored one whose model probabilities came from quadrature says so (block-vs)."""
    if reference.get("kind") == "estimated" and reference.get("evidence_used") == "quadrature":
        return "exact model probabilities (quadrature), estimated draws"
    return reference.get("kind")


def reference_kind(records: list[dict[str, Any]], problem: str) -> str | None:
    """Where a problem's ground truth came from in its records ("exact", "estimated", ...), or None if unrecorded.

    A stored reference made for one profile's size says which ("estimated, quick-size"), and runs scored against
    a size other than their profile's (a paper run that found only the quick reference) are named.
    """
    references = [rec.get("reference") or {} for rec in records if rec["problem"] == problem]
    kinds = {_reference_label(ref) for ref in references}
    text = "/".join(sorted(k for k in kinds if k)) or None
    sizes = sorted({ref["size"] for ref in references if ref.get("size") not in (None, "any")})
    if text and sizes:
        text += f", {'/'.join(sizes)}-size"
    mismatched = sorted({(ref.get("size_wanted"), ref.get("size")) for ref in references if ref.get("size_mismatch")})
    for wanted, made in mismatched:
        text = f"{text}; {wanted} runs scored against the {made}-size reference (no {wanted}-size one was found)"
    return text


def format_for_terminal(problem: str, table: pd.DataFrame, reference: str | None = None) -> str:
    """A plain-text rendering of one problem's leaderboard (``reference``: its ground truth's kind, if known)."""
    shown = f"; reference: {reference}" if reference else ""
    header = f"== {problem}  (sorted by {_sort_key(table)}, {_direction(table)} is better{shown}; {LEGEND})"
    note = trace_note(table)
    verdict = f"   {verdict_line(table)}\n" if table.attrs.get("verdict") else ""
    return header + "\n" + verdict + (f"   {note}\n" if note else "") + display_table(table).to_string(index=False)


def _sort_key(table: pd.DataFrame, quote: str = "") -> str:
    """What a summary table is sorted by: the main metric, at the common budget when its runs share one."""
    info = table.attrs.get("trace") or {}
    text = f"{quote}{table.attrs.get('main_metric', 'model_prob_tv')}{quote}"
    if info.get("budget_s") is not None:
        text += f" at the common budget of {info['budget_s']:.3g} s ({quote}{info['at'][-1]}{quote})"
    return text


def reported_comparison(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Measured negative ELBO per (problem, method) next to the source paper's figure, where it reports one."""
    long = long_table(records)
    rows = []
    for problem in sorted(long["problem"].unique()):
        facts = problem_facts(records, problem) or {}
        reported: dict[str, float] = facts.get("reported_neg_elbo") or {}
        if not reported:
            continue
        table = summary_table(long, problem, records)
        measured = (
            {}
            if table.empty or "neg_elbo" not in table
            else {
                m: i
                for m, i in zip(table["method"], table.index, strict=True)
                if pd.notna(table.loc[i, "neg_elbo"]) or is_computed_nan(table, m, "neg_elbo")
            }
        )
        for method in sorted(set(reported) | set(measured)):
            row: dict[str, Any] = {"problem": problem, "method": method, "paper": reported.get(method, math.nan)}
            row["computed"] = method in measured
            if method in measured:
                i = measured[method]
                row["measured"], row["measured_se"] = table.loc[i, "neg_elbo"], table.loc[i, "neg_elbo_se"]
                row["mc_se"] = table.loc[i, "neg_elbo_mc_se"] if "neg_elbo_mc_se" in table else math.nan
            else:
                row["measured"] = row["measured_se"] = row["mc_se"] = math.nan
            row["difference"] = row["measured"] - row["paper"]
            row["source"] = str(facts.get("reported_source") or "")
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
                format_mean_se(m, s, e, c)
                for m, s, e, c in zip(
                    table["measured"], table["measured_se"], table["mc_se"], table["computed"], strict=True
                )
            ],
            "paper": [MISSING if math.isnan(v) else f"{v:.2f}" for v in table["paper"]],
            "difference": [
                ("nan" if c and not math.isnan(p) else MISSING) if math.isnan(v) else f"{v:+.2f}"
                for v, p, c in zip(table["difference"], table["paper"], table["computed"], strict=True)
            ],
        }
    )
    sources = sorted(set(f"{p}: {s}" for p, s in zip(table["problem"], table["source"], strict=True)))
    return to_markdown(shown) + "\nSources: " + "; ".join(sources) + "\n"
