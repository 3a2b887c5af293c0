"""VTI's running estimates and time budgets: snapshots end at the result, budgets stop the run, counts replay it."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from methods.common.flat_parameters import FlatParameters
from methods.vti.flows import FlowSpec, build_flow
from methods.vti.method import context_function
from methods.vti.training import Trainer, TrainSettings, make_optimizer, scheduled_lr
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import execute, resolve_and_run

METHODS = ("vti-surrogate", "vti-mcg")


def _increasing(values: list[float]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("name", METHODS)
def test_snapshots_on_sas_end_at_the_returned_model_probabilities(name: str) -> None:
    problem = make_problem("sas")
    context = RunContext(seed=0, profile="smoke", num_draws=256)
    result = resolve_and_run(make_method(name), problem, context)
    assert result.status == "ok", result.reason
    snapshots = context.snapshots
    assert len(snapshots) >= 5
    assert _increasing([s.iteration for s in snapshots]) and _increasing([s.seconds for s in snapshots])
    assert snapshots[-1].iteration == 150 == result.diagnostics["iterations"]  # the smoke preset's length
    assert snapshots[0].iteration <= 5  # the first point near 1% of the run
    last = snapshots[-1].estimate.model_probs
    assert torch.equal(last.index, result.model_probs.index) and torch.equal(last.prob, result.model_probs.prob)
    for snap in snapshots:
        assert abs(snap.estimate.model_probs.total() - 1.0) < 1e-9
        assert snap.estimate.elbo is not None and math.isfinite(snap.estimate.elbo)


def test_snapshots_above_the_enumeration_limit_list_the_batch_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SNAPSHOT_ENUMERATION_LIMIT models (2^16; lowered to 64 here for robust-vs's 128) a running snapshot lists
    q at the latest batch's distinct models instead of enumerating the space; the final estimate still enumerates."""
    import methods.vti.method as vti_method

    monkeypatch.setattr(vti_method, "SNAPSHOT_ENUMERATION_LIMIT", 64)
    problem = make_problem("robust-vs")
    context = RunContext(seed=0, profile="smoke", num_draws=256)
    result = resolve_and_run(make_method("vti-mcg", batch_size=32), problem, context)
    assert result.status == "ok", result.reason
    running = [s.estimate.model_probs for s in context.snapshots[:-1]]
    assert running and all(probs.index.numel() <= 32 for probs in running)
    assert all(0.0 < probs.total() <= 1.0 + 1e-12 for probs in running)
    assert context.snapshots[-1].estimate.model_probs.index.numel() == 128


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.slow
def test_a_time_budget_stops_the_run_and_its_counts_replay_it_bitwise(name: str) -> None:
    """Generous bounds only: the exact stopping accuracy belongs in a benchmark, not a timed unit test."""
    problem = make_problem("sas")
    budget = 3.0
    timed = RunContext(seed=1, profile="smoke", num_draws=256, time_budget_s=budget)
    result = resolve_and_run(make_method(name), problem, timed)
    assert result.status == "ok", result.reason
    counts = timed.counts
    assert {"calibration", "horizon", "stop", "snapshots"} <= set(counts)
    assert counts["calibration"] <= counts["stop"] and counts["horizon"] >= counts["calibration"]
    assert result.diagnostics["iterations"] == counts["stop"] == timed.snapshots[-1].iteration
    assert timed.snapshots[-1].seconds < budget + 5.0  # the stop fell within an iteration (plus slack) of it
    # On a loaded machine the first iteration may come after several snapshot points: at least the first and last.
    assert len(timed.snapshots) >= 2 and _increasing([s.iteration for s in timed.snapshots])
    replayed = RunContext(seed=1, profile="smoke", num_draws=256, time_budget_s=budget, replay=counts)
    again = resolve_and_run(make_method(name), problem, replayed)
    assert torch.equal(again.model_probs.prob, result.model_probs.prob)
    assert torch.equal(again.draws.theta, result.draws.theta)
    assert again.diagnostics["loss_trace"] == result.diagnostics["loss_trace"]
    assert replayed.counts == counts
    assert [s.iteration for s in replayed.snapshots] == [s.iteration for s in timed.snapshots]


def test_a_budget_too_small_for_one_iteration_gives_a_failed_record() -> None:
    """VTI has no estimate before its first training iteration; 0.1 ms ends while the flow is being built."""
    problem = make_problem("sas")
    method = make_method("vti-mcg").resolve(problem, "smoke")
    record = execute(problem, method, RunContext(seed=0, profile="smoke", num_draws=64, time_budget_s=1e-4))
    assert record["status"] == "failed"
    assert "time budget too small" in record["reason"] and "no VTI training iteration" in record["reason"]


def test_the_closed_form_schedule_is_the_schedulers() -> None:
    """Budgeted runs set the rate from ``scheduled_lr``; at horizon = num_iterations it is the preset schedule."""
    for decay in ("exponential", "multiplicative"):
        s = TrainSettings(num_iterations=150, batch_size=8, flow_lr=1e-2, decay=decay)
        optimizer, scheduler = make_optimizer(FlatParameters(build_flow(FlowSpec.parse("affine(1,1)"), 2, 2)), s)
        assert scheduled_lr(s, 0) == optimizer.param_groups[0]["lr"]
        for t in range(1, 260):
            optimizer.step()
            scheduler.step()
            assert scheduled_lr(s, t) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-12)


def test_budgeted_schedules_start_at_their_first_value_and_then_span_the_horizon() -> None:
    problem = make_problem("sas")
    method = make_method("vti-mcg").resolve(problem, "smoke")
    context_of, width = context_function(problem, "auto", torch.float64)
    flow = build_flow(FlowSpec.parse("affine(1,1)"), problem.dim_max, width).to(torch.float64)
    log_prior = problem.log_model_prior(problem.model_space.all_indices()).to(torch.float64)
    sampler = method.make_sampler(problem, log_prior, torch.device("cpu"), torch.float64)
    s = method.train_settings()  # 150 iterations, warm-up 30
    trainer = Trainer(problem, flow, sampler, context_of, s, torch.Generator().manual_seed(0), budgeted=True)
    for iteration in range(3):
        trainer.step(iteration)
        assert trainer.optimizer.param_groups[0]["lr"] == s.flow_lr  # no horizon yet: the starting value
        assert not trainer.sampler_learns(iteration)  # and the warm-up holds
    trainer.set_horizon(1500)  # ten times the preset: warm-up to iteration 300, restarts every 1000
    assert not trainer.sampler_learns(299) and trainer.sampler_learns(300)
    trainer.step(3)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(scheduled_lr(s, 4 / 10), rel=1e-12)
