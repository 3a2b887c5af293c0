"""Iterations/s of bayesdag at the paper's d = 5 linear settings (run with: pytest tests/benchmarks -m benchmark).

One iteration is Algorithm 1's step for all 10 chains: W ~ q_phi, one SG-MCMC step on (p, Theta) through the
Sinkhorn relaxation and one Adam step on phi, on a batch of 512 rows (the paper's App. D settings; the BGe problem
has N = 500 rows, so a batch is the whole data set, as in the paper's 700 one-batch epochs).
"""

import torch

from methods.bayesdag.method import _Run
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

PROBLEM = "linear-dag-bge-er"


def test_iteration(benchmark) -> None:
    """One iteration of the 10 chains (paper profile: batch 512, lr 3e-4, lambda_s 50, scales 1e-3)."""
    problem = make_problem(PROBLEM)
    method = make_method("bayesdag").resolve(problem, "paper")
    run = _Run(method, problem, RunContext(seed=0, profile="paper"))
    run._setup()
    benchmark.pedantic(run._step, rounds=300, warmup_rounds=20)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["iterations_per_s"] = 1 / benchmark.stats.stats.mean
        rate = 1 / benchmark.stats.stats.mean
        print(f"\nbayesdag on {PROBLEM}: {rate:.1f} iterations/s ({method.num_chains} chains)")


def test_paper_run(benchmark) -> None:
    """The paper profile's whole run (700 iterations, graphs kept after the burn-in, estimates, draws)."""
    problem = make_problem(PROBLEM)
    result = benchmark.pedantic(
        lambda: resolve_and_run(make_method("bayesdag"), problem, RunContext(seed=0, profile="paper")), rounds=1
    )
    assert result.status == "ok", result.reason
    train = result.diagnostics["iterations"]
    if benchmark.stats is not None:
        benchmark.extra_info["iterations_per_s"] = train / benchmark.stats.stats.mean
    assert torch.isfinite(torch.tensor(result.diagnostics["u_per_row_by_block"])).all()
