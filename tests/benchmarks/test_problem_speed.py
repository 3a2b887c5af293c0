"""Log-joint throughput of every registered problem at batches 256 and 4096, and DAG enumeration (-m benchmark)."""

import time

import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.core.registry import available_problems, make_problem


@pytest.mark.parametrize("batch", [256, 4096])
@pytest.mark.parametrize("name", list(available_problems()))
def test_log_joint_throughput(benchmark, name: str, batch: int) -> None:
    """Evaluations per second of the batched log joint (float64, CPU); about two seconds of rounds each."""
    problem = make_problem(name)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    gen = torch.Generator().manual_seed(0)
    model_index = problem.model_space.sample_uniform(batch, gen)
    theta = torch.randn(batch, problem.dim_max, generator=gen, dtype=torch.float64)
    with torch.inference_mode():
        start = time.perf_counter()
        problem.log_joint(model_index, theta)
        rounds = int(min(200, max(3, 2.0 / max(time.perf_counter() - start, 1e-6))))
        benchmark.pedantic(problem.log_joint, args=(model_index, theta), rounds=rounds, warmup_rounds=1)
    benchmark.extra_info["evaluations_per_s"] = batch / benchmark.stats.stats.mean


def test_enumerate_and_score_all_dags_d5(benchmark) -> None:
    """Build linear-dag for d = 5: enumerate 29,281 DAGs, score every one exactly, normalise."""
    problem = benchmark.pedantic(LinearDAG, rounds=3)
    assert problem.num_models == 29_281
    benchmark.extra_info["seconds"] = benchmark.stats.stats.mean
