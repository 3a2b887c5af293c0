"""Cost of the running estimates: seconds spent in snapshots against the run's walltime, per method family.

Run with ``pytest tests/benchmarks/test_snapshot_overhead.py -m benchmark``. Each family runs once on
``robust-vs`` (the DAG methods: ``linear-dag-d4``, their natural problem) under a time budget; snapshot time is left out
of the compute clock, so the overhead shows in the walltime only. Target (issue 19): under 5% of the run.
"""

import time

import pytest
import torch

from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

BUDGET_S = 10.0
FAMILIES = {
    "rjmcmc-baseline": "robust-vs",
    "vti-surrogate": "robust-vs",
    "vti-mcg": "robust-vs",
    "trj": "robust-vs",
    "ctrj": "robust-vs",
    "mif": "robust-vs",
    "mf": "robust-vs",
    "dagma": "linear-dag-d4",
    "bayesdag": "linear-dag-d4",
    "order-mcmc": "linear-dag-d4",
}


@pytest.mark.benchmark
@pytest.mark.parametrize("method_name", list(FAMILIES))
def test_snapshot_overhead(benchmark, method_name: str) -> None:
    problem = make_problem(FAMILIES[method_name])
    outcome = {}

    def run() -> None:
        context = RunContext(seed=0, profile="quick", time_budget_s=BUDGET_S)
        start = time.perf_counter()
        result = resolve_and_run(make_method(method_name), problem, context)
        outcome.update(result=result, context=context, wall=time.perf_counter() - start)

    with torch.inference_mode(False):
        benchmark.pedantic(run, rounds=1, iterations=1)
    result, context, wall = outcome["result"], outcome["context"], outcome["wall"]
    assert result.status == "ok", result.reason
    overhead = context.clock.paused_s / wall
    benchmark.extra_info.update(
        problem=problem.name,
        snapshots=len(context.snapshots),
        snapshot_s=context.clock.paused_s,
        walltime_s=wall,
        overhead=overhead,
    )
    print(f"{method_name} on {problem.name}: {len(context.snapshots)} snapshots, {overhead:.2%} of {wall:.1f} s")
    assert len(context.snapshots) >= 5
    assert overhead < 0.05
