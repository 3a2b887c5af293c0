"""Checks of a method's result before it is scored: what a run returns must be a distribution on the problem's space.

:func:`execute <suite.run.runner.execute>` calls :func:`result_problem` on every ``ok`` result, built-in or
plug-in; a result that fails a check is recorded as ``failed`` with the check's reason, which says what is wrong
and by how much. The checks:

- q(m) (``Result.model_probs``) sums to 1 within :data:`TOTAL_TOLERANCE`;
- its probabilities are finite and not negative (below ``-NEGATIVE_TOLERANCE``);
- its model indices, and those of the draws, lie in the problem's model space (shape and range);
- the draws have the saturated shape: ``theta`` is ``[N, dim_max]`` with as many rows as ``model_index``;
- ``log_density`` is not NaN at the method's own draws (at most :data:`DENSITY_CHECK_DRAWS`, evenly spaced).
"""

from __future__ import annotations

import math

import torch

from suite.core.method import Result
from suite.core.problem import Problem
from suite.core.types import Draws

#: Largest |1 - sum of q(m)| of a normalised estimate.
TOTAL_TOLERANCE = 1e-6
#: Probabilities below -NEGATIVE_TOLERANCE are negative (rounding in a subtraction may leave -1e-17).
NEGATIVE_TOLERANCE = 1e-12
#: Own draws at which the method's log density is checked for NaN.
DENSITY_CHECK_DRAWS = 2048


def _index_problem(problem: Problem, model_index: torch.Tensor, what: str) -> str | None:
    try:
        problem.model_space.check_indices(model_index.detach().cpu())
    except (TypeError, ValueError) as exc:
        return f"{what}: {exc}"
    return None


def model_probs_problem(problem: Problem, result: Result) -> str | None:
    """Why the result's q(m) is not a distribution on the problem's models (None when it is)."""
    probs = result.model_probs
    if probs is None:
        return None
    prob = probs.prob.detach().to("cpu", torch.float64)
    bad = ~torch.isfinite(prob)
    if bad.any():
        return f"q(m) has {int(bad.sum())} non-finite probabilities of {prob.numel()}"
    negative = prob < -NEGATIVE_TOLERANCE
    if negative.any():
        return f"q(m) has {int(negative.sum())} negative probabilities (smallest {float(prob.min()):.3g})"
    total = float(prob.sum())
    if not abs(total - 1.0) <= TOTAL_TOLERANCE:
        return f"q(m) sums to {total:.9g}, not 1 (off by {abs(total - 1.0):.3g} > {TOTAL_TOLERANCE:g})"
    return _index_problem(problem, probs.index, "q(m)'s model indices")


def draws_problem(problem: Problem, draws: Draws | None) -> str | None:
    """Why the result's draws are not draws on the problem's saturated space (None when they are)."""
    if draws is None:
        return None
    theta, model_index = draws.theta, draws.model_index
    if theta.ndim != 2 or theta.shape[-1] != problem.dim_max:
        return f"draws: theta has shape {tuple(theta.shape)}, expected [N, {problem.dim_max}] (dim_max)"
    if model_index.shape[0] != theta.shape[0]:
        return f"draws: {model_index.shape[0]} model indices for {theta.shape[0]} rows of theta"
    if not theta.is_floating_point():
        return f"draws: theta has dtype {theta.dtype}, expected a floating-point dtype"
    return _index_problem(problem, model_index, "draws' model indices")


def evenly_spaced(
    draws: Draws, count: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """At most ``count`` evenly spaced draws (model indices and theta) on ``device``, theta in ``dtype``."""
    n = len(draws)
    pick = torch.linspace(0, n - 1, min(n, count)).round().long()
    model_index = draws.model_index[pick.to(draws.model_index.device)].to(device)
    return model_index, draws.theta[pick.to(draws.theta.device)].to(device, dtype)


def density_problem(result: Result, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the result's log density is unusable at its own draws (None when it is finite or -inf there)."""
    draws = result.draws
    if result.log_density is None or draws is None or len(draws) == 0:
        return None
    m, theta = evenly_spaced(draws, DENSITY_CHECK_DRAWS, device, dtype)
    checked = len(theta)
    with torch.no_grad():
        log_q = result.log_density(m, theta)
    if not isinstance(log_q, torch.Tensor) or tuple(log_q.shape) != (checked,):
        shape = tuple(log_q.shape) if isinstance(log_q, torch.Tensor) else type(log_q).__name__
        return f"log_density returned {shape} for {checked} draws, expected shape ({checked},)"
    nan = torch.isnan(log_q)
    if nan.any():
        return f"log_density is NaN at {int(nan.sum())} of {checked} of the method's own draws"
    if (log_q == math.inf).any():
        return f"log_density is +inf at {int((log_q == math.inf).sum())} of {checked} of the method's own draws"
    return None


def result_problem(problem: Problem, result: Result, device: torch.device, dtype: torch.dtype) -> str | None:
    """The first reason an ``ok`` result cannot be scored, or None (see the module docstring for the checks)."""
    return (
        model_probs_problem(problem, result)
        or draws_problem(problem, result.draws)
        or density_problem(result, device, dtype)
    )
