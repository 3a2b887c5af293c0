"""The BBE study's --fresh-draws: every replicate trains and evaluates on draws of its own reference-engine run."""

import pytest
import torch

from problems.block_vs.quadrature import log_evidences_by_quadrature
from suite.cli import bbe_command
from suite.core.registry import make_problem
from suite.core.types import Draws
from suite.studies import bbe_replicates, bbe_study


class FakeReference:
    """Stands in for a reference-engine run: N draws per half, all marked with the run's seed."""

    def __init__(self, problem, num_draws: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.model_index = torch.arange(num_draws) % int(problem.num_models)
        theta = torch.randn(num_draws, problem.dim_max, generator=gen, dtype=torch.float64)
        self.theta = torch.where(problem.mask(self.model_index), theta, 0.0)
        self.prob = torch.full((int(problem.num_models),), 1.0 / int(problem.num_models))
        self.seed, self.calls = seed, []

    def draws(self, num_draws: int, generator: torch.Generator, split: str = "all") -> Draws:
        self.calls.append((num_draws, split))
        half = len(self.model_index) // 2
        rows = slice(0, half) if split == "test" else slice(half, None)
        return Draws(self.model_index[rows][:num_draws], self.theta[rows][:num_draws])


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> list[FakeReference]:
    runs: list[FakeReference] = []

    def fake(problem, num_draws: int, seed: int) -> FakeReference:
        runs.append(FakeReference(problem, num_draws, seed))
        return runs[-1]

    monkeypatch.setattr(bbe_replicates, "fresh_reference", fake)
    return runs


def test_each_replicate_gets_its_own_engine_run(fake_engine: list[FakeReference]) -> None:
    problem = make_problem("block-vs")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    settings = bbe_replicates.StudySettings(proposals=("affine",), replicates=3, draws=200, seed=2, fresh_draws=True)
    seen: list[tuple[Draws, Draws]] = []
    for r in range(settings.replicates):
        seen.append(bbe_replicates.replicate_draws(problem, settings, r, log=lambda _: None))
    assert (
        [run.seed for run in fake_engine] == [bbe_replicates.fresh_seed(2, r) for r in range(3)] == [3000, 3001, 3002]
    )
    assert all(run.calls == [(200, "train"), (200, "test")] for run in fake_engine)
    assert len(fake_engine[0].model_index) == 2 * 200  # one run holds both halves
    trains = [train.theta for train, _ in seen]
    assert not torch.equal(trains[0], trains[1])  # independent runs
    train, evaluation = seen[0]
    assert torch.equal(train.theta, fake_engine[0].theta[200:]) and torch.equal(
        evaluation.theta, fake_engine[0].theta[:200]
    )


def test_run_study_uses_the_fresh_draws(fake_engine: list[FakeReference]) -> None:
    problem = make_problem("block-vs")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    settings = bbe_replicates.StudySettings(proposals=("affine",), replicates=2, draws=300, fresh_draws=True)
    results = bbe_replicates.run_study(problem, settings, log=lambda _: None)
    assert len(fake_engine) == 2 and [r.replicate for r in results] == [0, 1]
    assert all(r.num_train == r.num_eval == 300 for r in results)
    # The fake's draws are far from the posterior, so the estimates differ from the stored-draw ones.
    plain = bbe_replicates.StudySettings(proposals=("affine",), replicates=1, draws=300)
    stored = bbe_replicates.run_study(problem, plain, log=lambda _: None)
    assert not torch.allclose(results[0].probs, stored[0].probs)


def test_exact_samplers_are_left_alone(fake_engine: list[FakeReference]) -> None:
    settings = bbe_replicates.StudySettings(proposals=("exact",), replicates=1, draws=100, fresh_draws=True)
    train, evaluation = bbe_replicates.replicate_draws(make_problem("sas"), settings, 0, log=lambda _: None)
    assert fake_engine == [] and len(train) == len(evaluation) == 100


def test_the_cli_passes_the_flag(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    captured: list[bbe_replicates.StudySettings] = []

    def fake_run(problem, settings, log=print):
        captured.append(settings)
        return []

    monkeypatch.setattr(bbe_study, "run_study", fake_run)
    assert bbe_command.main(["sas", "--proposals", "exact", "--fresh-draws", "--out", str(tmp_path)]) == 1
    assert captured[0].fresh_draws
    assert bbe_command.build_parser().parse_args(["sas"]).fresh_draws is False


@pytest.mark.slow
def test_a_real_small_engine_run_gives_new_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem("block-vs")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    pytest.importorskip("blackjax")
    # A tiny engine (few particles, no NUTS, coarse quadrature grids) through the real path.
    tiny = {"smc": {"num_particles": 200, "num_runs": 2, "num_mcmc_steps": 2}, "max_nuts_models": 0}
    monkeypatch.setattr(problem, "reference_settings", {**problem.reference_settings, **tiny}, raising=False)
    coarse = log_evidences_by_quadrature(problem, (8, 10))
    monkeypatch.setattr(problem, "quadrature_log_evidences", lambda: coarse, raising=False)
    settings = bbe_replicates.StudySettings(proposals=("affine",), replicates=1, draws=100, fresh_draws=True)
    train, evaluation = bbe_replicates.replicate_draws(problem, settings, 0, log=lambda _: None)
    assert len(train) == len(evaluation) == 100
    mask = problem.mask(train.model_index)
    assert bool((train.theta[~mask] == 0).all()) and torch.isfinite(train.theta).all()
    stored = {tuple(t.tolist()) for t in problem.stored_reference().draws(10_000, torch.Generator()).theta}
    assert not stored & {tuple(t.tolist()) for t in train.theta}  # not the stored reference's draws


def test_fresh_runs_draw_from_smc_where_the_stored_reference_did(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem("block-vs")
    if problem.unavailable_reason() or problem.stored_reference() is None:
        pytest.skip("no stored block-vs reference")
    # Every model's NUTS failed R-hat: the gold draws are SMC particles.
    assert bbe_replicates.stored_draws_from_smc(problem)
    seen = []
    monkeypatch.setattr(bbe_replicates, "estimate_reference", lambda p, settings, log=print: seen.append(settings))
    bbe_replicates.fresh_reference(problem, 400, seed=1234)
    assert seen[0].max_nuts_models == 0 and seen[0].seed == 1234 and seen[0].num_gold_draws == 400
    assert seen[0].smc.num_particles == problem.reference_settings["smc"]["num_particles"]
