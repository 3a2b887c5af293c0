"""Execute one (problem, method, seed) run under the harness and evaluate it into a record."""

from __future__ import annotations

import math
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite.core.budget import budget_allowance_s, is_over_budget
from suite.core.context import BudgetTooSmall, RunContext
from suite.core.method import Method, Result
from suite.core.model_space import model_keys
from suite.core.problem import Problem
from suite.core.registry import code_origin
from suite.core.tensor_ops import unique_rows
from suite.core.types import Draws, ModelProbs
from suite.results import draws_file
from suite.results import records as rec
from suite.results.facts import problem_facts
from suite.run.guards import exit_reason
from suite.run.hard_stop import Overtime, hard_limit_s, hard_stop, overtime_reason
from suite.run.harness import PeakMemory, PhaseTimer, environment, warm_up_torch
from suite.run.result_checks import evenly_spaced, mixing_problem, result_problem, target_problem
from suite.scoring import metrics
from suite.scoring.trace import score_trace
from suite.store import references

#: Seed of the gold-standard draws, shared by every method and run seed so that
#: all methods are scored on the same draws.
EVAL_SEED = 20_231_122
#: Models stored per record for plots and inspection (the most probable first).
MAX_MODELS_IN_RECORD = 256
EVAL_CHUNK = 65_536
#: Fresh draws of a method's own density for its negative ELBO (the MIF paper's 100,000).
ELBO_DRAWS = 100_000


def gold_draws(problem: Problem, num_draws: int) -> Draws | None:
    """The gold-standard draws every method is scored on (fixed seed, float64, CPU)."""
    generator = torch.Generator().manual_seed(EVAL_SEED)
    return problem.reference_draws(num_draws, generator)


def _log_density_on(result: Result, draws: Draws, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    values = []
    with torch.no_grad():
        for start in range(0, len(draws), EVAL_CHUNK):
            m = draws.model_index[start : start + EVAL_CHUNK].to(device)
            theta = draws.theta[start : start + EVAL_CHUNK].to(device, dtype)
            values.append(result.log_density(m, theta).to("cpu", torch.float64))
    return torch.cat(values)


def evaluate(
    problem: Problem, result: Result, draws: Draws | None, device: torch.device, dtype: torch.dtype
) -> dict[str, metrics.Estimate]:
    """Metrics of a finished result against the problem's ground truth."""
    out: dict[str, metrics.Estimate] = {}
    if result.metrics_scope == "all":
        truth = problem.reference_model_probs()
        if truth is not None and result.model_probs is not None and problem.num_models != 1:
            out.update(metrics.model_prob_metrics(truth, result.model_probs))
        if draws is not None and result.log_density is not None:
            out["cross_entropy"] = metrics.cross_entropy(_log_density_on(result, draws, device, dtype))
        if result.sample_q is not None and result.log_density is not None:
            out["neg_elbo"] = negative_elbo(problem, result, device, dtype)
        out.update(exact_divergences(problem, out))
    out.update(problem.task_metrics(result.model_probs, result.draws))
    return out


def exact_divergences(problem: Problem, scores: dict[str, metrics.Estimate]) -> dict[str, metrics.Estimate]:
    """KL(pi || q) = cross-entropy - H(pi) and KL(q || pi) = -ELBO + log Z where the problem knows H and log Z.

    Each keeps the standard error of the Monte Carlo estimate it is shifted from (the shift is exact).
    """
    out: dict[str, metrics.Estimate] = {}
    entropy = problem.exact_entropy()
    if entropy is not None and "cross_entropy" in scores:
        cross = scores["cross_entropy"]
        out["kl_joint"] = metrics.Estimate(cross.value - entropy, cross.se)
    log_z = problem.exact_log_evidence()
    if log_z is not None and "neg_elbo" in scores:
        neg_elbo = scores["neg_elbo"]
        out["kl_reverse"] = metrics.Estimate(neg_elbo.value + log_z, neg_elbo.se)
    return out


def negative_elbo(
    problem: Problem, result: Result, device: torch.device, dtype: torch.dtype, num_draws: int = ELBO_DRAWS
) -> metrics.Estimate:
    """-ELBO = E_q[log q(m, theta) - log pi~(m, theta)] over fresh draws of the method's q, with its MC error.

    A draw of q where the target's density is zero (log pi~ = -inf), or whose theta overflowed to a non-finite
    value (an explosive flow), counts as an infinite gap: q puts mass where pi has none (in floating point), so
    KL(q || pi) and the -ELBO are infinite. The estimate is then ``inf``, not the NaN that log q often is there.
    """
    assert result.sample_q is not None and result.log_density is not None
    generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
    gaps = []
    with torch.no_grad():
        for start in range(0, num_draws, EVAL_CHUNK):
            fresh = result.sample_q(min(EVAL_CHUNK, num_draws - start), generator)
            m, theta = fresh.model_index.to(device), fresh.theta.to(device, dtype)
            log_q = result.log_density(m, theta).to("cpu", torch.float64)
            log_joint = problem.log_joint(m, theta).to("cpu", torch.float64)
            outside = (log_joint == -math.inf) | ~torch.isfinite(theta).all(-1).cpu()
            gaps.append(torch.where(outside, math.inf, log_q - log_joint))
    return metrics.mean_estimate(torch.cat(gaps))


def per_model_cross_entropy(
    result: Result, draws: Draws, device: torch.device, dtype: torch.dtype
) -> dict[Any, tuple[float, float | None, int]]:
    """Per model m with gold draws: -E_pi[log q(theta_m | m) | m] (VTI Fig. 2), its standard error and draw count.

    Needs the method's ``conditional_log_density``; a model with one gold draw gets no standard error.
    """
    assert result.conditional_log_density is not None
    conditional = Result(log_density=result.conditional_log_density)
    neg_log_q = -_log_density_on(conditional, draws, device, dtype)
    models, group = unique_rows(draws.model_index, return_inverse=True)
    out: dict[Any, tuple[float, float | None, int]] = {}
    for g, key in enumerate(model_keys(models)):  # one pass per model with gold draws, not per draw
        values = neg_log_q[group == g]
        estimate = metrics.mean_estimate(values) if len(values) > 1 else metrics.Estimate(float(values[0]), None)
        out[key] = (estimate.value, estimate.se, len(values))
    return out


def _model_table(
    problem: Problem,
    estimate: ModelProbs | None,
    cross_entropy: dict[Any, tuple[float, float | None, int]] | None = None,
) -> dict[str, Any] | None:
    """The most probable models (by truth, else by estimate) with truth, estimate and its error.

    With ``cross_entropy`` (:func:`per_model_cross_entropy`) also each model's conditional cross-entropy, its
    standard error and number of gold draws (None for a model without gold draws).
    """
    truth = problem.reference_model_probs()
    ranking = truth if truth is not None else estimate
    if ranking is None:
        return None
    shown = model_keys(ranking.top(MAX_MODELS_IN_RECORD).index)
    if estimate is not None and truth is not None:  # also show models the estimate favours
        extra = [i for i in model_keys(estimate.top(16).index) if i not in set(shown)]
        shown = shown[: MAX_MODELS_IN_RECORD - len(extra)] + extra

    def lookup(probs: ModelProbs | None, values: torch.Tensor | None) -> list[float] | None:
        if probs is None or values is None:
            return None
        table = dict(zip(model_keys(probs.index), values.tolist(), strict=True))
        return [table.get(i, 0.0) for i in shown]

    table = {
        "index": [list(i) if isinstance(i, tuple) else i for i in shown],
        "id": [problem.model_space.identifier(i) for i in shown],
        "truth": lookup(truth, None if truth is None else truth.prob),
        "estimate": lookup(estimate, None if estimate is None else estimate.prob),
        "se": lookup(estimate, None if estimate is None else estimate.se),
        "estimate_total": None if estimate is None else estimate.total(),
    }
    if cross_entropy is not None:
        cells = [cross_entropy.get(i) for i in shown]
        table["cross_entropy"] = [None if c is None else c[0] for c in cells]
        table["cross_entropy_se"] = [None if c is None else c[1] for c in cells]
        table["gold_draws"] = [0 if c is None else c[2] for c in cells]
    return table


def _recorded_model_table(
    problem: Problem, result: Result, cross_entropy: dict[Any, tuple[float, float | None, int]] | None
) -> dict[str, Any] | None:
    """:func:`_model_table` of a result; for a failed one whose estimate cannot be tabled (indices outside the
    space, say), None: the reason says what was wrong with it."""
    try:
        return _model_table(problem, result.model_probs, cross_entropy)
    except Exception:
        if result.status == "ok":
            raise
        return None


def jsonable(value: Any) -> Any:
    """``value`` with tensors as lists and keys as strings, so that a record's configuration is plain JSON."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


#: Returned draws on which :func:`execute` checks that the target's log density is finite somewhere.
TARGET_CHECK_DRAWS = 2048
NON_FINITE_TARGET = "the target's log density is non-finite at every returned draw"


def target_finite_somewhere(problem: Problem, draws: Draws, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether log pi is finite at any of (at most ``TARGET_CHECK_DRAWS``, evenly spaced) returned draws."""
    n = len(draws)
    if n == 0:
        return True  # nothing to check: the metrics judge an empty result
    m, theta = evenly_spaced(draws, TARGET_CHECK_DRAWS, device, dtype)
    with torch.no_grad():
        return bool(torch.isfinite(problem.log_joint(m, theta)).any())


def _draw_arrays(
    problem: Problem, result: Result, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A result's draws as CPU tensors: model indices, theta, active-coordinate mask, log q (None without density)."""
    assert result.draws is not None
    model_index = result.draws.model_index.detach().cpu()
    theta = result.draws.theta.detach().to("cpu", torch.float32)
    chunks = [model_index[s : s + EVAL_CHUNK] for s in range(0, len(model_index), EVAL_CHUNK)]
    with torch.no_grad():
        masks = [problem.mask(chunk.to(device)).cpu() for chunk in chunks]
    mask = torch.cat(masks) if masks else torch.zeros(theta.shape, dtype=torch.bool)
    log_q = None
    if result.log_density is not None:
        try:
            log_q = _log_density_on(result, result.draws, device, dtype).to(torch.float32)
        except Exception as exc:  # the draws are still worth keeping without their density
            warnings.warn(f"{problem.name}: log q of the saved draws failed: {exc}", stacklevel=2)
    return model_index, theta, mask, log_q


def save_result_draws(
    problem: Problem, result: Result, path: Path, device: torch.device, dtype: torch.dtype
) -> dict[str, Any] | None:
    """Save a successful result's draws to ``path`` (:mod:`suite.results.draws_file`); the record's ``draws`` or None.

    The entry's path is relative to the results folder (``draws/<record stem>.npz``), so the folder can move.
    """
    if result.status != "ok" or result.draws is None:
        return None
    model_index, theta, mask, log_q = _draw_arrays(problem, result, device, dtype)
    saved = draws_file.save_draws(
        path, model_index.numpy(), theta.numpy(), mask.numpy(), None if log_q is None else log_q.numpy()
    )
    return {"path": f"{draws_file.DRAWS_DIR}/{Path(path).name}", **saved, "log_q": log_q is not None}


def budget_use(context: RunContext, clock_s: float) -> dict[str, Any]:
    """The record's account of a run's clock against its budget: ``clock_s``, ``allowance_s``, ``over_budget``.

    ``over_budget`` is None without a budget and for a replayed run (its length was set by counts, not the clock),
    else :func:`suite.core.context.is_over_budget` of the run's whole clock, work after the stop included.
    """
    budget = context.time_budget_s
    if budget is None or context.replay is not None:
        return {"clock_s": clock_s, "allowance_s": None, "over_budget": None}
    allowance = budget_allowance_s(budget)
    return {"clock_s": clock_s, "allowance_s": allowance, "over_budget": is_over_budget(clock_s, budget)}


def resolve_and_run(method: Method, problem: Problem, context: RunContext) -> Result:
    """Resolve ``method``'s options for ``problem`` and ``context.profile`` and run it (tests and direct calls).

    The planner resolves once and calls :func:`execute` on the resolved method; this is the same for one run,
    without evaluation. Method errors propagate.
    """
    resolved = method.resolve(problem, context.profile)
    warm_up_torch()  # a one-off import must not land on the method's clock
    context.clock.start()
    return resolved.run(problem, context)


def execute(
    problem: Problem,
    method: Method,
    context: RunContext,
    draws: Draws | None = None,
    plot_path: Path | None = None,
    run_info: dict[str, Any] | None = None,
    draws_path: Path | None = None,
) -> dict[str, Any]:
    """Run the resolved ``method`` on ``problem`` once and return its record (never raises for method errors).

    ``draws`` are the gold-standard draws for cross-entropy (see :func:`gold_draws`); with ``plot_path``
    the problem's own picture of the result (:meth:`Problem.plot_result`), if it draws one, is saved there;
    with ``draws_path`` a successful run's draws are saved there (:func:`save_result_draws`).
    ``run_info`` (the run's key, configuration hash, constructor options, parallel layout) goes into the record
    as it is: this is the one place a record is assembled.
    """
    started = datetime.now(UTC).isoformat()
    error_trace = None
    warm_up_torch()  # a one-off import must not land on the method's clock
    context.clock.start()
    timed = context.time_budget_s is not None and context.replay is None
    limit_s = hard_limit_s(context.time_budget_s) if timed else None
    with PeakMemory(context.device) as memory:
        try:
            with hard_stop(limit_s):
                result = method.run(problem, context)
        except Overtime:  # a method that ignores stop_due: ended at its hard limit
            error_trace = traceback.format_exc()
            result = Result.failed(overtime_reason(context.time_budget_s, limit_s))
        except BudgetTooSmall as exc:
            result = Result.failed(f"time budget too small: {exc}")
        except SystemExit as exc:  # a method that exits is a failed run, not the end of the grid
            error_trace = traceback.format_exc()
            result = Result.failed(exit_reason(exc))
        except Exception as exc:  # a failing method is a result, not a crash
            error_trace = traceback.format_exc()
            result = Result.failed(f"{type(exc).__name__}: {exc}")
    method_wall = context.clock.elapsed()
    device, dtype = context.device, context.dtype

    timer = PhaseTimer(device)
    scores: dict[str, metrics.Estimate] = {}
    model_cross_entropy = None
    trace = None
    if result.status == "ok":
        try:
            with timer.phase("evaluate"):
                # A method that never left its starting points on a NaN target can look "ok" (e.g. chains started
                # at reference draws): its draws must be somewhere the target is defined.
                invalid = result_problem(problem, result, device, dtype)
                if invalid is not None:
                    result.status, result.reason = "failed", f"invalid result: {invalid}"
                elif result.draws is not None and not target_finite_somewhere(problem, result.draws, device, dtype):
                    result.status, result.reason = "failed", NON_FINITE_TARGET
                elif result.metrics_scope == "all" and (
                    unusable := target_problem(problem, result, draws, device, dtype) or mixing_problem(problem, result)
                ):
                    # A target non-finite in part of the space: chains stuck in a NaN model, or never moving
                    # between models, give an estimate that can look good (their starting distribution).
                    result.status, result.reason = "failed", unusable
                else:
                    scores = evaluate(problem, result, draws, device, dtype)
                    if draws is not None and result.conditional_log_density is not None:
                        model_cross_entropy = per_model_cross_entropy(result, draws, device, dtype)
            with timer.phase("score_trace"):
                trace = score_trace(problem, context.snapshots, result.metrics_scope)
        except (Exception, SystemExit) as exc:  # the result's own functions (log q, q's sampler) are method code
            error_trace = traceback.format_exc()
            why = exit_reason(exc) if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
            result.status, result.reason = "failed", f"evaluation failed: {why}"
    plot = None
    if result.status == "ok" and plot_path is not None:
        try:
            plot_path.parent.mkdir(parents=True, exist_ok=True)
            plot = problem.plot_result(result.model_probs, result.draws, plot_path)
        except Exception as exc:  # a picture that cannot be drawn must not cost the run its record
            warnings.warn(f"{problem.name} / {method.name}: plot_result failed: {exc}", stacklevel=2)
    saved_draws = None
    if draws_path is not None:
        with timer.phase("save_draws"):
            try:
                saved_draws = save_result_draws(problem, result, draws_path, device, dtype)
            except OSError:
                raise  # a full or read-only disk is the run's environment failing, reported as such
            except Exception as exc:  # draws that cannot be saved must not cost the run its record
                warnings.warn(f"{problem.name} / {method.name}: draws not saved: {exc}", stacklevel=2)
        if saved_draws is None:
            draws_path.unlink(missing_ok=True)  # no stale draws of an earlier run beside this run's record
    timings = {**context.timer.timings, **result.timings, **timer.timings, "method_total": method_wall}
    timings["snapshots"] = context.clock.paused_s
    timings["snapshots_charged"] = context.clock.charged_s
    scores["walltime_s"] = metrics.Estimate(method_wall)
    info = dict(run_info or {})

    return rec.make_record(
        problem.name,
        method.name,
        context.seed,
        result.status,
        result.reason,
        problem_config=jsonable(problem.config()),
        problem_facts=problem_facts(problem),
        method_options=jsonable(info.pop("method_options", method.options())),
        method_settings=jsonable(method.options()),
        budget={
            "profile": context.profile,
            "num_draws": context.num_draws,
            "time_budget_s": context.time_budget_s,
            "replayed": context.replay is not None,
            **budget_use(context, method_wall),
        },
        reference=references.describe(problem),
        code={"method": code_origin(type(method)), "problem": code_origin(type(problem))},
        num_gold_draws=None if draws is None else len(draws),
        traceback=error_trace,
        metrics={k: {"value": v.value, "se": v.se} for k, v in scores.items()},
        trace=trace,
        counts=jsonable(context.counts),
        model_probs=_recorded_model_table(problem, result, model_cross_entropy),
        metrics_scope=result.metrics_scope,
        plot=None if plot is None else str(plot),
        draws=saved_draws,
        timings_s=timings,
        peak_memory_bytes=memory.peak_bytes,
        peak_memory_kind=memory.kind,
        peak_memory_scope=memory.scope,
        diagnostics=jsonable(result.diagnostics),
        environment=environment(device, context.dtype_name),
        started_at=started,
        finished_at=datetime.now(UTC).isoformat(),
        **info,
    )
