"""The tidy results table: one row per (run, metric), from run records only; written as ``results.parquet``.

Columns (:data:`RESULT_COLUMNS`, dtypes in :data:`COLUMN_DTYPES`): what ran (problem, method, seed as int64,
config_hash, profile), how it ended (status, reason), the metric's value and standard error, and per run its
method walltime, time budget, number of draws, device, when it started, its record file and its draw file
(both relative to the results folder). A run that did not end "ok" keeps one row with metric ``status`` (as in
``records_long.csv``), so failures are counted, never turned into missing values. Rows of methods that do not
apply to a problem are not runs and are left out. Imports nothing from ``problems/``, ``methods/`` or the
registry.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from suite.core.files import TEMPORARY_SUFFIX, give_ordinary_mode, temporary_prefix
from suite.results.records import NOT_APPLICABLE, RECORDS_DIR

RESULTS_FILE = "results.parquet"
#: Status of the synthetic leaderboard rows of methods that do not apply to a problem (not runs).
#: Column -> dtype of the table (strings are pandas' string dtype; a missing string is NA).
COLUMN_DTYPES: dict[str, str] = {
    "problem": "string",
    "method": "string",
    "seed": "int64",
    "config_hash": "string",
    "profile": "string",
    "status": "string",
    "reason": "string",
    "metric": "string",
    "value": "float64",
    "se": "float64",
    "walltime_s": "float64",
    "time_budget_s": "float64",
    "num_draws": "Int64",
    "device": "string",
    "started_at": "string",
    "record": "string",
    "draws": "string",
}
RESULT_COLUMNS = list(COLUMN_DTYPES)


def _number(value: Any) -> float:
    """``value`` as a float; NaN for None or anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def record_name(record: dict[str, Any]) -> str:
    """The record's file, relative to its results folder (``records/<problem>__<method>__seed<k>__<hash>.json``)."""
    stem = f"{record['problem']}__{record['method']}__seed{record['seed']}__{record.get('config_hash')}"
    return f"{RECORDS_DIR}/{stem}.json"


def _run_columns(record: dict[str, Any]) -> dict[str, Any]:
    """The columns every row of one run shares."""
    budget = record.get("budget") if isinstance(record.get("budget"), dict) else {}
    environment = record.get("environment") if isinstance(record.get("environment"), dict) else {}
    timings = record.get("timings_s") if isinstance(record.get("timings_s"), dict) else {}
    walltime = (record.get("metrics") or {}).get("walltime_s")
    saved = record.get("draws") if isinstance(record.get("draws"), dict) else {}
    num_draws = budget.get("num_draws")
    return {
        "problem": record["problem"],
        "method": record["method"],
        "seed": int(record["seed"]),
        "config_hash": record.get("config_hash"),
        "profile": budget.get("profile"),
        "status": record["status"],
        "reason": record.get("reason"),
        "walltime_s": _number(walltime.get("value") if isinstance(walltime, dict) else timings.get("method_total")),
        "time_budget_s": _number(budget.get("time_budget_s")),
        "num_draws": num_draws if isinstance(num_draws, int) and not isinstance(num_draws, bool) else None,
        "device": environment.get("device"),
        "started_at": record.get("started_at"),
        "record": record_name(record),
        "draws": saved.get("path"),
    }


def results_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The tidy table of ``records`` (see the module docstring); runs in the order given, metrics sorted by name."""
    rows = []
    for record in records:
        if record.get("status") == NOT_APPLICABLE or record.get("seed") is None:
            continue
        run = _run_columns(record)
        if record["status"] != "ok":
            rows.append({**run, "metric": "status", "value": math.nan, "se": math.nan})
            continue
        for metric, estimate in sorted((record.get("metrics") or {}).items()):
            value, se = (estimate.get("value"), estimate.get("se")) if isinstance(estimate, dict) else (None, None)
            rows.append({**run, "metric": metric, "value": _number(value), "se": _number(se)})
    frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    return frame.astype(COLUMN_DTYPES)


def write_results_table(records: list[dict[str, Any]], out: Path) -> Path:
    """Write :func:`results_frame` of ``records`` to ``out/results.parquet`` atomically; return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=TEMPORARY_SUFFIX, dir=out)
    try:
        give_ordinary_mode(fd)
    finally:
        os.close(fd)
    try:
        results_frame(records).to_parquet(tmp, index=False, engine="pyarrow")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
