"""The Gaussian-per-model density fitted to draws, on a target where that density is exact."""

import math

import pytest
import torch

from methods.common.sample_density import fit_gaussian_per_model
from suite.core.types import Draws, ModelProbs


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


class _MaskedModels:
    """Minimal stand-in for a Problem: only ``mask`` is needed to fit the density."""

    def __init__(self, masks: torch.Tensor) -> None:
        self.masks = masks

    def mask(self, model_index: torch.Tensor) -> torch.Tensor:
        """Active coordinates of each model."""
        return self.masks[model_index]


def _covariance(sd: list[float], corr: list[list[float]]) -> torch.Tensor:
    s = torch.tensor(sd, dtype=torch.float64)
    return s[:, None] * torch.tensor(corr, dtype=torch.float64) * s[None, :]


def test_fitted_density_cross_entropy_matches_exact_entropy_of_a_transdimensional_target() -> None:
    # An exact target on dim_max = 4: five models on different active sets, tiny strongly correlated
    # posteriors next to wide ones, and a rare model (p = 2e-4, ~10 of the training draws). Coordinate pairs
    # are correlated +0.95, +0.95, -0.95 in models 0-2, so an entry-by-entry pooled covariance is
    # indefinite; the old fit then ridged every model and lost ~3 nats.
    masks = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    probs = torch.tensor([0.45, 0.25, 0.2, 0.0998, 0.0002], dtype=torch.float64)
    means = [[1.0, -1.0], [0.0, 3.0], [-2.0, 0.5], [0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0]]
    covs = [
        _covariance([0.13, 0.13], [[1, 0.95], [0.95, 1]]),
        _covariance([1.0, 2.0], [[1, 0.95], [0.95, 1]]),
        _covariance([2.0, 0.5], [[1, -0.95], [-0.95, 1]]),
        _covariance(
            [0.13, 0.2, 0.3, 1.0], [[1, 0.9, 0.8, 0], [0.9, 1, 0.9, 0.1], [0.8, 0.9, 1, 0.2], [0, 0.1, 0.2, 1]]
        ),
        _covariance([0.13, 0.13, 0.13], [[1, 0.9, 0.8], [0.9, 1, 0.9], [0.8, 0.9, 1]]),
    ]
    problem = _MaskedModels(masks)

    def exact_draws(n: int, seed: int) -> Draws:
        gen = torch.Generator().manual_seed(seed)
        model = torch.multinomial(probs, n, replacement=True, generator=gen)
        theta = torch.zeros(n, 4, dtype=torch.float64)
        for k, (mu, cov) in enumerate(zip(means, covs, strict=True)):
            rows, cols = (model == k).nonzero().flatten(), masks[k].nonzero().flatten()
            z = torch.randn(rows.numel(), cols.numel(), generator=gen, dtype=torch.float64)
            theta[rows[:, None], cols[None, :]] = (
                torch.tensor(mu, dtype=torch.float64) + z @ torch.linalg.cholesky(cov).T
            )
        return Draws(model, theta)

    train, test = exact_draws(40_000, seed=0), exact_draws(100_000, seed=1)
    n_train = torch.bincount(train.model_index, minlength=5).to(torch.float64)
    assert 3 <= n_train[4] <= 30  # the rare model has a handful of draws: its covariance leans on the shrinkage
    log_q = fit_gaussian_per_model(problem, train, ModelProbs(torch.arange(5), probs))
    assert log_q.num_ridged == 0

    dims = masks.sum(-1).to(torch.float64)
    log_det = torch.stack([torch.logdet(c) for c in covs])
    exact_entropy = float(
        -(probs * probs.log()).sum() + (probs * 0.5 * (dims * math.log(2 * math.pi * math.e) + log_det)).sum()
    )
    values = log_q(test.model_index, test.theta)
    cross_entropy = float(-values.mean())
    se = float(values.std() / math.sqrt(len(test)))
    # Cross-entropy = H + E_m KL(p_m || q_m) >= H (q(m) is exact). The ML Gaussian fit to n_m draws has
    # expected KL ~ d_m (d_m + 3) / (4 n_m) (mean: d/2n, covariance: d(d+1)/4n); summed with weights p(m)
    # that is ~5e-4 here. The rare model is outside that asymptotic regime, but at p = 2e-4 even a 10-nat
    # misfit adds only 2e-3. The remaining slack is Monte Carlo error of the test average (SE ~ 8e-3).
    fit_excess = float((probs * dims * (dims + 3) / (4 * n_train)).sum())
    assert abs(cross_entropy - exact_entropy) < 4 * se + fit_excess + 10 * float(probs[4])


def test_a_model_with_probability_but_no_draws_gets_the_pooled_diagonal_density(gaussian_models) -> None:
    # A sampler can visit a model only between its kept iterations: q(m) > 0 without draws. Its density is
    # then log q(m) + the diagonal Gaussian of all draws' moments on its active coordinates (never -inf).
    train = gaussian_models.reference_draws(5_000, torch.Generator().manual_seed(0))
    kept = train.model_index != 3
    without_model_3 = Draws(train.model_index[kept], train.theta[kept])
    probs = gaussian_models.reference_model_probs()
    log_q = fit_gaussian_per_model(gaussian_models, without_model_3, probs)
    x = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    active = gaussian_models.mask(torch.tensor([3]))[0]
    draw_mask = gaussian_models.mask(without_model_3.model_index)
    expected = math.log(float(probs.prob[3]))
    for j in active.nonzero().flatten().tolist():
        values = without_model_3.theta[draw_mask[:, j], j]
        mean, var = float(values.mean()), float(values.var(unbiased=False))
        expected += -0.5 * (x[0, j].item() - mean) ** 2 / var - 0.5 * math.log(2 * math.pi * var)
    assert float(log_q(torch.tensor([3]), x)) == pytest.approx(expected, abs=1e-9)
