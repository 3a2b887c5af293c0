"""Runs are isolated: what a method does to the ``Problem`` instance it was given never reaches the next run in the
same process (``--jobs 1`` runs every run in the parent, on copies of the planned instances)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from suite.core import registry
from suite.core.method import Method, Result
from suite.run import Execution, GridSpec, run_grid


class Vandal(Method):
    """Reassigns ``problem.log_joint`` to NaN everywhere (and an attribute the next run reads), then returns the
    problem's exact answer."""

    def run(self, problem, context):
        problem.log_joint = lambda model_index, theta: torch.full(model_index.shape, math.nan, dtype=theta.dtype)
        problem.dim_max = 99
        return Result(model_probs=problem.reference_model_probs(), diagnostics={"vandalised": True})


class Witness(Method):
    """Reports whether the problem it was given still has its own ``log_joint`` and ``dim_max``."""

    def run(self, problem, context):
        theta = torch.zeros(2, 2, dtype=torch.float64)
        finite = bool(torch.isfinite(problem.log_joint(torch.tensor([0, 1]), theta)).all())
        untouched = "log_joint" not in vars(problem) and problem.dim_max == 2
        return Result(model_probs=problem.reference_model_probs(), diagnostics={"finite": finite, "clean": untouched})


@pytest.fixture
def vandal_and_witness() -> Iterator[None]:
    registry.load_all()
    registry.register_method("aa-vandal")(Vandal)
    registry.register_method("zz-witness")(Witness)
    try:
        yield
    finally:
        del registry._METHODS["aa-vandal"], registry._METHODS["zz-witness"]


@pytest.mark.usefixtures("vandal_and_witness")
def test_a_method_that_changes_its_problem_does_not_reach_the_next_run(tmp_path: Path) -> None:
    spec = GridSpec(problems="sas", methods="aa-vandal,zz-witness", profile="smoke", seeds=2, eval_draws=300)
    outcome = run_grid(spec, Execution(out=tmp_path, jobs=1, progress=False), echo=lambda text: None)
    by_run = {(r["method"], r["seed"]): r for r in outcome.records}
    assert len(by_run) == 4
    assert by_run[("aa-vandal", 0)]["diagnostics"] == {"vandalised": True}  # it did change what it was given
    for seed in (0, 1):  # the runner checks the target where q(m) has mass, on the problem the method was given
        assert by_run[("aa-vandal", seed)]["status"] == "failed"
        assert "NaN" in by_run[("aa-vandal", seed)]["reason"]
    for seed in (0, 1):
        witness = by_run[("zz-witness", seed)]
        assert witness["status"] == "ok", witness["reason"]
        assert witness["diagnostics"] == {"finite": True, "clean": True}
