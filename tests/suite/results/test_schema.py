"""The metric table of ``suite.results.schema``: every known metric has a range, a direction and a meaning."""

from __future__ import annotations

from suite.results.schema import (
    DESCRIPTIVE_METRICS,
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    METRIC_BOUNDS,
    METRIC_MEANINGS,
    in_bounds,
)


def test_every_known_metric_has_a_meaning_and_one_direction() -> None:
    assert set(METRIC_MEANINGS) == set(METRIC_BOUNDS)
    assert all(meaning and "\n" not in meaning for meaning in METRIC_MEANINGS.values())
    assert HIGHER_IS_BETTER | LOWER_IS_BETTER | DESCRIPTIVE_METRICS == set(METRIC_BOUNDS)
    assert not HIGHER_IS_BETTER & LOWER_IS_BETTER


def test_bounds_refuse_what_no_metric_can_be() -> None:
    assert in_bounds("model_prob_tv", 0.5) is None and in_bounds("model_prob_tv", 1.5)
    assert in_bounds("cross_entropy", float("-inf")) and in_bounds("cross_entropy", -3.0) is None
