"""Conformance checks of a method: valid results, reasons where it does not apply, seeds, harness, trace, budget.

Each check raises :class:`suite.run.conformance.CheckFailed` on a fault (:mod:`suite.run.conformance`);
:func:`check_method` runs them all on the smoke problems (``tdbench check METHOD``), in about a minute for a
method that runs its smoke preset in seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import available_problems, make_problem, problem_class
from suite.run.conformance import PASS, SKIP, CheckFailed, CheckResult, CheckRunner, require
from suite.run.guards import one_line, support_reason
from suite.run.problem_checks import supports_answers
from suite.run.result_checks import draws_problem, mixing_problem, model_probs_problem, target_problem
from suite.run.runner import execute, gold_draws, resolve_and_run

#: Where the one-problem checks (seeds, harness, trace, budget) run: the first of these the method supports, else
#: the first checked problem it supports.
PREFERRED_PROBLEMS = ("sas", "linear-dag-d4", "eight-schools")
#: The time budget of the budget check, in compute seconds, and the clock allowed beyond it where the record does
#: not say itself whether the run was over budget (``record["budget"]["over_budget"]``).
CHECK_BUDGET_S = 2.0
OVER_SHARE, OVER_SLACK_S = 0.10, 1.0


def smoke_problems() -> list[str]:
    """The problems of the smoke profile (``--problems all`` with ``--profile smoke``)."""
    return [name for name in available_problems() if "smoke" in problem_class(name).planned_in]


def valid_result(method: Method, problem: Problem, num_draws: int = 500) -> None:
    """A smoke run returns an ``ok`` Result that is a distribution on the problem's space, with phase timings.

    q(m) and the draws pass the runner's checks (:mod:`suite.run.result_checks`: q(m) a distribution on the
    problem's models, draws of shape ``[N, dim_max]``; the target finite where q(m) has mass; chains that moved
    between models), with N <= num_draws; log q finite at every draw (stricter
    than the runner, which allows -inf); phase timings >= 0.
    """
    context = RunContext(seed=0, profile="smoke", num_draws=num_draws)
    result = resolve_and_run(method, problem, context)
    require(isinstance(result, Result), f"run returned {type(result).__name__}, not a Result")
    require(result.status == "ok", f"status {result.status!r}: {result.reason}")
    invalid = model_probs_problem(problem, result) or draws_problem(problem, result.draws)
    require(invalid is None, str(invalid))  # the runner's own checks (suite.run.result_checks), same tolerances
    if result.metrics_scope == "all":  # as the runner: a target non-finite where q has mass, or stuck chains
        unusable = target_problem(problem, result, None, context.device, context.dtype)
        unusable = unusable or mixing_problem(problem, result)
        require(unusable is None, str(unusable))
    if result.draws is not None:
        require(len(result.draws) <= num_draws, f"{len(result.draws)} draws returned where {num_draws} were asked for")
    if result.log_density is not None:
        require(result.draws is not None, "a log density without draws")
        lq = result.log_density(result.draws.model_index, result.draws.theta)
        require(lq.shape == (len(result.draws),), f"log q of {len(result.draws)} draws has shape {tuple(lq.shape)}")
        require(bool(torch.isfinite(lq).all()), "log q is not finite at every returned draw")
    timings = {**context.timer.timings, **result.timings}
    require(bool(timings), "no phase timings (context.timer.phase)")
    require(all(t >= 0 for t in timings.values()), f"negative phase timings: {timings}")


def first_supported_problem(method: Method, names: Sequence[str] | None = None) -> Problem | None:
    """The problem the one-problem checks run on; None when the method supports none that can run here.

    The first of :data:`PREFERRED_PROBLEMS` (among ``names`` when given) the method supports, else the first of
    ``names`` it supports.
    """
    candidates = list(PREFERRED_PROBLEMS) if names is None else [n for n in PREFERRED_PROBLEMS if n in names]
    candidates += [n for n in names or () if n not in candidates]
    for name in candidates:
        problem = make_problem(name)
        if not problem.unavailable_reason() and support_reason(method, problem) is None:  # raising: not supported
            return problem
    return None


def reproducible_by_seed(method: Method, problem: Problem) -> None:
    """Seed 5 twice gives the same draws (q(m) for a collapsed sampler); seed 6 other ones (bar point estimates)."""
    runs = [resolve_and_run(method, problem, RunContext(seed=s, profile="smoke", num_draws=200)) for s in (5, 5, 6)]
    for run in runs:
        require(run.status == "ok", f"status {run.status!r}: {run.reason}")
    if runs[0].draws is None:  # a collapsed sampler (order-mcmc) returns q(m) only
        require(runs[0].model_probs is not None, "neither draws nor q(m) returned")
        same = torch.equal(runs[0].model_probs.prob, runs[1].model_probs.prob)
        require(same, "seed 5 run twice gives different q(m)")
        require(not torch.equal(runs[0].model_probs.prob, runs[2].model_probs.prob), "seeds 5 and 6 give the same q(m)")
        return
    same = torch.equal(runs[0].draws.model_index, runs[1].draws.model_index)
    require(same and torch.equal(runs[0].draws.theta, runs[1].draws.theta), "seed 5 run twice gives different draws")
    if runs[0].metrics_scope == "all":  # a point estimate (one graph) may well be the same for two seeds
        require(not torch.equal(runs[0].draws.theta, runs[2].draws.theta), "seeds 5 and 6 give the same draws")


def runs_through_the_harness(method: Method, problem: Problem) -> None:
    """``execute`` (the harness) makes an ``ok`` record with the method's settings and the float64 environment."""
    resolved = method.resolve(problem, "smoke")
    record = execute(problem, resolved, RunContext(seed=0, profile="smoke"), gold_draws(problem, 1000))
    require(record["status"] == "ok", f"record status {record['status']!r}: {record['reason']}")
    require(bool(record["method_settings"]), "the record has no method_settings")
    dtype = record["environment"]["dtype"]
    require(dtype == "float64", f"the record's environment says dtype {dtype}")


@dataclass(frozen=True)
class SmokeRun:
    """One smoke run (seed 0): its result and context, and the problem's public attributes before and after it."""

    result: Result
    context: RunContext
    before: dict[str, Any]
    after: dict[str, Any]


def smoke_run(method: Method, problem: Problem, num_draws: int = 200) -> SmokeRun:
    """A smoke run of ``method`` on ``problem`` at seed 0, for the checks that read one (trace, unchanged problem).

    Both checks ask for the same run; :func:`check_method` (and the tests) make it once and give it to both.
    """
    before = _public_attributes(problem)
    context = RunContext(seed=0, profile="smoke", num_draws=num_draws)
    result = resolve_and_run(method, problem, context)
    return SmokeRun(result, context, before, _public_attributes(problem))


def _public_attributes(problem: Problem) -> dict[str, Any]:
    return {name: value for name, value in vars(problem).items() if not name.startswith("_")}


def traces_its_running_estimate(method: Method, problem: Problem, run: SmokeRun | None = None) -> str:
    """At least 5 snapshots at increasing times and iterations, the last one equal to the result (issue 19).

    ``run``: a :func:`smoke_run` of ``method`` on ``problem`` already made, else one is made here.
    """
    run = smoke_run(method, problem) if run is None else run
    result = run.result
    require(result.status == "ok", f"status {result.status!r}: {result.reason}")
    snapshots = run.context.snapshots
    require(len(snapshots) >= 5, f"{len(snapshots)} snapshots (context.maybe_snapshot), fewer than 5")
    seconds = [snap.seconds for snap in snapshots]
    iterations = [snap.iteration for snap in snapshots]
    require(all(b > a for a, b in itertools.pairwise(seconds)), f"snapshot times do not increase: {seconds}")
    require(all(b > a for a, b in itertools.pairwise(iterations)), f"snapshot iterations do not increase: {iterations}")
    last = snapshots[-1].estimate.model_probs
    require(last is not None and result.model_probs is not None, "the last snapshot or the result has no q(m)")
    same = torch.equal(last.index, result.model_probs.index)
    same = same and torch.equal(last.prob, result.model_probs.prob.to(torch.float64))
    require(same, "the last snapshot is not the result's q(m) (call context.snapshot at the end)")
    return f"{len(snapshots)} snapshots"


def leaves_its_problem_unchanged(method: Method, problem: Problem, run: SmokeRun | None = None) -> None:
    """A smoke run reassigns, adds and removes none of the problem instance's public attributes.

    The suite gives every run its own copy of the problem, so a change cannot reach another run; but a method that
    reassigns ``problem.log_joint`` (say) is scoring itself against a target of its own making. ``run``: as for
    :func:`traces_its_running_estimate`.
    """
    run = smoke_run(method, problem) if run is None else run
    require(run.result.status == "ok", f"status {run.result.status!r}: {run.result.reason}")
    before, after = run.before, run.after
    changed = sorted(name for name in before.keys() & after.keys() if after[name] is not before[name])
    added, removed = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    faults = [f"{what} {', '.join(names)}" for what, names in (("reassigned", changed), ("added", added)) if names]
    faults += [f"removed {', '.join(removed)}"] if removed else []
    require(not faults, f"the run changed the problem it was given: {'; '.join(faults)}")


def keeps_its_time_budget(method: Method, problem: Problem, budget_s: float = CHECK_BUDGET_S) -> str:
    """A quick-profile run with a ``budget_s`` time budget through ``execute`` is ``ok`` and not over budget.

    Over budget is the record's own verdict (``record["budget"]["over_budget"]``) where it has one, else a compute
    clock more than 10% + 1 s beyond the budget.
    """
    resolved = method.resolve(problem, "quick")
    context = RunContext(seed=0, profile="quick", num_draws=500, time_budget_s=budget_s)
    record = execute(problem, resolved, context, gold_draws(problem, 1000))
    require(record["status"] == "ok", f"record status {record['status']!r}: {record['reason']}")
    budget = record.get("budget") or {}
    clock = budget.get("clock_s")
    clock = float(record["metrics"]["walltime_s"]["value"] if clock is None else clock)
    over = budget.get("over_budget")
    if over is None:
        over = clock > (1 + OVER_SHARE) * budget_s + OVER_SLACK_S
    require(not over, f"{clock:.2f} s of compute on a budget of {budget_s:g} s (loop until context.stop_due)")
    return f"{clock:.2f} s of compute on a budget of {budget_s:g} s"


def check_method(
    method: Method,
    problems: Sequence[str] | None = None,
    budget_s: float = CHECK_BUDGET_S,
    deadline_s: float | None = None,
) -> Iterator[CheckResult]:
    """Every method check, one result at a time (``tdbench check METHOD``).

    On each of ``problems`` (default: the smoke problems) a valid result or a reason it does not apply; then
    ``supports`` on every problem; then seeds, harness, trace, an unchanged problem and the budget on one problem
    it supports. Each check runs under ``deadline_s`` seconds (:class:`suite.run.conformance.CheckRunner`; None:
    no deadline); after one runs past it, the others fail as not run.
    """
    runner = CheckRunner(deadline_s)
    names = smoke_problems() if problems is None else list(problems)
    supported: list[Problem] = []
    for name in names:
        problem = make_problem(name)
        unavailable = problem.unavailable_reason()
        if unavailable:
            yield CheckResult(f"on {name}", SKIP, f"problem unavailable here: {unavailable}")
            continue
        answered = runner.run(f"on {name}", lambda problem=problem: supports_answer(method, problem))
        if answered.failed:
            yield answered
            continue
        if answered.detail:
            yield CheckResult(f"says why it does not apply to {name}", PASS, answered.detail)
            continue
        supported.append(problem)
        yield runner.run(f"valid result on {name}", lambda problem=problem: valid_result(method, problem))
    yield runner.run("supports() answers on every problem", lambda: supports_answers_everywhere(method))
    problem = _one_problem(supported)
    shared: list[SmokeRun] = []  # the trace and unchanged-problem checks read one smoke run, made by the first

    def one_smoke_run(method: Method, problem: Problem) -> SmokeRun:
        if not shared:
            shared.append(smoke_run(method, problem))
        return shared[0]

    checks = [
        ("reproducible by seed", reproducible_by_seed),
        ("runs through the harness", runs_through_the_harness),
        ("traces its running estimate", lambda m, p: traces_its_running_estimate(m, p, one_smoke_run(m, p))),
        ("leaves its problem unchanged", lambda m, p: leaves_its_problem_unchanged(m, p, one_smoke_run(m, p))),
        (f"keeps a {budget_s:g} s time budget", lambda m, p: keeps_its_time_budget(m, p, budget_s)),
    ]
    for label, check in checks:
        if problem is None:
            why = f"it applies to none of the problems checked ({', '.join(names)}); name some with --problems"
            yield runner.run(label, lambda why=why: require(False, why))
        else:
            yield runner.run(f"{label} (on {problem.name})", lambda check=check: check(method, problem))


def supports_answer(method: Method, problem: Problem) -> str:
    """``supports(problem)`` as a check: its reason, empty when the method applies; CheckFailed naming an exception."""
    try:
        reason = supports_answers(method, problem)
    except CheckFailed:
        raise
    except Exception as exc:  # one line: the exception's type and the first line of its message
        raise CheckFailed(f"supports() raised {one_line(exc)}") from None
    return reason or ""


def _one_problem(supported: Sequence[Problem]) -> Problem | None:
    """Where the one-problem checks run: the first of :data:`PREFERRED_PROBLEMS` in ``supported``, else its first."""
    by_name = {problem.name: problem for problem in supported}
    preferred = [by_name[name] for name in PREFERRED_PROBLEMS if name in by_name]
    return (preferred or list(supported) or [None])[0]


def supports_answers_everywhere(method: Method) -> str:
    """``supports`` answers (None or a reason) on every registered problem, never crashing."""
    names = available_problems()
    failures, applies = [], 0
    for name in names:
        try:
            applies += supports_answers(method, make_problem(name)) is None
        except Exception as exc:
            failures.append(f"{name}: {one_line(exc)}")
    require(not failures, "; ".join(failures))
    return f"applies to {applies} of {len(names)} problems"
