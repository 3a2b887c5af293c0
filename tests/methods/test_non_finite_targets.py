"""Runs on a target with no finite density, or whose chains never move, are failed with the reason (issue 18, 7).

Before, ``trj`` on a NaN-everywhere sas reported ``ok`` with TV 0.016: its chains start at exact training draws,
never move, and their visit frequencies are those of the exact draws.
"""

import pytest
import torch

from suite.core.context import RunContext
from suite.core.registry import make_method
from suite.run.runner import execute, resolve_and_run
from tests.broken_targets import FrozenSas, NaNSas

CPU = torch.device("cpu")


@pytest.mark.parametrize("method_name", ["rjmcmc-baseline", "trj", "ctrj"])
def test_a_nan_target_is_a_failed_run(method_name: str) -> None:
    method = make_method(method_name).resolve(NaNSas(), "smoke")
    record = execute(NaNSas(), method, RunContext(seed=0, profile="smoke"))
    assert record["status"] == "failed"
    num_chains = method.num_chains
    assert record["reason"] == f"target log density is non-finite at all {num_chains} initial points"
    assert "model_prob_tv" not in record["metrics"]


@pytest.mark.parametrize("method_name", ["rjmcmc-baseline", "trj", "ctrj"])
def test_chains_that_accept_nothing_are_a_failed_run(method_name: str) -> None:
    problem = FrozenSas()
    result = resolve_and_run(make_method(method_name), problem, RunContext(seed=0, profile="smoke"))
    assert problem.calls > 1  # the chains did propose
    assert result.status == "failed"
    assert result.reason.startswith("no proposal accepted in the ")
    assert "neither between- nor within-model" in result.reason
