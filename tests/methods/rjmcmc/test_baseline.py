"""rjmcmc-baseline and rjmcmc-naive on targets with exactly known model probabilities."""

import pytest
import torch

from suite.method import Budget
from suite.registry import make_method, make_problem

CPU = torch.device("cpu")


def test_baseline_recovers_sas_model_probabilities() -> None:
    # Issue acceptance check: P(k=2) = 0.75 within 0.01 with 1024 chains and a fixed seed.
    result = make_method("rjmcmc-baseline", progress=False).run(make_problem("sas"), Budget("quick"), 0, CPU)
    p2 = result.model_probs.dense(2)[1].item()
    assert abs(p2 - 0.75) < 0.01
    # The reported standard error must be honest: the error is within 4 of them.
    assert abs(p2 - 0.75) < 4 * result.model_probs.se[1].item()
    assert result.diagnostics["accept_between"] > 0.02


def test_baseline_recovers_gaussian_models(gaussian_models) -> None:
    method = make_method("rjmcmc-baseline", num_chains=1024, burn_in=500, num_iterations=2000, thin=10, progress=False)
    result = method.run(gaussian_models, Budget("quick"), 1, CPU)
    truth = torch.tensor(gaussian_models.WEIGHTS, dtype=torch.float64)
    est = result.model_probs.dense(4)
    assert (est - truth).abs().max() < 0.01
    assert ((est - truth).abs() < 4.5 * result.model_probs.se).all()


def test_cross_entropy_density_is_close_to_the_target_entropy(gaussian_models) -> None:
    # Gaussian targets: the fitted density should reach H(pi) up to MC error and the small fit error.
    result = make_method("rjmcmc-baseline", progress=False).run(gaussian_models, Budget("smoke"), 2, CPU)
    draws = gaussian_models.reference_draws(20_000, torch.Generator().manual_seed(9))
    entropy = -gaussian_models.log_joint(draws.model_index, draws.theta).mean()
    cross = -result.log_density(draws.model_index, draws.theta).mean()
    assert cross >= entropy - 0.02  # Gibbs' inequality, up to MC error (sd of the difference ~ 0.005)
    # The Gaussian family contains the truth, so the gap is the fitting error: visit frequencies
    # off by ~0.01 and moments from ~25,000 correlated draws cost well under 0.05 nats.
    assert cross - entropy < 0.05


def test_naive_variant_uses_raw_coordinates() -> None:
    method = make_method("rjmcmc-naive", progress=False)
    assert method.settings(make_problem("sas"), Budget("smoke"))["matching"] == "identity"
    # On sas the shared coordinate has disjoint supports across models, so raw jumps almost never pass.
    result = method.run(make_problem("sas"), Budget("smoke"), 0, CPU)
    assert result.diagnostics["accept_between"] < 0.01


@pytest.mark.parametrize("bad", [{"num_chains": 0}, {"thin": -1}, {"aux_scale": 0.0}, {"matching": "magic"}])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        make_method("rjmcmc-baseline", **bad).settings(make_problem("sas"), Budget("smoke"))
