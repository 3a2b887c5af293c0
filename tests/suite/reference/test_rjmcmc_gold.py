"""RJMCMC gold standards: the authors' sizes, and agreement with exact model probabilities within their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from suite.core.registry import make_problem
from suite.reference.rjmcmc_gold import app_e1_settings, estimate_by_rjmcmc
from suite.store.references import Reference


def test_app_e1_sizes_by_dimension() -> None:
    """avti get_rjmcmc_config: 10,000 burn-in, then total / thinning 20,000/100 (p <= 10) ... 160,000/400 (p <= 50)."""
    paper = app_e1_settings(25, "paper")
    assert (paper.num_chains, paper.burn_in, paper.num_iterations, paper.thin) == (4096, 10_000, 150_000, 400)
    assert app_e1_settings(8, "paper").num_iterations == 10_000 and app_e1_settings(8, "paper").thin == 100
    quick = app_e1_settings(25, "quick")
    assert (quick.num_chains, quick.burn_in, quick.num_iterations, quick.thin) == (1024, 2500, 37_500, 100)
    with pytest.raises(ValueError, match="valid: paper, quick"):
        app_e1_settings(8, "huge")


@pytest.mark.parametrize("name", ["sas", "robust-vs"])
@pytest.mark.slow
def test_visit_frequencies_agree_with_known_model_probabilities(name: str, tmp_path) -> None:
    """Each model's frequency lies within 5 combined standard errors (+ 0.003 for the SEs' own noise) of the truth.

    The truth is exact on ``sas`` (1/4, 3/4) and the SMC-evidence reference, with its own standard errors, on
    ``robust-vs`` (2^7 models), where the RJMCMC baseline mixes well.
    """
    problem = make_problem(name)
    settings = app_e1_settings(
        problem.dim_max, "quick", num_chains=256, burn_in=300, num_iterations=1200, thin=4, num_gold_draws=2000
    )
    reference = estimate_by_rjmcmc(problem, settings, progress=False)
    truth = problem.reference_model_probs()
    exact = truth.dense(problem.num_models).numpy()
    exact_se = np.zeros_like(exact) if truth.se is None else truth.se.numpy()[np.argsort(truth.index.numpy())]
    index = reference.model_index
    error = np.abs(reference.prob - exact[index])
    assert np.all(error <= 5 * np.sqrt(reference.prob_se**2 + exact_se[index] ** 2) + 0.003)
    assert exact[np.setdiff1d(np.arange(problem.num_models), index)].sum() < 0.01  # unvisited models are rare
    assert len(reference.gold_model_index) == 2000
    mask = problem.mask(torch.as_tensor(reference.gold_model_index))
    assert np.all(reference.gold_theta[~mask.numpy()] == 0)
    # Stored and read back: the visited models come back with their probabilities.
    path = reference.save(tmp_path)
    again = Reference.read(path).model_probs()
    assert torch.equal(again.index, torch.as_tensor(reference.model_index))
    assert torch.allclose(again.prob, torch.as_tensor(reference.prob))


def test_shipped_sweep_references_list_visited_models_only() -> None:
    """robust-vs-p24's reference lists far fewer models than 2^24, with standard errors, and its gold draws."""
    problem = make_problem("robust-vs-p24")
    reference = problem.stored_reference()
    if reference is None:
        pytest.skip("no shipped reference for robust-vs-p24")
    probs = problem.reference_model_probs()
    assert probs.index.numel() < 2**20 and probs.total() == pytest.approx(1.0, abs=1e-9)
    assert probs.se is not None and bool((probs.se >= 0).all())
    assert reference.provenance["evidence"] == "rjmcmc" and reference.provenance["settings"]["num_chains"] >= 1024
    draws = problem.reference_draws(100, torch.Generator().manual_seed(0))
    assert torch.isfinite(problem.log_joint(draws.model_index, draws.theta)).all()
