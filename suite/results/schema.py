"""The schema of a run record: the type and range of every field the report and the runner read, checked on read.

:func:`schema_problem` is called on every record read from disk (:func:`suite.results.records._parse`), so that
the report, the runner's resumption and replay, and :mod:`tdbench.results` see only records of this shape; a record
that breaks it is named in a warning and treated as absent. Every field except the five required ones
(:data:`suite.results.records.REQUIRED_KEYS`) may be missing (older records) or null; fields not listed here
(a plug-in's run information) are not checked.

Metrics are ``{"value": v, "se": s, ...}`` with ``v`` a number (finite, ±inf or NaN: a computed NaN is shown as
``nan``) or null, and ``s`` null, NaN or a number >= 0. A metric with known bounds (:data:`METRIC_BOUNDS`) must lie
within them up to :data:`TOLERANCE`, at the end of the run and along its trace: a total variation of -0.2 or 1.5,
or a cross-entropy of -inf, is no result to rank.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from suite.core.budget import MAX_TIME_BUDGET_S
from suite.core.names import name_problem

#: Largest iteration number a record's counts may hold: 10**10 is a 7-day budget (MAX_TIME_BUDGET_S) at 16,500
#: iterations per second, over six times the fastest pace in the shipped records (order-mcmc, ~2,600 per second on
#: one core); a replayed run that had to reach 10**18 would never end.
MAX_COUNT = 10**10
#: Slack on metric bounds and durations for floating-point rounding (a TV of 1 + 1e-16 is a TV of 1).
TOLERANCE = 1e-9
#: The largest finite float: a lower bound of -LARGEST admits every number but -inf.
LARGEST = sys.float_info.max
PROBABILITY = (0.0, 1.0)
NON_NEGATIVE = (0.0, math.inf)
NOT_MINUS_INF = (-LARGEST, math.inf)
#: Closed ranges of the suite's metrics (suite/scoring, problems' task metrics, the runner's walltime).
METRIC_BOUNDS: dict[str, tuple[float, float]] = {
    "model_prob_tv": PROBABILITY,
    "model_prob_max_abs": PROBABILITY,
    "model_prob_missed": PROBABILITY,
    "inclusion_max_abs": PROBABILITY,
    "q_true_k": PROBABILITY,
    "auroc": PROBABILITY,
    "edge_auroc": PROBABILITY,
    "edge_f1": PROBABILITY,
    "model_prob_kl": NON_NEGATIVE,
    "shd": NON_NEGATIVE,
    "expected_shd": NON_NEGATIVE,
    "expected_cpdag_shd": NON_NEGATIVE,
    "brier": NON_NEGATIVE,
    "mmd": NON_NEGATIVE,
    "expected_k": NON_NEGATIVE,
    "k_abs_error": NON_NEGATIVE,
    "walltime_s": (0.0, LARGEST),
    "cross_entropy": NOT_MINUS_INF,
    "neg_elbo": NOT_MINUS_INF,
    "kl_joint": NOT_MINUS_INF,
    "kl_reverse": NOT_MINUS_INF,
}
#: The suite's metrics where higher is better; every other metric of :data:`METRIC_BOUNDS` is lower-is-better. The
#: report takes a known metric's direction from here, never from a record, so a planted record cannot turn a
#: leaderboard upside down (issue 51, H1); a plug-in problem's own metrics take theirs from its records' facts.
HIGHER_IS_BETTER: frozenset[str] = frozenset({"q_true_k", "auroc", "edge_auroc", "edge_f1"})
#: Known metrics that rank nothing (a summary of the estimate, not an error): no direction is checked for them.
DESCRIPTIVE_METRICS: frozenset[str] = frozenset({"expected_k"})
#: The suite's metrics where lower is better.
LOWER_IS_BETTER: frozenset[str] = frozenset(METRIC_BOUNDS) - HIGHER_IS_BETTER - DESCRIPTIVE_METRICS


def metric_is_higher_better(metric: str, stated: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether higher is better for ``metric``: the suite's registry for its own metrics, else ``stated`` (facts).

    Example:
        >>> metric_is_higher_better("model_prob_tv", {"model_prob_tv"}), metric_is_higher_better("edge_f1")
        (False, True)
    """
    if metric in HIGHER_IS_BETTER or metric in LOWER_IS_BETTER:
        return metric in HIGHER_IS_BETTER
    return metric in stated


def _directions(names: Any) -> str | None:
    """A list of metric names none of which is one of the suite's lower-is-better metrics."""
    why = _list_of(_optional(str, "a metric name"))(names)
    if why is not None or names is None:
        return why
    wrong = sorted(set(names) & LOWER_IS_BETTER)
    return f"names {', '.join(wrong)}, where lower is better" if wrong else None


#: Statuses a record on disk may have (:data:`suite.results.records.STATUSES`).
STATUSES = ("ok", "failed", "not_applicable")
CONFIG_HASH = re.compile(r"[0-9A-Za-z]{1,64}")
SHA256 = re.compile(r"[0-9a-f]{64}")

Check = Callable[[Any], str | None]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(kind: type | tuple[type, ...], what: str) -> Check:
    """A check that a value is null or of ``kind`` (``what`` names it in the message)."""

    def check(value: Any) -> str | None:
        if value is None or (isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)):
            return None
        return f"is a {type(value).__name__}, not {what}"

    return check


def _count(value: Any, limit: float = MAX_COUNT) -> str | None:
    if not _integer(value) or not 0 <= value <= limit:
        return f"is {value!r}, not a whole number in [0, {limit:.0e}]"
    return None


def _optional_count(value: Any) -> str | None:
    return None if value is None else _count(value)


def _duration(value: Any) -> str | None:
    if value is None or (_number(value) and math.isfinite(value) and value >= -TOLERANCE):
        return None
    return f"is {value!r}, not a finite number of seconds >= 0"


def in_bounds(metric: str, value: Any) -> str | None:
    """Why ``value`` cannot be a value of ``metric`` (not a number, or outside :data:`METRIC_BOUNDS`), or None."""
    if value is None:
        return None
    if not _number(value):
        return f"is a {type(value).__name__}, not a number"
    if math.isnan(value):
        return None  # computed as NaN: shown as such, never ranked
    low, high = METRIC_BOUNDS.get(metric, (-math.inf, math.inf))
    if not low - TOLERANCE <= value <= high + TOLERANCE:
        opening = "(-inf" if low == -LARGEST else f"[{low:g}"
        closing = "inf)" if high == LARGEST else f"{high:g}]"
        return f"is {value!r}, outside {opening}, {closing}"
    return None


def _metrics(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"is a {type(value).__name__}, not an object"
    for name, estimate in value.items():
        if not isinstance(estimate, dict):
            return f"[{name!r}] is a {type(estimate).__name__}, not {{value, se}}"
        why = in_bounds(name, estimate.get("value"))
        if why is not None:
            return f"[{name!r}] value {why}"
        se = estimate.get("se")
        if se is not None and not (_number(se) and (math.isnan(se) or se >= 0)):
            return f"[{name!r}] se is {se!r}, not a number >= 0"
    return None


def _list_of(check: Check) -> Check:
    """A check that a value is null or a list whose every item passes ``check``."""

    def check_list(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, list):
            return f"is a {type(value).__name__}, not a list"
        for position, item in enumerate(value):
            why = check(item)
            if why is not None:
                return f"[{position}] {why}"
        return None

    return check_list


def _real(value: Any) -> str | None:
    return None if value is None or _number(value) else f"is a {type(value).__name__}, not a number"


def _probability(value: Any) -> str | None:
    return "is null, not a probability" if value is None else in_bounds("model_prob_tv", value)


def _seconds(value: Any) -> str | None:
    return "is null, not a number of seconds" if value is None else _duration(value)


def _model_id(value: Any) -> str | None:
    return None if isinstance(value, str) else f"is a {type(value).__name__}, not a model id (str)"


def _standard_error(value: Any) -> str | None:
    if value is None or (_number(value) and (math.isnan(value) or value >= 0)):
        return None
    return f"is {value!r}, not a number >= 0"


def _fields(checks: dict[str, Check]) -> Check:
    """A check that a value is null or an object whose listed keys (where present) pass their checks."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            return f"is a {type(value).__name__}, not an object"
        for key, field_check in checks.items():
            why = field_check(value.get(key))
            if why is not None:
                return f"[{key!r}] {why}"
        return None

    return check


def _budget_seconds(value: Any) -> str | None:
    if value is None or (_number(value) and 0 < value <= MAX_TIME_BUDGET_S):
        return None
    return f"is {value!r}, not a number of seconds in (0, {MAX_TIME_BUDGET_S:g}]"


def _counts(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"is a {type(value).__name__}, not an object"
    for name, count in value.items():
        why = _list_of(_count)(count) if name == "snapshots" else _count(count)
        if why is not None:
            return f"[{name!r}] {why}"
    return None


def _trace(value: Any) -> str | None:
    why = _fields(
        {
            "seconds": _list_of(_seconds),
            "iterations": _list_of(_count),
            "elbo": _list_of(_real),
            "metrics": _optional(dict, "an object"),
        }
    )(value)
    if why is not None or value is None:
        return why
    length = len(value.get("seconds") or [])
    for name, values in (value.get("metrics") or {}).items():
        why = _list_of(lambda v, name=name: in_bounds(name, v))(values)
        if why is not None:
            return f"['metrics'][{name!r}]{why}"
        if values is not None and len(values) != length:
            return f"['metrics'][{name!r}] has {len(values)} values for {length} snapshot times"
    for name in ("iterations", "elbo"):
        if value.get(name) is not None and len(value[name]) != length:
            return f"[{name!r}] has {len(value[name])} values for {length} snapshot times"
    return None


def _model_probs(value: Any) -> str | None:
    why = _fields(
        {
            "id": _list_of(_model_id),
            "index": _optional(list, "a list"),
            "estimate": _list_of(_probability),
            "truth": _list_of(_probability),
            "se": _list_of(_standard_error),
            "estimate_total": _real,
        }
    )(value)
    if why is not None or value is None:
        return why
    lengths = {key: len(value[key]) for key in ("id", "index", "estimate", "truth", "se") if value.get(key) is not None}
    if len(set(lengths.values())) > 1:
        return "lists of different lengths: " + ", ".join(f"{key} {n}" for key, n in lengths.items())
    return None


def _draws_path(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        return f"is {value!r}, not a path"
    path = PurePosixPath(value.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or re.match(r"[A-Za-z]:", value):
        return f"is {value!r}, not a path inside the results folder"
    return None


def _sha256(value: Any) -> str | None:
    return None if value is None or (isinstance(value, str) and SHA256.fullmatch(value)) else f"is {value!r}"


def _sweep(value: Any) -> str | None:
    if value is None or (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        return None
    return f"is {value!r}, not [name, x]"


def _numbers_by_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(_number(v) for v in value.values()):
        return "is not an object of numbers"
    return None


def _table_by_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or any(_numbers_by_name(row) or row is None for row in value.values()):
        return "is not an object of objects of numbers"
    return None


def _config_hash(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and CONFIG_HASH.fullmatch(value)):
        return None
    return f"is {value!r}, not a hash of letters and digits"


def _status(value: Any) -> str | None:
    return None if value in STATUSES else f"is {value!r}, not one of {', '.join(STATUSES)}"


def _seed(value: Any) -> str | None:
    return _count(value, limit=2**63 - 1)


_OPTIONAL_STR = _optional(str, "a str")
_OPTIONAL_OBJECT = _optional(dict, "an object")
_OPTIONAL_BOOL = _optional(bool, "true or false")
#: The check of each top-level field a reader uses.
FIELDS: dict[str, Check] = {
    "problem": name_problem,  # parts of file names and labels: never a path or markup (suite.core.names)
    "method": name_problem,
    "seed": _seed,
    "status": _status,
    "reason": _OPTIONAL_STR,
    "metrics": _metrics,
    "config_hash": _config_hash,
    "budget": _fields(
        {
            "profile": _OPTIONAL_STR,
            "time_budget_s": _budget_seconds,
            "num_draws": _optional_count,
            "replayed": _OPTIONAL_BOOL,
            "over_budget": _OPTIONAL_BOOL,
            "clock_s": _duration,
            "allowance_s": _duration,
        }
    ),
    "counts": _counts,
    "trace": _trace,
    "timings_s": lambda value: _counts_like(value, _duration),
    "model_probs": _model_probs,
    "draws": _fields({"path": _draws_path, "num": _optional_count, "sha256": _sha256, "log_q": _OPTIONAL_BOOL}),
    "reference": _fields(
        {
            "kind": _OPTIONAL_STR,
            "size": _OPTIONAL_STR,
            "size_wanted": _OPTIONAL_STR,
            "size_mismatch": _OPTIONAL_BOOL,
            "file": _OPTIONAL_STR,
            "search_folder": _OPTIONAL_STR,
            "search_folder_entry": _optional_count,
            "search_folder_path": _OPTIONAL_STR,
            "path": _OPTIONAL_STR,
            "sha256": _sha256,
            "json_sha256": _sha256,
            "arrays_sha256": _sha256,
        }
    ),
    "code": _OPTIONAL_OBJECT,
    "problem_facts": _fields(
        {
            "version": _optional_count,
            "description": _OPTIONAL_STR,
            "main_metric": _OPTIONAL_STR,
            "higher_is_better": _directions,
            "sweep": _sweep,
            "num_models": _optional_count,
            "reported_neg_elbo": _numbers_by_name,
            "reported_source": _OPTIONAL_STR,
            "reported_dag_table": _table_by_name,
        }
    ),
    "problem_config": _OPTIONAL_OBJECT,
    "run_config": _OPTIONAL_OBJECT,
    "method_options": _OPTIONAL_OBJECT,
    "method_settings": _OPTIONAL_OBJECT,
    "environment": _OPTIONAL_OBJECT,
    "parallel": _OPTIONAL_OBJECT,
    "diagnostics": _OPTIONAL_OBJECT,
    "metrics_scope": _OPTIONAL_STR,
    "started_at": _OPTIONAL_STR,
    "finished_at": _OPTIONAL_STR,
    "plot": _OPTIONAL_STR,
    "traceback": _OPTIONAL_STR,
    "num_gold_draws": _optional_count,
    "peak_memory_bytes": lambda value: None if value is None else _count(value, limit=2**63 - 1),
    "schema": _optional_count,
}


def _counts_like(value: Any, check: Check) -> str | None:
    """Null, or an object whose every value passes ``check`` (timings by phase)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"is a {type(value).__name__}, not an object"
    for name, item in value.items():
        why = check(item)
        if why is not None:
            return f"[{name!r}] {why}"
    return None


def schema_problem(record: dict[str, Any]) -> str | None:
    """Why ``record`` breaks the schema (the first field found, and how), or None when it keeps to it.

    Example:
        >>> schema_problem({"seed": 0, "status": "ok", "metrics": {"model_prob_tv": {"value": 1.5, "se": None}}})
        "metrics['model_prob_tv'] value is 1.5, outside [0, 1]"
    """
    for name, check in FIELDS.items():
        if name in record:
            why = check(record[name])
            if why is not None:
                return f"{name}{why}" if why.startswith("[") else f"{name} {why}"
    return None
