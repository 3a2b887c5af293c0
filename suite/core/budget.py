"""The budget rules every run is held to, as numbers (:mod:`suite.core.context` explains them; no torch here, so
that the report layer can judge records by the same rule)."""

from __future__ import annotations

import math

#: Share of the method's own compute that snapshots may take for free (paused seconds beyond it count as compute).
FREE_SNAPSHOT_SHARE = 0.05
#: A run's clock may pass its budget by this share of the budget (or OVER_BUDGET_FLOOR_S) before it is over budget.
OVER_BUDGET_SHARE = 0.10
OVER_BUDGET_FLOOR_S = 0.5
#: Upper bound of a time budget: 7 days.
MAX_TIME_BUDGET_S = 604800.0


class TimeBudget(float):
    """A time budget in seconds that has passed :func:`check_time_budget`; whatever carries one trusts it.

    Made once where a budget enters (``--time-budget``, a ``GridSpec``), it travels through the plan, the run spec
    and the run context without being checked again.
    """

    __slots__ = ()

    def __new__(cls, value: object) -> TimeBudget:
        if isinstance(value, TimeBudget):
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or not (value > 0 and math.isfinite(value)):
            raise ValueError(f"must be a positive number of seconds, got {value!r}")
        if value > MAX_TIME_BUDGET_S:
            raise ValueError(
                f"{value:g} seconds is more than this suite allows ({MAX_TIME_BUDGET_S:.0f} s, 7 days); "
                "use --no-time-budget to run the profile's iteration counts instead"
            )
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return float.__repr__(self)


def check_time_budget(value: object) -> TimeBudget:
    """``value`` as a :class:`TimeBudget`: a positive, finite number of seconds of at most :data:`MAX_TIME_BUDGET_S`.

    The one rule for a budget, wherever one enters (``--time-budget``, a ``GridSpec``, a ``RunContext`` built by
    hand); ValueError names what is wrong. A value that is already a :class:`TimeBudget` is returned as it is.
    """
    return TimeBudget(value)


def budget_allowance_s(budget_s: float) -> float:
    """Seconds a run's clock may pass a budget of ``budget_s`` by: 10% of it, and at least half a second."""
    return max(OVER_BUDGET_SHARE * budget_s, OVER_BUDGET_FLOOR_S)


def is_over_budget(clock_s: float, budget_s: float) -> bool:
    """Whether a run that used ``clock_s`` compute seconds overshot a budget of ``budget_s`` beyond the allowance."""
    return clock_s > budget_s + budget_allowance_s(budget_s)


__all__ = [
    "FREE_SNAPSHOT_SHARE",
    "MAX_TIME_BUDGET_S",
    "OVER_BUDGET_FLOOR_S",
    "OVER_BUDGET_SHARE",
    "TimeBudget",
    "budget_allowance_s",
    "check_time_budget",
    "is_over_budget",
]
