"""Per-model draws of the BBE study (``--draws-per-model``, TRJ's FA protocol)."""

import functools

import numpy as np
import pytest
import torch

from suite.cli import bbe_command
from suite.core.registry import make_problem
from suite.studies import bbe_draws, bbe_replicates


def exact_sas_draws(num_draws: int, seed: int) -> torch.Tensor:
    """Exact draws of sas's two-dimensional model (index 1) through its exact transport."""
    problem = make_problem("sas")
    model = torch.ones(num_draws, dtype=torch.int64)
    z = torch.randn(num_draws, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return problem.from_reference(model, z)[0]


def test_rejuvenation_separates_copies_and_keeps_the_posterior() -> None:
    problem = make_problem("sas")
    distinct = exact_sas_draws(500, seed=1)
    copies = distinct.repeat_interleave(4, dim=0)  # 75% repeated rows, as resampled SMC particles
    assert bbe_draws.repeated_fraction(copies) == pytest.approx(0.75)
    moved, acceptance = bbe_draws.rejuvenate(problem, 1, copies, torch.Generator().manual_seed(2))
    assert 0.05 < acceptance < 0.95  # a working random walk, neither frozen nor stepping nowhere
    assert bbe_draws.repeated_fraction(moved) < 0.01
    # The kernel leaves the posterior invariant: the moved draws keep its moments. Exact moments from 200,000 exact
    # draws; the moved draws are worth at least the 500 distinct starts, so 4 standard errors of 500 draws bound
    # a chance failure below 1e-4 per coordinate.
    exact = exact_sas_draws(200_000, seed=3)
    se_mean = exact.std(0) / np.sqrt(500)
    assert torch.all((moved.mean(0) - exact.mean(0)).abs() < 4 * se_mean)
    se_sd = exact.std(0) / np.sqrt(2 * 500) * 2  # sd's SE doubled for the skewed, heavy-tailed sas marginals
    assert torch.all((moved.std(0) - exact.std(0)).abs() < 4 * se_sd)


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int, int]]:
    """NUTS and SMC stand-ins that return marked draws: every value is 100 model + seed."""
    calls: list[tuple[str, int, int, int]] = []

    def halves(kind: str):
        def run(problem, model_index, num_draws, settings, seed):
            calls.append((kind, model_index, num_draws, seed))
            value = 100.0 * model_index + seed
            full = np.full((num_draws, problem.dim_max), value)
            return full, full + 0.5, kind

        return run

    monkeypatch.setattr(bbe_draws, "nuts_halves", halves("nuts"))
    monkeypatch.setattr(bbe_draws, "smc_halves", halves("smc"))
    return calls


def test_per_model_draws_gives_n_of_each_model_from_its_source(
    fake_runs: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    monkeypatch.setattr(bbe_draws, "stored_sources", lambda p: {0: "smc", 1: "nuts"})
    train, evaluation = bbe_draws.per_model_draws(problem, 30, seed=5, log=lambda _: None)
    assert [c[0] for c in fake_runs] == ["smc", "nuts"]
    assert torch.bincount(train.model_index).tolist() == [30, 30] == torch.bincount(evaluation.model_index).tolist()
    mask = problem.mask(train.model_index)
    assert torch.all(train.theta[~mask] == 0)  # inactive coordinates zeroed
    # Training and evaluation draws come from different halves of each model's runs.
    assert torch.all(evaluation.theta[mask] == train.theta[mask] + 0.5)
    assert set(train.theta[train.model_index == 1][mask[train.model_index == 1]].tolist()) == {100.0 + 5 + 7919}


def test_nuts_that_does_not_converge_falls_back_to_smc(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    used: list[str] = []
    monkeypatch.setattr(bbe_draws, "stored_sources", lambda p: {0: "nuts", 1: "nuts"})
    monkeypatch.setattr(bbe_draws, "nuts_halves", lambda *a: used.append("nuts"))
    full = np.zeros((10, problem.dim_max))
    monkeypatch.setattr(bbe_draws, "smc_halves", lambda *a: used.append("smc") or (full, full, "smc"))
    lines: list[str] = []
    bbe_draws.per_model_draws(problem, 10, seed=0, log=lines.append)
    assert used == ["nuts", "smc", "nuts", "smc"]
    assert sum("NUTS R-hat too large" in line for line in lines) == 2


def test_stored_sources_read_the_reference_provenance() -> None:
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason() or problem.stored_reference() is None:
        pytest.skip("factor-analysis-k23 has no stored reference here")
    assert bbe_draws.stored_sources(problem) == {0: "smc", 1: "nuts"}  # k=2 bimodal (NUTS R-hat 16.8)


def test_replicates_draw_per_model_with_their_own_seeds(fake_runs: list, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    monkeypatch.setattr(bbe_draws, "stored_sources", lambda p: {0: "smc", 1: "nuts"})
    settings = bbe_replicates.StudySettings(proposals=("affine",), replicates=2, draws=40, seed=1, draws_per_model=True)
    train, _ = bbe_replicates.replicate_draws(problem, settings, 1, log=lambda _: None)
    assert len(train) == 80
    assert {c[3] for c in fake_runs} == {bbe_replicates.fresh_seed(1, 1), bbe_replicates.fresh_seed(1, 1) + 7919}


def test_draws_per_model_needs_a_prior(capsys: pytest.CaptureFixture) -> None:
    assert not make_problem("gmm-2d").has_prior
    with pytest.raises(SystemExit) as stop:
        bbe_command.main(["gmm-2d", "--draws-per-model"])
    assert stop.value.code == 2
    assert "--draws-per-model starts SMC from the prior" in capsys.readouterr().err


@pytest.mark.slow
def test_real_per_model_runs_match_the_stored_reference() -> None:
    """Small real NUTS (k=3) and SMC (k=2) runs on factor analysis against the stored reference's draws."""
    problem = make_problem("factor-analysis-k23")
    reference = None if problem.unavailable_reason() else problem.stored_reference()
    if reference is None:
        pytest.skip("factor-analysis-k23 has no data or stored reference here")

    from suite.reference.settings import settings_for

    settings = settings_for(problem, gold_draws=400, seed=0)
    import dataclasses

    settings = dataclasses.replace(
        settings,
        smc=dataclasses.replace(settings.smc, num_mcmc_steps=30),
        nuts=dataclasses.replace(settings.nuts, num_warmup=300),
    )
    stored = torch.as_tensor(reference.gold_theta)
    stored_index = torch.as_tensor(reference.gold_model_index)
    nuts_halves = functools.partial(bbe_draws.nuts_halves, min_draws=2_400)  # ESS 252 in all: >= 100 per half
    for model_index, run in ((0, bbe_draws.smc_halves), (1, nuts_halves)):
        halves = run(problem, model_index, 600, settings, 11)
        assert halves is not None, f"NUTS did not converge: {halves}"
        train, evaluation, _ = halves
        assert train.shape == evaluation.shape == (600, problem.dim_max)
        assert not np.array_equal(train, evaluation)
        truth = stored[stored_index == model_index][:, :6]  # the first factor's loadings, log-diagonal first
        for draws in (torch.as_tensor(train), torch.as_tensor(evaluation)):
            assert bbe_draws.repeated_fraction(draws) < 0.02
            # 600 draws (SMC rejuvenated; NUTS thinned from 2,400) are worth >= 100 independent ones: 5 SE of 100.
            assert torch.all((draws[:, :6].mean(0) - truth.mean(0)).abs() < 5 * truth.std(0) / 10)
