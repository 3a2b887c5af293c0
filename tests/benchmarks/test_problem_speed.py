"""Log-joint throughput of every registered problem at batch 4096, and DAG enumeration (pytest -m benchmark)."""

import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.registry import available_problems, make_problem

BATCH = 4096


@pytest.mark.parametrize("name", list(available_problems()))
def test_log_joint_throughput(benchmark, name: str) -> None:
    """Evaluations per second of the batched log joint (float64, CPU)."""
    problem = make_problem(name)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    gen = torch.Generator().manual_seed(0)
    model_index = problem.model_space.sample_uniform(BATCH, gen)
    theta = torch.randn(BATCH, problem.dim_max, generator=gen, dtype=torch.float64)
    with torch.inference_mode():
        benchmark.pedantic(problem.log_joint, args=(model_index, theta), rounds=200, warmup_rounds=10)
    benchmark.extra_info["evaluations_per_s"] = BATCH / benchmark.stats.stats.mean


def test_enumerate_and_score_all_dags_d5(benchmark) -> None:
    """Build linear-dag for d = 5: enumerate 29,281 DAGs, score every one exactly, normalise."""
    problem = benchmark.pedantic(LinearDAG, rounds=3)
    assert problem.num_models == 29_281
    benchmark.extra_info["seconds"] = benchmark.stats.stats.mean
