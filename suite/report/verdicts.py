"""Verdicts over seeds: a mean with its 95% interval, a 95% rank interval, and which methods tie with the best.

The contract: given each method's per-seed values of a problem's ranked metric, say only what the seeds support.

- **Interval of a mean**: Student's t over the seeds, ``mean ± t_{0.975, n-1} s / sqrt(n)``. One seed, or a
  non-finite value, gives no interval.
- **Tied with the best** (``tied_with_best``): the method with the best mean, and every method that is not
  separated from it. Separated means all three of: Welch's two-sample t interval of the difference of means at
  95% excludes zero; the difference exceeds the reference's own Monte Carlo error of the metric (the larger of
  the two methods' ``se``: a difference the ground truth cannot resolve is a tie); and the method's rank
  interval does not reach 1. A method with one seed cannot be separated by spread (no variance), except where
  its value or the best's is infinite.
- **Rank interval**: each method's mean is redrawn from its t sampling distribution (``mean + se * T_{n-1}``),
  the methods are ranked again, and the 2.5% and 97.5% quantiles of each method's rank over :data:`RANK_DRAWS`
  redraws are ``rank_low`` and ``rank_high``. A method with one seed takes a uniformly random place in every
  redraw. The redraws are seeded from the problem's name, so a report is reproducible byte for byte.

Why t and not a bootstrap over seeds: at 3 seeds a bootstrap has at most 10 distinct resamples and is too narrow.
Assumptions, power and a worked example: docs/metrics.md, "How verdicts are made".
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Confidence level of every interval and test.
LEVEL = 0.95
#: Redraws behind a rank interval.
RANK_DRAWS = 2000


def _t_quantile(df: float) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.5 + LEVEL / 2, df))


@dataclass(frozen=True)
class Scores:
    """One method's per-seed values of the ranked metric, and the reference's Monte Carlo error of that metric."""

    values: tuple[float, ...]
    reference_se: float = 0.0

    @property
    def seeds(self) -> int:
        """How many seeds have a value."""
        return len(self.values)

    @property
    def mean(self) -> float:
        """Mean over seeds (NaN without values; infinite when a value is)."""
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def se(self) -> float:
        """Standard error of the mean over seeds (NaN for one seed or a non-finite value)."""
        v = np.asarray(self.values, dtype=float)
        if len(v) < 2 or not np.isfinite(v).all():
            return math.nan
        with np.errstate(over="ignore"):  # values near the float limit: an infinite SE
            return float(np.std(v, ddof=1) / math.sqrt(len(v)))


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean over seeds and its 95% Student-t interval (NaN bounds without one).

    Example:
        >>> [round(x, 3) for x in mean_interval([1.0, 2.0, 3.0])]
        [2.0, -0.484, 4.484]
    """
    scores = Scores(tuple(float(v) for v in values))
    mean, se = scores.mean, scores.se
    if math.isnan(se):
        return mean, math.nan, math.nan
    half = _t_quantile(scores.seeds - 1) * se
    return mean, mean - half, mean + half


def difference_interval(a: Scores, b: Scores) -> tuple[float, float, float]:
    """(difference, low, high): mean(b) - mean(a) with Welch's 95% interval (NaN bounds where a side has no spread)."""
    difference = b.mean - a.mean
    if math.isnan(a.se) or math.isnan(b.se):
        return difference, math.nan, math.nan
    va, vb = a.se**2, b.se**2
    if va + vb == 0.0:
        return difference, difference, difference
    df = (va + vb) ** 2 / (va**2 / (a.seeds - 1) + vb**2 / (b.seeds - 1))
    half = _t_quantile(df) * math.sqrt(va + vb)
    return difference, difference - half, difference + half


def separated(a: Scores, b: Scores) -> bool:
    """Whether Welch's 95% interval separates the means of ``a`` and ``b``, beyond the reference's error."""
    if not a.values or not b.values:
        return False
    if not (math.isfinite(a.mean) and math.isfinite(b.mean)):
        return a.mean != b.mean and not (math.isnan(a.mean) or math.isnan(b.mean))
    difference, low, high = difference_interval(a, b)
    if math.isnan(low) or low <= 0.0 <= high:
        return False
    return abs(difference) > max(a.reference_se, b.reference_se, 0.0)


def _order_key(mean: float, lower_is_better: bool) -> float:
    return mean if lower_is_better else -mean


def rank_draws(scores: Mapping[str, Scores], lower_is_better: bool, seed: int) -> tuple[list[str], np.ndarray]:
    """The methods with values, and their ranks (1 = best) in each of :data:`RANK_DRAWS` redraws (see module)."""
    names = [name for name, s in scores.items() if s.values and not math.isnan(s.mean)]
    rng = np.random.default_rng(seed)
    known = [n for n in names if not math.isnan(scores[n].se) or not math.isfinite(scores[n].mean)]
    unknown = [n for n in names if n not in known]
    draws = np.empty((RANK_DRAWS, len(known)))
    for j, name in enumerate(known):
        s = scores[name]
        key = _order_key(s.mean, lower_is_better)
        if math.isnan(s.se) or s.se == 0.0:
            draws[:, j] = key
        else:
            draws[:, j] = key + s.se * rng.standard_t(s.seeds - 1, size=RANK_DRAWS)
    # rank 1 = smallest key; equal keys share the better rank
    ranks = ((draws[:, None, :] < draws[:, :, None]).sum(axis=2) + 1).astype(int)
    for _ in unknown:  # insert at a uniform place among the methods ranked so far
        place = rng.integers(1, ranks.shape[1] + 2, size=RANK_DRAWS)
        ranks = np.where(ranks >= place[:, None], ranks + 1, ranks)
        ranks = np.concatenate([ranks, place[:, None]], axis=1)
    return known + unknown, ranks


def rank_intervals(scores: Mapping[str, Scores], lower_is_better: bool, seed: int) -> dict[str, tuple[int, int]]:
    """Per method with values, its 95% rank interval (1 = best) from :func:`rank_draws`."""
    names, ranks = rank_draws(scores, lower_is_better, seed)
    if not names:
        return {}
    low = np.quantile(ranks, (1 - LEVEL) / 2, axis=0, method="lower")
    high = np.quantile(ranks, 1 - (1 - LEVEL) / 2, axis=0, method="higher")
    return {name: (int(lo), int(hi)) for name, lo, hi in zip(names, low, high, strict=True)}


def problem_seed(problem: str) -> int:
    """The seed of a problem's rank redraws (from its name, so a report is reproducible)."""
    return zlib.crc32(problem.encode())


@dataclass(frozen=True)
class Verdict:
    """One method's row of a verdict: mean and interval, rank interval, and whether it ties with the best."""

    method: str
    seeds: int
    mean: float
    ci_low: float
    ci_high: float
    rank_low: int | None
    rank_high: int | None
    tied_with_best: bool


def verdicts(scores: Mapping[str, Scores], lower_is_better: bool, seed: int) -> list[Verdict]:
    """Every method's :class:`Verdict`, best mean first (methods without a value last, never tied with the best)."""
    ranks = rank_intervals(scores, lower_is_better, seed)

    def order(name: str) -> tuple[bool, float, str]:
        mean = scores[name].mean
        return math.isnan(mean), 0.0 if math.isnan(mean) else _order_key(mean, lower_is_better), name

    names = sorted(scores, key=order)
    best = scores[names[0]] if names and not math.isnan(scores[names[0]].mean) else None
    out = []
    for name in names:
        s = scores[name]
        mean, low, high = mean_interval(s.values) if s.values else (math.nan, math.nan, math.nan)
        rank = ranks.get(name)
        tied = best is not None and bool(s.values) and not math.isnan(s.mean)
        tied = tied and ((rank is not None and rank[0] == 1) or not separated(best, s))
        out.append(Verdict(name, s.seeds, mean, low, high, rank[0] if rank else None, rank[1] if rank else None, tied))
    return out


def tie_text(rows: Sequence[Verdict]) -> str:
    """The sentence naming the best: ``best: `a` (separated; 3 seeds)`` or ``tied: `a`, `b` (3 seeds each)``.

    Example:
        >>> tie_text([Verdict("a", 3, 0.1, 0.0, 0.2, 1, 2, True), Verdict("b", 3, 0.2, 0.1, 0.3, 1, 2, True)])
        'tied for best: `a`, `b` (3 seeds each)'
    """
    group = [row for row in rows if row.tied_with_best]
    if not group:
        return "no method has a value"
    seeds = sorted({row.seeds for row in group})
    counted = f"{seeds[0]} seed{'s' if seeds[0] != 1 else ''}" if len(seeds) == 1 else None
    if len(group) == 1:
        return f"best: `{group[0].method}` (separated from the rest; {counted or f'{group[0].seeds} seeds'})"
    names = ", ".join(f"`{row.method}`" for row in group)
    each = f"{counted} each" if counted else "seeds: " + ", ".join(str(row.seeds) for row in group)
    return f"tied for best: {names} ({each})"
