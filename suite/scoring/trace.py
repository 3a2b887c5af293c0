"""Score a run's running estimates (its trace) against the ground truth with the cheap metrics."""

from __future__ import annotations

import math
from typing import Any

from suite.core.context import Snapshot
from suite.core.problem import Problem
from suite.scoring import metrics

#: Model-probability metrics scored at every snapshot (point values: no reference bootstrap per point).
TRACE_PROB_METRICS = ("model_prob_tv", "model_prob_kl", "model_prob_max_abs")


def _number(value: float) -> float | None:
    """JSON-safe: NaN becomes None; +-inf stay (the record writer spells them)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def score_trace(problem: Problem, snapshots: list[Snapshot], scope: str = "all") -> dict[str, Any]:
    """The trace of a run as stored in its record: seconds, iterations, ELBOs and metric values per snapshot.

    Model-probability errors (``scope="all"`` and a known truth) and the problem's task metrics are scored; a
    metric a snapshot cannot be scored on (no estimate yet) is None at that point. Cross-entropy and -ELBO
    against the truth stay end-of-run metrics.
    """
    truth = problem.reference_model_probs() if scope == "all" else None
    values: dict[str, list[float | None]] = {}
    for position, snap in enumerate(snapshots):
        point: dict[str, float] = {}
        probs = snap.estimate.model_probs
        if truth is not None and probs is not None and problem.num_models != 1:
            for name, estimate in metrics.model_prob_metrics_point(truth, probs).items():
                if name in TRACE_PROB_METRICS:
                    point[name] = estimate
        for name, estimate in problem.task_metrics(probs, snap.estimate.draws).items():
            point[name] = estimate.value
        for name in point.keys() - values.keys():
            values[name] = [None] * position
        for name, column in values.items():
            column.append(_number(point[name]) if name in point else None)
    return {
        "seconds": [snap.seconds for snap in snapshots],
        "iterations": [snap.iteration for snap in snapshots],
        "elbo": [snap.estimate.elbo for snap in snapshots],
        "metrics": values,
    }
