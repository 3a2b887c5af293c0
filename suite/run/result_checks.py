"""Checks of a method's result before it is scored: what a run returns must be a distribution on the problem's space.

:func:`execute <suite.run.runner.execute>` calls :func:`result_problem` on every ``ok`` result, built-in or
plug-in; a result that fails a check is recorded as ``failed`` with the check's reason, which says what is wrong
and by how much. The checks:

- q(m) (``Result.model_probs``) sums to 1 within :data:`TOTAL_TOLERANCE`;
- its probabilities are finite and not negative (below ``-NEGATIVE_TOLERANCE``);
- its model indices, and those of the draws, lie in the problem's model space (shape and range);
- the draws have the saturated shape: ``theta`` is ``[N, dim_max]`` with as many rows as ``model_index``;
- ``log_density`` is not NaN at the method's own draws (at most :data:`DENSITY_CHECK_DRAWS`, evenly spaced).

Two more checks look at the target where the method put its mass (:func:`target_problem`, run by ``execute`` after
the checks above, with the gold-standard draws; docs/limitations.md, "Targets non-finite in part of the space"):

- the target's log density is not NaN or +inf, and not -inf at every point checked, in any model the method gives
  probability (q(m) > :data:`MODEL_CHECK_MIN_PROB`; the :data:`MODEL_CHECK_MODELS` most probable), at up to
  :data:`POINTS_PER_MODEL` of the method's draws and as many gold-standard draws of each such model;
- a method with between-model moves (one that reports ``between_accepted`` or ``accept_between`` in its
  diagnostics) on a space of more than one model moved its chains between models at least once
  (:func:`mixing_problem`), unless its estimate is a single model.
"""

from __future__ import annotations

import math

import torch

from suite.core.method import Result
from suite.core.model_space import model_keys
from suite.core.problem import Problem
from suite.core.tensor_ops import unique_rows
from suite.core.types import Draws

#: Largest |1 - sum of q(m)| of a normalised estimate.
TOTAL_TOLERANCE = 1e-6
#: Probabilities below -NEGATIVE_TOLERANCE are negative (rounding in a subtraction may leave -1e-17).
NEGATIVE_TOLERANCE = 1e-12
#: Own draws at which the method's log density is checked for NaN.
DENSITY_CHECK_DRAWS = 2048
#: Models with q(m) above this are checked for a non-finite target (:func:`target_problem`).
MODEL_CHECK_MIN_PROB = 1e-12
#: At most this many of them, the most probable first (a q(m) over 2^20 models costs no more than one over 8).
MODEL_CHECK_MODELS = 256
#: Points per checked model: up to this many of the method's draws of the model and as many gold-standard draws.
#: A NaN region holding 5% of a model is missed with probability 0.95^96 < 1% (4 + 4 points missed it 2 times in 3).
POINTS_PER_MODEL = 48
#: Diagnostics keys of a method with between-model moves: accepted moves to another model over the whole run
#: (burn-in included; preferred), else the acceptance rate the method reports.
BETWEEN_ACCEPTED = "between_accepted"
ACCEPT_BETWEEN = "accept_between"


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


def _first_per_model(model_index: torch.Tensor, checked: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``model_index`` (at most ``count`` per model, spread over the batch) whose model is in ``checked``.

    Returns the rows' positions and the position in ``checked`` of each one's model. Vectorised: one ``unique`` over
    the models of both, one stable sort; no loop over models or draws.
    """
    n, m = model_index.shape[0], checked.shape[0]
    if n == 0 or m == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty
    # A fixed permutation spreads the picks over the batch (MCMC draws of a model come in runs of one chain).
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    both = torch.cat([checked.to(torch.int64), model_index[order].to(torch.int64)])
    _, inverse = unique_rows(both, return_inverse=True)
    slot_of = torch.full((int(inverse.max()) + 1,), -1, dtype=torch.long)
    slot_of[inverse[:m]] = torch.arange(m)
    slot = slot_of[inverse[m:]]
    keep = (slot >= 0).nonzero().flatten()
    slot = slot[keep]
    sorted_slot, by_slot = torch.sort(slot, stable=True)
    rank = torch.arange(len(sorted_slot)) - torch.searchsorted(sorted_slot, sorted_slot)
    chosen = by_slot[rank < count]
    return order[keep[chosen]], slot[chosen]


def _checked_models(result: Result) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The models whose target is checked, with their q(m): the most probable of q(m) (or of the draws' models)."""
    if result.model_probs is not None:
        index, prob = result.model_probs.index.detach().cpu(), result.model_probs.prob.detach().to("cpu", torch.float64)
    elif result.draws is not None and len(result.draws) > 0:
        drawn = result.draws.model_index.detach().cpu()
        index, counts = unique_rows(drawn, return_counts=True)
        prob = counts.to(torch.float64) / counts.sum()
    else:
        return None
    given = (prob > MODEL_CHECK_MIN_PROB).nonzero().flatten()
    top = given[torch.topk(prob[given], min(MODEL_CHECK_MODELS, len(given))).indices]
    return index[top], prob[top]


def target_problem(
    problem: Problem, result: Result, gold: Draws | None, device: torch.device, dtype: torch.dtype
) -> str | None:
    """Why the target is unusable in a model the result gives probability (None when it is finite there).

    Checks the :data:`MODEL_CHECK_MODELS` most probable models with q(m) > :data:`MODEL_CHECK_MIN_PROB` (of
    ``result.model_probs``, else of its draws), at up to :data:`POINTS_PER_MODEL` of the result's draws of each and
    as many of the ``gold`` draws: log pi must not be NaN or +inf at any of them, nor -inf at all of a model's
    (q puts mass where the target has none). One batch of at most 2 x 256 x 48 evaluations. A model without any
    draw (the method's or gold) cannot be checked here.
    """
    checked = _checked_models(result)
    if checked is None:
        return None
    models, probs = checked
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (model indices, theta, slot in models)
    for draws in (result.draws, gold):
        if draws is None or len(draws) == 0:
            continue
        rows, slot = _first_per_model(draws.model_index.detach().cpu(), models, POINTS_PER_MODEL)
        if len(rows):
            theta = draws.theta[rows.to(draws.theta.device)]
            parts.append((draws.model_index.detach().cpu()[rows], theta.to(device, dtype), slot))
    if not parts:
        return None
    model_index = torch.cat([p[0] for p in parts]).to(device)
    theta = torch.cat([p[1] for p in parts])
    slot = torch.cat([p[2] for p in parts])
    with torch.no_grad():
        log_pi = problem.log_joint(model_index, theta).detach().to("cpu", torch.float64).reshape(-1)
    nan, plus_inf, zero = torch.isnan(log_pi), log_pi == math.inf, log_pi == -math.inf
    checked_per_model = torch.bincount(slot, minlength=len(models))
    bad_per_model = torch.bincount(slot[nan | plus_inf], minlength=len(models))
    nan_per_model = torch.bincount(slot[nan], minlength=len(models))
    zero_per_model = torch.bincount(slot[zero], minlength=len(models))
    keys = model_keys(models)

    def name(s: int) -> str:
        try:
            return repr(problem.model_space.identifier(keys[s]))
        except Exception:
            return str(keys[s])

    bad = (bad_per_model > 0).nonzero().flatten().tolist()
    if bad:
        s = bad[0]
        more = f" (and in {len(bad) - 1} more such models)" if len(bad) > 1 else ""
        value = "NaN" if int(nan_per_model[s]) == int(bad_per_model[s]) else "NaN or +inf"
        value = "+inf" if int(nan_per_model[s]) == 0 else value
        return (
            f"the target's log density is {value} at {int(bad_per_model[s])} of {int(checked_per_model[s])} "
            f"checked points of model {name(s)}, to which the method gives q(m) = {float(probs[s]):.3g}{more}"
        )
    empty = ((zero_per_model == checked_per_model) & (checked_per_model > 0)).nonzero().flatten().tolist()
    if empty:
        s = empty[0]
        more = f" (and {len(empty) - 1} more such models)" if len(empty) > 1 else ""
        return (
            f"the target's log density is -inf (zero density) at all {int(checked_per_model[s])} checked points of "
            f"model {name(s)}, to which the method gives q(m) = {float(probs[s]):.3g}{more}"
        )
    return None


def _models_given_probability(result: Result) -> int:
    """How many models the result gives probability (q(m) > 0), or that its draws visit when it has no q(m)."""
    if result.model_probs is not None:
        return int((result.model_probs.prob.detach() > 0).sum())
    if result.draws is not None and len(result.draws) > 0:
        drawn = result.draws.model_index.detach().cpu()
        return int(unique_rows(drawn).shape[0])
    return 0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def mixing_problem(problem: Problem, result: Result) -> str | None:
    """Why the result's chains say nothing about the model probabilities: they never moved between models.

    Applies to a method with between-model moves, that is one whose diagnostics report ``between_accepted`` (moves
    accepted over the whole run, burn-in included) or else ``accept_between`` (its acceptance rate), on a space of
    more than one model. When that is exactly 0 and the estimate spreads over more than one model, the estimate is
    where the chains started (a stuck chain per model), not anything this run learned: failed. An estimate of a
    single model is left to the metrics (the chains may all have started in the one model that holds the mass).
    """
    diagnostics = result.diagnostics if isinstance(result.diagnostics, dict) else {}
    if problem.num_models == 1:
        return None
    key = BETWEEN_ACCEPTED if BETWEEN_ACCEPTED in diagnostics else ACCEPT_BETWEEN
    value = _number(diagnostics.get(key))
    if value is None or value != 0:
        return None
    spread = _models_given_probability(result)
    if spread < 2:
        return None
    proposals = _number(diagnostics.get("between_proposals"))
    made = f" of {int(proposals)} proposals" if proposals is not None else ""
    return (
        f"the chains never moved between models (between-model moves accepted: 0{made}, {key} = 0), so the "
        f"estimate over {spread} models is where they started"
    )
