"""order-mcmc end to end: q(G) against the exact posteriors, budgets and replay, problems it does not apply to."""

from __future__ import annotations

import pytest
import torch

from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run


def total_variation(result, problem) -> float:
    exact = problem.reference_model_probs().prob
    q = torch.zeros_like(exact)
    q[result.model_probs.index] = result.model_probs.prob
    return float(0.5 * (q - exact).abs().sum())


@pytest.mark.parametrize("name", ["linear-dag-d4", "linear-dag", "linear-dag-bge-er"])
@pytest.mark.slow
def test_smoke_run_reaches_the_exact_posterior(name):
    """The smoke preset (16 chains x 450 kept iterations) already lands within TV 0.1 of the exact q(G).

    Order MCMC here mixes over at most 120 orders and each visited order contributes its exact p(G | order),
    so the error left is that of the order frequencies: with ~7,000 visits it is a few percent.
    """
    problem = make_problem(name)
    result = resolve_and_run(make_method("order-mcmc"), problem, RunContext(seed=0, profile="smoke"))
    assert result.status == "ok", result.reason
    assert result.draws is None and result.log_density is None  # collapsed: no parameters, no density
    assert torch.isclose(result.model_probs.prob.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert 0.0 < result.diagnostics["acceptance_rate"] < 1.0
    assert total_variation(result, problem) < 0.1


def test_budgeted_run_stops_and_replays_bitwise():
    problem = make_problem("linear-dag-d4")
    method = make_method("order-mcmc")
    timed = RunContext(seed=3, profile="quick", time_budget_s=0.5)
    first = resolve_and_run(method, problem, timed)
    assert first.status == "ok" and first.diagnostics["sampled_iterations"] > 0
    assert "burn_in_end" in timed.counts and "stop" in timed.counts
    replayed = resolve_and_run(method, problem, RunContext(seed=3, profile="quick", replay=dict(timed.counts)))
    assert replayed.diagnostics["iterations"] == first.diagnostics["iterations"]
    assert torch.equal(replayed.model_probs.prob, first.model_probs.prob)


def test_not_applicable_reasons():
    method = make_method("order-mcmc")
    assert "not DAGs" in method.supports(make_problem("sas"))
    assert "closed-form" in method.supports(make_problem("dag-mlp"))


def test_bad_options_name_the_rule():
    problem = make_problem("linear-dag-d4")
    with pytest.raises(ValueError, match="num_chains must be a positive integer"):
        make_method("order-mcmc", num_chains=0).resolve(problem, "smoke")
    with pytest.raises(ValueError, match="burn_in_fraction"):
        make_method("order-mcmc", burn_in_fraction=1.0).resolve(problem, "smoke")
