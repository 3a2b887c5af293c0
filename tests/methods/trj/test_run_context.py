"""trj/ctrj under the run context: running bridge estimates (snapshots), time budgets and their replay."""

from itertools import pairwise

import pytest
import torch

from methods.common.chains import ChainState
from methods.trj.sampler import KeptDraws
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import execute, resolve_and_run

#: Seconds a budgeted run may overrun its budget by here: one iteration (milliseconds on sas) plus the final
#: estimate and a loaded machine's slack. The exact figures belong in a benchmark, not in a timed unit test.
SLACK_S = 2.0


@pytest.mark.parametrize(("name", "options"), [("trj", {}), ("ctrj", {}), ("trj", {"estimator": "visits"})])
def test_snapshots_are_the_running_estimate_and_end_at_the_result(name: str, options: dict) -> None:
    problem = make_problem("sas")
    context = RunContext(seed=0, profile="smoke")
    result = resolve_and_run(make_method(name, **options), problem, context)
    assert result.status == "ok", result.reason
    snaps = context.snapshots
    assert len(snaps) >= 5
    seconds, iterations = [s.seconds for s in snaps], [s.iteration for s in snaps]
    assert all(a < b for a, b in pairwise(seconds)), seconds
    assert all(a < b for a, b in pairwise(iterations)), iterations
    assert all(s.estimate.model_probs is not None for s in snaps)  # burn-in and flow training have none
    last = snaps[-1].estimate.model_probs
    assert torch.equal(last.index, result.model_probs.index) and torch.equal(last.prob, result.model_probs.prob)
    # The work count runs over flow training (ctrj's 60 smoke steps) and the sampler's burn-in and sampling.
    diag = result.diagnostics
    assert iterations[-1] == diag["flow_training_steps"] + diag["burn_in_iterations"] + diag["sampling_iterations"]
    assert diag["flow_training_steps"] == (60 if name == "ctrj" else 0)


@pytest.mark.parametrize(("name", "budget"), [("trj", 3.0), ("ctrj", 4.0)])
@pytest.mark.slow
def test_a_budgeted_run_stops_at_its_budget_and_its_replay_is_bitwise_equal(name: str, budget: float) -> None:
    problem = make_problem("sas")
    method = make_method(name).resolve(problem, "smoke")
    timed = RunContext(seed=3, profile="smoke", time_budget_s=budget)
    record = execute(problem, method, timed)
    assert record["status"] == "ok", record["reason"]
    assert budget <= record["timings_s"]["method_total"] < budget + SLACK_S
    counts = record["counts"]
    assert {"burn_in", "stop"} <= counts.keys()
    steps = record["diagnostics"]["flow_training_steps"]
    if name == "ctrj":  # the flow's training ended at its share of the budget (or stopped early, before it)
        assert steps >= 1 and counts.get("transports_fitted", steps) == steps
    # More work than the smoke preset's iteration counts would allow is fine; the budget decides the length.
    assert record["diagnostics"]["sampling_iterations"] >= 1
    trace = record["trace"]
    assert trace["iterations"][-1] == counts["stop"]
    assert trace["seconds"][-1] == pytest.approx(record["timings_s"]["method_total"], abs=0.5)

    replay = RunContext(seed=3, profile="smoke", time_budget_s=budget, replay=counts)
    again = resolve_and_run(make_method(name), problem, replay)
    final = timed.snapshots[-1].estimate.model_probs
    assert torch.equal(again.model_probs.index, final.index) and torch.equal(again.model_probs.prob, final.prob)
    assert [s.iteration for s in replay.snapshots] == trace["iterations"]
    assert replay.counts["snapshots"] == counts["snapshots"]


def test_a_budget_spent_before_any_sampling_iteration_fails_with_that_reason() -> None:
    """No estimate exists before the first iteration after burn-in, so a tiny budget is a failed run."""
    problem = make_problem("sas")
    record = execute(problem, make_method("trj").resolve(problem, "smoke"), RunContext(seed=0, time_budget_s=1e-4))
    assert record["status"] == "failed"
    assert "time budget too small" in record["reason"] and "before any after burn-in" in record["reason"]


def test_kept_draws_stay_evenly_spaced_when_the_buffer_thins_itself() -> None:
    like = ChainState(torch.zeros(2, dtype=torch.int64), torch.zeros(2, 1), torch.zeros(2))
    kept = KeptDraws(capacity=5, thin=2, like=like)
    for s in range(1, 41):
        kept.offer(s, ChainState(torch.full((2,), s), torch.full((2, 1), float(s)), torch.zeros(2)))
    m, theta = kept.flat()
    assert kept.thin == 8 and m[::2].tolist() == [8, 16, 24, 32, 40]
    assert theta[::2, 0].tolist() == [8.0, 16.0, 24.0, 32.0, 40.0] and m.shape == (10,)
