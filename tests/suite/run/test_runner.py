"""``execute`` saves a successful run's draws beside its record, and removes stale ones when a run saves none."""

from pathlib import Path

import numpy as np
import torch

from problems.sas.problem import SinhArcsinh
from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.results.draws_file import DRAWS_DIR, draws_path, load_draws
from suite.run.runner import execute
from tests.broken_targets import NaNSas


class ExactWithDensity(Method):
    """sas's exact draws, with log q the exact log posterior density (up to its constant)."""

    name = "exact-with-density"

    def run(self, problem, context):
        sas = SinhArcsinh()
        draws = sas.reference_draws(3000, torch.Generator().manual_seed(context.seed))
        return Result(
            model_probs=sas.reference_model_probs(), draws=draws, log_density=sas.log_joint, timings={"sample": 0.0}
        )


def test_a_successful_run_saves_its_draws_and_its_record_points_to_them(tmp_path: Path) -> None:
    problem = SinhArcsinh()
    path = draws_path(tmp_path, "sas__exact__seed0__h.json")
    record = execute(problem, ExactWithDensity(), RunContext(seed=0), draws_path=path)
    assert record["status"] == "ok", record["reason"]
    entry = record["draws"]
    assert entry["path"] == f"{DRAWS_DIR}/sas__exact__seed0__h.npz" and entry["num"] == 3000 and entry["log_q"]
    saved = load_draws(tmp_path / entry["path"], sha256=entry["sha256"], num=entry["num"])
    expected = problem.reference_draws(3000, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(saved.model_index, expected.model_index.numpy())
    np.testing.assert_allclose(saved.theta, expected.theta.numpy(), rtol=1e-6, atol=1e-6)  # float32 on disk
    np.testing.assert_array_equal(saved.mask, problem.mask(expected.model_index).numpy())
    log_joint = problem.log_joint(expected.model_index, expected.theta).numpy()
    np.testing.assert_allclose(saved.log_q, log_joint, rtol=1e-5)
    assert "save_draws" in record["timings_s"]


def test_without_a_path_nothing_is_saved_and_a_failed_run_removes_stale_draws(tmp_path: Path) -> None:
    record = execute(SinhArcsinh(), ExactWithDensity(), RunContext(seed=1))
    assert record["status"] == "ok" and record["draws"] is None
    path = draws_path(tmp_path, "sas__exact__seed1__h.json")
    path.parent.mkdir()
    path.write_bytes(b"draws of an earlier run")
    failed = execute(NaNSas(), ExactWithDensity(), RunContext(seed=1), draws_path=path)
    assert failed["status"] == "failed" and failed["draws"] is None
    assert not path.exists()


class ConstantConditional(ExactWithDensity):
    """sas's exact draws with log q(theta_m | m) = -1.5 (m + 1): per-model cross-entropies 1.5 and 3.0 exactly."""

    name = "constant-conditional"

    def run(self, problem, context):
        result = super().run(problem, context)
        result.conditional_log_density = lambda m, theta: -1.5 * (m.to(theta.dtype) + 1.0)
        return result


def test_per_model_cross_entropy_goes_to_the_model_table_aligned_with_its_models() -> None:
    problem = SinhArcsinh()
    gold = problem.reference_draws(1000, torch.Generator().manual_seed(5))
    record = execute(problem, ConstantConditional(), RunContext(seed=0), draws=gold)
    assert record["status"] == "ok", record["reason"]
    table = record["model_probs"]
    counts = torch.bincount(gold.model_index, minlength=2).tolist()
    by_model = dict(zip(table["index"], zip(table["cross_entropy"], table["gold_draws"], strict=True), strict=True))
    assert by_model == {0: (1.5, counts[0]), 1: (3.0, counts[1])}
    assert table["cross_entropy_se"] == [0.0, 0.0]
    plain = execute(problem, ExactWithDensity(), RunContext(seed=0), draws=gold)["model_probs"]
    assert "cross_entropy" not in plain  # no conditional density, no column
