"""Per-model VI under the run contract: running estimates (snapshots), time budgets and their bitwise replay.

The timed tests use generous bounds only: the exact overshoot past a budget is for a benchmark, not a unit test.
"""

import itertools
import math

import pytest
import torch

from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import execute, resolve_and_run

METHODS = ["mif", "mf", "fr", "fr-vip", "iaf"]


@pytest.fixture(scope="module", autouse=True)
def _optimiser_imports() -> None:
    """The first Adam of a process imports torch._dynamo (seconds on a busy machine): not the method's time."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def _assert_trace(context: RunContext, result_probs: torch.Tensor, minimum: int = 5) -> None:
    snaps = context.snapshots
    assert len(snaps) >= minimum
    seconds = [s.seconds for s in snaps]
    iterations = [s.iteration for s in snaps]
    assert all(a < b for a, b in itertools.pairwise(seconds)), seconds
    assert all(a < b for a, b in itertools.pairwise(iterations)), iterations
    assert all(s.estimate.model_probs is not None for s in snaps)
    assert all(s.estimate.elbo is None or math.isfinite(s.estimate.elbo) for s in snaps)
    assert torch.equal(snaps[-1].estimate.model_probs.prob, result_probs)


@pytest.mark.parametrize("name", METHODS)
def test_smoke_run_on_sas_reports_running_estimates_ending_at_the_result(name: str) -> None:
    context = RunContext(seed=0, profile="smoke", num_draws=64)
    result = resolve_and_run(make_method(name), make_problem("sas"), context)
    assert result.status == "ok"
    _assert_trace(context, result.model_probs.prob)
    assert context.snapshots[-1].iteration == 40  # the smoke profile's steps
    for snap in context.snapshots:
        assert float(snap.estimate.model_probs.prob.sum()) == pytest.approx(1.0)
    assert context.snapshots[-1].estimate.elbo is not None


def test_snapshots_of_a_single_model_carry_q_one_and_the_running_elbo() -> None:
    context = RunContext(seed=1, profile="smoke", num_draws=64)
    result = resolve_and_run(make_method("mf"), make_problem("funnel"), context)
    _assert_trace(context, result.model_probs.prob)
    assert all(torch.equal(s.estimate.model_probs.prob, torch.ones(1, dtype=torch.float64)) for s in context.snapshots)
    elbos = [s.estimate.elbo for s in context.snapshots]
    assert all(e is not None and math.isfinite(e) for e in elbos)
    assert elbos[-1] == pytest.approx(result.diagnostics["final_elbo"][0])


def test_snapshots_across_learning_rates_keep_counting() -> None:
    """Two learning rates in turn: one iteration count over both fits, the trace ends at the result."""
    context = RunContext(seed=2, profile="smoke", num_draws=64)
    method = make_method("fr", learning_rates=(1e-1, 1e-2), num_iterations=20)
    result = resolve_and_run(method, make_problem("block-vs-simulated"), context)
    _assert_trace(context, result.model_probs.prob)
    assert context.snapshots[-1].iteration == 40
    assert any(s.iteration > 20 for s in context.snapshots[:-1])


@pytest.mark.parametrize(
    ("name", "options"),
    [("mif", {}), ("fr", {"learning_rates": (1e-1, 1e-2)}), ("mf", {"schedule": "constant", "evidence": "elbo"})],
)
@pytest.mark.slow
def test_time_budget_is_honoured_and_its_counts_replay_bitwise(name: str, options: dict) -> None:
    budget = 3.0
    problem = make_problem("sas")
    timed = RunContext(seed=0, profile="smoke", num_draws=256, time_budget_s=budget)
    result = resolve_and_run(make_method(name, **options), problem, timed)
    assert result.status == "ok"
    elapsed = timed.clock.elapsed()
    # The fits stop before 95% of the budget; the returned draws come after: generous slack for a busy machine.
    assert elapsed < budget + 5.0
    steps = result.diagnostics["training_steps"]
    assert len(steps) == len(make_method(name, **options).resolve(problem, "smoke").learning_rates)
    assert steps[0] > 0 and all(n > 0 for n in result.diagnostics["scoring_draws"])
    _assert_trace(timed, result.model_probs.prob, minimum=2)
    assert timed.snapshots[-1].seconds == pytest.approx(elapsed, abs=0.5)

    replay = RunContext(seed=0, profile="smoke", num_draws=256, time_budget_s=budget, replay=timed.counts)
    again = resolve_and_run(make_method(name, **options), problem, replay)
    assert torch.equal(again.model_probs.prob, result.model_probs.prob)
    assert torch.equal(again.model_probs.se, result.model_probs.se)
    assert torch.equal(again.draws.theta, result.draws.theta)
    assert again.diagnostics["training_steps"] == steps
    assert [s.iteration for s in replay.snapshots] == [s.iteration for s in timed.snapshots]


def test_a_budget_too_small_for_one_step_is_a_failed_record() -> None:
    """Per-model VI has no estimate before its first gradient step: the record fails, saying why."""
    problem = make_problem("sas")
    context = RunContext(seed=0, profile="smoke", num_draws=64, time_budget_s=1e-4)
    record = execute(problem, make_method("mf").resolve(problem, "smoke"), context)
    assert record["status"] == "failed"
    assert "time budget too small" in record["reason"] and "gradient step" in record["reason"]
