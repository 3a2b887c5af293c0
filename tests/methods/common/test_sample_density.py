"""The Gaussian-per-model density fitted to draws, on a target where that density is exact."""

import torch

from methods.common.sample_density import fit_gaussian_per_model
from suite.types import ModelProbs


def test_fitted_density_recovers_exact_gaussian_target(gaussian_models) -> None:
    train = gaussian_models.reference_draws(200_000, torch.Generator().manual_seed(0))
    test = gaussian_models.reference_draws(50_000, torch.Generator().manual_seed(1))
    log_q = fit_gaussian_per_model(gaussian_models, train, gaussian_models.reference_model_probs())
    exact = gaussian_models.log_joint(test.model_index, test.theta)
    # With 2e5 training draws the fitted moments are accurate to ~1e-2, so pointwise log densities agree closely.
    assert (log_q(test.model_index, test.theta) - exact).abs().mean() < 0.01


def test_unlisted_models_get_zero_density(gaussian_models) -> None:
    train = gaussian_models.reference_draws(5_000, torch.Generator().manual_seed(0))
    only_model_3 = ModelProbs(torch.tensor([3]), torch.tensor([1.0], dtype=torch.float64))
    log_q = fit_gaussian_per_model(gaussian_models, train, only_model_3)
    out = log_q(torch.tensor([0, 3]), torch.zeros(2, 2, dtype=torch.float64))
    assert out[0] == -float("inf") and torch.isfinite(out[1])
