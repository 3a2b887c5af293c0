"""The suite-level guard of ``execute``: a run whose draws all lie where the target is non-finite is failed."""

import torch
from torch import Tensor

from problems.sas.problem import SinhArcsinh
from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.types import Draws
from suite.run.runner import NON_FINITE_TARGET, TARGET_CHECK_DRAWS, execute, target_finite_somewhere
from tests.broken_targets import NaNSas

CPU = torch.device("cpu")


class ExactDraws(Method):
    """Returns sas's exact model probabilities and exact draws, whatever the target says: looks perfect."""

    name = "exact-draws"

    def run(self, problem, context):
        draws = SinhArcsinh().reference_draws(5000, torch.Generator().manual_seed(context.seed))
        return Result(model_probs=SinhArcsinh().reference_model_probs(), draws=draws, timings={"sample": 0.0})


def test_draws_where_the_target_is_nan_everywhere_fail_the_run() -> None:
    record = execute(NaNSas(), ExactDraws(), RunContext(seed=0))
    assert record["status"] == "failed"
    assert record["reason"] == NON_FINITE_TARGET
    assert "model_prob_tv" not in record["metrics"]
    assert "evaluate" in record["timings_s"]  # the check is timed as evaluation


def test_the_guard_passes_a_target_that_is_finite_at_the_draws() -> None:
    record = execute(SinhArcsinh(), ExactDraws(), RunContext(seed=0))
    assert record["status"] == "ok", record["reason"]
    assert record["metrics"]["model_prob_tv"]["value"] == 0.0


def test_one_finite_draw_is_enough_and_at_most_a_few_thousand_are_evaluated() -> None:
    problem = SinhArcsinh()
    seen: list[int] = []

    class Counting(SinhArcsinh):
        def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
            seen.append(len(model_index))
            out = torch.full(model_index.shape, -torch.inf, dtype=theta.dtype)
            out[-1] = 0.0  # finite only at the last draw evaluated
            return out

    draws = problem.reference_draws(10 * TARGET_CHECK_DRAWS, torch.Generator().manual_seed(1))
    assert target_finite_somewhere(Counting(), draws, CPU, torch.float64)
    assert seen == [TARGET_CHECK_DRAWS]
    nan = NaNSas()
    assert not target_finite_somewhere(nan, draws, CPU, torch.float64)
    assert target_finite_somewhere(nan, Draws(draws.model_index[:0], draws.theta[:0]), CPU, torch.float64)
