"""The suite's metrics: their ranges and directions, which every record's metrics are checked against on read.

:func:`in_bounds` says whether a value can be a value of a metric (a total variation of -0.2 or 1.5, or a
cross-entropy of -inf, is no result to rank); :data:`HIGHER_IS_BETTER` and :data:`LOWER_IS_BETTER` give the
report a known metric's direction, never a record. The record format itself (every field, its type and range) is
:mod:`suite.results.record_model`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

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
#: What each metric of :data:`METRIC_BOUNDS` measures, in a few words (figure captions; docs/metrics.md in full).
METRIC_MEANINGS: dict[str, str] = {
    "model_prob_tv": "total variation between q(m) and the true p(m | D)",
    "model_prob_max_abs": "largest error of one model's probability",
    "model_prob_missed": "posterior mass on models q gives probability 0",
    "inclusion_max_abs": "largest error of one variable's inclusion probability",
    "q_true_k": "probability q gives the true number of components",
    "auroc": "area under the ROC curve of the edge probabilities",
    "edge_auroc": "area under the ROC curve of the edge probabilities",
    "edge_f1": "F1 score of the edges",
    "model_prob_kl": "KL(p || q) over models",
    "shd": "structural Hamming distance to the true graph",
    "expected_shd": "expected structural Hamming distance to the true graph",
    "expected_cpdag_shd": "expected structural Hamming distance between CPDAGs (E-CPDAG-SHD)",
    "brier": "Brier score of the edge probabilities",
    "mmd": "maximum mean discrepancy to the exact DAG posterior",
    "expected_k": "expected number of components",
    "k_abs_error": "absolute error of the number of components",
    "walltime_s": "wall-clock seconds",
    "cross_entropy": "-E_p[log q(m, theta)] over gold draws, in nats",
    "neg_elbo": "negative evidence lower bound, E_q[log q - log p~]",
    "kl_joint": "KL(p || q) over (m, theta): cross-entropy minus the exact entropy",
    "kl_reverse": "KL(q || p): -ELBO plus the exact log evidence",
}
#: The suite's metrics where higher is better; every other metric of :data:`METRIC_BOUNDS` is lower-is-better. The
#: report takes a known metric's direction from here, never from a record, so a planted record cannot turn a
#: leaderboard upside down (issue 51, H1); a plug-in problem's own metrics take theirs from its records' facts.
HIGHER_IS_BETTER: frozenset[str] = frozenset({"q_true_k", "auroc", "edge_auroc", "edge_f1"})
#: Known metrics that rank nothing (a summary of the estimate, not an error): no direction is checked for them.
DESCRIPTIVE_METRICS: frozenset[str] = frozenset({"expected_k"})
#: The suite's metrics where lower is better.
LOWER_IS_BETTER: frozenset[str] = frozenset(METRIC_BOUNDS) - HIGHER_IS_BETTER - DESCRIPTIVE_METRICS


#: Metrics measured in nats whose per-run estimate carries its own Monte Carlo error (``se``).
NATS_METRICS: frozenset[str] = frozenset({"neg_elbo", "cross_entropy", "kl_joint", "kl_reverse"})
#: An estimate in nats is unreliable when its own Monte Carlo error is over both of these: it cannot resolve the
#: differences of a nat or less that the leaderboards compare, nor its own size to 10% (a few draws dominate it).
UNRELIABLE_SE_NATS = 1.0
UNRELIABLE_SE_SHARE = 0.1


def is_unreliable(metric: str, value: Any, se: Any) -> bool:
    """Whether a run's estimate of ``metric`` is dominated by its own Monte Carlo error (shown, never starred).

    >>> is_unreliable("neg_elbo", 1901.2, 1819.3), is_unreliable("neg_elbo", 32.5, 0.4)
    (True, False)
    >>> is_unreliable("model_prob_tv", 0.1, 2.0)  # not in nats: its se is the reference's error
    False
    """
    if metric not in NATS_METRICS or not (_number(value) and _number(se)):
        return False
    return math.isfinite(value) and se > UNRELIABLE_SE_NATS and se > UNRELIABLE_SE_SHARE * abs(value)


def metric_is_higher_better(metric: str, stated: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether higher is better for ``metric``: the suite's registry for its own metrics, else ``stated`` (facts).

    Example:
        >>> metric_is_higher_better("model_prob_tv", {"model_prob_tv"}), metric_is_higher_better("edge_f1")
        (False, True)
    """
    if metric in HIGHER_IS_BETTER or metric in LOWER_IS_BETTER:
        return metric in HIGHER_IS_BETTER
    return metric in stated


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
