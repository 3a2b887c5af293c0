"""Results are checked before they are scored: each mistake a plug-in author makes fails the run, saying what and by
how much; a well-behaved result passes untouched."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from problems.sas.problem import SinhArcsinh
from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.types import Draws, ModelProbs
from suite.run import result_checks
from suite.run.runner import execute, gold_draws

SAS = SinhArcsinh()


def _exact() -> Result:
    draws = SAS.reference_draws(3000, torch.Generator().manual_seed(0))
    return Result(model_probs=SAS.reference_model_probs(), draws=draws, log_density=SAS.log_joint)


class Returns(Method):
    """A method that returns whatever result it is built with (the mistakes below)."""

    name = "returns"

    def __init__(self, make) -> None:
        self.make = make

    def run(self, problem, context):
        return self.make()


def _with_probs(prob: list[float], index: list[int] | None = None) -> Result:
    result = _exact()
    index_tensor = torch.tensor(index if index is not None else list(range(len(prob))))
    return dataclasses.replace(result, model_probs=ModelProbs(index_tensor, torch.tensor(prob, dtype=torch.float64)))


def _nan_density() -> Result:
    result = _exact()
    return dataclasses.replace(result, log_density=lambda m, theta: torch.full(m.shape, math.nan, dtype=theta.dtype))


def _wrong_width() -> Result:
    result = _exact()
    return dataclasses.replace(result, draws=Draws(result.draws.model_index, result.draws.theta[:, :1]))


def _ragged() -> Result:
    result = _exact()
    return dataclasses.replace(result, draws=Draws(result.draws.model_index[:-5], result.draws.theta))


def _draws_outside() -> Result:
    result = _exact()
    return dataclasses.replace(result, draws=Draws(result.draws.model_index + 7, result.draws.theta))


MISTAKES = {
    "q(m) sums to 0.5": (lambda: _with_probs([0.25, 0.25]), r"q\(m\) sums to 0\.5, not 1 \(off by 0\.5 > 1e-06\)"),
    "q(m) slightly off": (lambda: _with_probs([0.5, 0.5 + 2e-6]), r"off by 2e-06 > 1e-06"),
    "negative probability": (lambda: _with_probs([1.5, -0.5]), r"1 negative probabilities \(smallest -0\.5\)"),
    "NaN probability": (lambda: _with_probs([math.nan, 1.0]), r"1 non-finite probabilities of 2"),
    "model outside the space": (lambda: _with_probs([0.5, 0.5], [0, 5]), r"model index out of range \[0, 2\)"),
    "theta of the wrong width": (_wrong_width, r"theta has shape \(3000, 1\), expected \[N, 2\]"),
    "fewer indices than rows": (_ragged, r"2995 model indices for 3000 rows of theta"),
    "draws outside the space": (_draws_outside, r"draws' model indices: model index out of range"),
    "NaN log density": (_nan_density, r"log_density is NaN at 2048 of 2048 of the method's own draws"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_fails_the_run_with_what_and_by_how_much(mistake: str) -> None:
    make, reason = MISTAKES[mistake]
    record = execute(SAS, Returns(make), RunContext(seed=0))
    assert record["status"] == "failed"
    assert record["reason"].startswith("invalid result: ")
    assert re.search(reason, record["reason"]), record["reason"]
    assert "model_prob_tv" not in record["metrics"] and "cross_entropy" not in record["metrics"]


def test_a_correct_result_passes_the_checks_and_is_scored() -> None:
    assert result_checks.result_problem(SAS, _exact(), torch.device("cpu"), torch.float64) is None
    record = execute(SAS, Returns(_exact), RunContext(seed=0), gold_draws(SAS, 2000))
    assert record["status"] == "ok", record["reason"]
    assert record["metrics"]["model_prob_tv"]["value"] == 0.0
    assert math.isfinite(record["metrics"]["cross_entropy"]["value"])


def test_rounding_below_the_tolerances_passes() -> None:
    result = _with_probs([0.5 - 1e-13, 0.5 + 2e-13 - 1e-15])
    assert result_checks.model_probs_problem(SAS, result) is None
    assert result_checks.model_probs_problem(SAS, _with_probs([1.0 + 1e-13, -1e-13])) is None


def test_minus_infinity_at_own_draws_is_allowed_but_plus_infinity_is_not() -> None:
    """-inf is a density underflowing (a point q thinks impossible); +inf is no density at all."""
    result = _exact()
    minus = dataclasses.replace(result, log_density=lambda m, t: torch.full(m.shape, -math.inf, dtype=t.dtype))
    plus = dataclasses.replace(result, log_density=lambda m, t: torch.full(m.shape, math.inf, dtype=t.dtype))
    cpu = torch.device("cpu")
    assert result_checks.density_problem(minus, cpu, torch.float64) is None
    assert "+inf at 2048 of 2048" in result_checks.density_problem(plus, cpu, torch.float64)
