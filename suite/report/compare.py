"""Compare two results folders: ``tdbench compare OLD NEW``.

By default, beyond noise: for each (problem, method) in both folders, the change of the problem's main metric
(the mean over seeds of the value the leaderboards rank, :func:`suite.report.leaderboard.ranked_value`) with
Welch's 95% interval, and a verdict: ``better`` or ``worse`` when the interval excludes zero and the change
exceeds the reference's Monte Carlo error (:func:`suite.report.verdicts.separated`), else ``within noise``.
``--fail-on-worse`` exits 1 when any verdict is ``worse``, so a method's author can put it in CI.

``--exact``: runs are matched by (problem, problem configuration, method, seed); every metric except walltime
must be bitwise equal (value and standard error). Used to check that a refactoring changed no number; exit
status 0 when every run of OLD has an identical counterpart in NEW, 1 otherwise (the differences are printed).

Either way the runs (or pairs) found in one folder only are listed, and folders of different profiles (smoke
against quick, say) are named in a warning: their numbers differ by design.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from suite.report.leaderboard import higher_is_better, main_metric, method_scores, to_markdown
from suite.report.verdicts import difference_interval, separated

#: Metrics that measure the machine, not the method: never compared.
TIMING_METRICS = frozenset({"walltime_s"})


def _key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    config = json.dumps(record.get("problem_config"), sort_keys=True, default=str)
    return record["problem"], config, record["method"], record["seed"]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def _estimate(estimate: dict[str, Any] | None) -> str:
    """A metric's value and standard error as text (``absent`` when the run has no such metric)."""
    if estimate is None:
        return "absent"
    value, se = estimate.get("value"), estimate.get("se")
    return f"{value!r}" if se is None else f"{value!r} (se {se!r})"


def profiles(records: list[dict[str, Any]]) -> set[str]:
    """The profiles (smoke, quick, paper) the records were run with."""
    return {str((r.get("budget") or {}).get("profile")) for r in records if (r.get("budget") or {}).get("profile")}


def differences(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """One line per run whose status or non-timing metrics differ, or that is in one folder only."""
    later = {_key(record): record for record in after}
    earlier = {_key(record) for record in before}
    lines = []
    for record in before:
        name = f"{record['problem']} / {record['method']} / seed {record['seed']}"
        other = later.get(_key(record))
        if other is None:
            lines.append(f"{name}: missing in NEW")
            continue
        if record.get("status") != other.get("status"):
            lines.append(f"{name}: status {record.get('status')} -> {other.get('status')}")
        metrics, other_metrics = record.get("metrics", {}), other.get("metrics", {})
        for metric in sorted((metrics.keys() | other_metrics.keys()) - TIMING_METRICS):
            a, b = metrics.get(metric), other_metrics.get(metric)
            if a is None or b is None or not all(_same(a.get(f), b.get(f)) for f in ("value", "se")):
                lines.append(f"{name}: {metric} {_estimate(a)} -> {_estimate(b)}")
    for record in after:
        if _key(record) not in earlier:
            lines.append(f"{record['problem']} / {record['method']} / seed {record['seed']}: only in NEW")
    return lines


def unpaired(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The (problem, method) pairs found only in OLD, and only in NEW, as ``problem / method``."""
    pairs_old = {(r["problem"], r["method"]) for r in old}
    pairs_new = {(r["problem"], r["method"]) for r in new}
    return (
        [f"{p} / {m}" for p, m in sorted(pairs_old - pairs_new)],
        [f"{p} / {m}" for p, m in sorted(pairs_new - pairs_old)],
    )


def changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> pd.DataFrame:
    """Per (problem, method) in both folders: the main metric's change (new - old) with its 95% interval and verdict.

    Columns: problem, method, metric, direction (``lower``/``higher`` is better), old_mean, old_seeds, new_mean,
    new_seeds, change, change_low, change_high, verdict (``better``, ``worse``, ``within noise``).
    """
    rows = []
    for problem in sorted({r["problem"] for r in old} & {r["problem"] for r in new}):
        metric = main_metric(problem, new)
        higher = metric in higher_is_better(problem, new)
        before, after = method_scores(old, problem), method_scores(new, problem)
        for method in sorted(before.keys() & after.keys()):
            a, b = before[method], after[method]
            change, low, high = difference_interval(a, b) if a.values and b.values else (math.nan,) * 3
            verdict = "within noise"
            if separated(a, b):
                verdict = "better" if (change > 0) == higher else "worse"
            rows.append(
                {
                    "problem": problem,
                    "method": method,
                    "metric": metric,
                    "direction": "higher" if higher else "lower",
                    "old_mean": a.mean,
                    "old_seeds": a.seeds,
                    "new_mean": b.mean,
                    "new_seeds": b.seeds,
                    "change": change,
                    "change_low": low,
                    "change_high": high,
                    "verdict": verdict,
                }
            )
    return pd.DataFrame(rows)


def format_changes(table: pd.DataFrame) -> str:
    """The changes as a Markdown table (``-`` where a side has one seed: no interval)."""

    def number(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.3g}"

    shown = pd.DataFrame(
        {
            "problem": table["problem"],
            "method": table["method"],
            "metric": [f"{m} ({d} is better)" for m, d in zip(table["metric"], table["direction"], strict=True)],
            "old (seeds)": [f"{number(m)} ({n})" for m, n in zip(table["old_mean"], table["old_seeds"], strict=True)],
            "new (seeds)": [f"{number(m)} ({n})" for m, n in zip(table["new_mean"], table["new_seeds"], strict=True)],
            "change [95% CI]": [
                f"{c:+.3g} [{number(lo)}, {number(hi)}]" if not math.isnan(c) else "-"
                for c, lo, hi in zip(table["change"], table["change_low"], table["change_high"], strict=True)
            ],
            "verdict": table["verdict"],
        }
    )
    return to_markdown(shown)
