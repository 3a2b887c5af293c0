"""Seconds to enumerate the exact evidence of all 2^p models of conjugate-vs (pytest tests/benchmarks -m benchmark)."""

import pytest

from problems.conjugate_vs import problem as conjugate
from suite.core.registry import make_problem


@pytest.mark.parametrize("num_covariates", [8, 12, 16, 20])
def test_exact_evidence_enumeration(benchmark, num_covariates: int) -> None:
    """Log evidence, model probabilities and conditional entropies of every model (caches cleared each round)."""
    problem = make_problem(f"conjugate-vs-p{num_covariates}")

    def enumerate_all() -> None:
        problem._exact = None
        conjugate._EXACT_CACHE.clear()
        problem.log_evidence()

    benchmark.pedantic(enumerate_all, rounds=1 if num_covariates == 20 else 3)
    benchmark.extra_info["seconds"] = benchmark.stats.stats.mean
    benchmark.extra_info["models_per_s"] = 2**num_covariates / benchmark.stats.stats.mean
