"""Metrics against distributions with known answers."""

import math

import pytest
import torch

from suite.core.types import ModelProbs
from suite.scoring.metrics import (
    cross_entropy,
    kl_divergence,
    max_abs_error,
    missed_mass,
    model_prob_metrics,
    total_variation,
)


def probs(values: list[float], index: list[int] | None = None) -> ModelProbs:
    index = list(range(len(values))) if index is None else index
    return ModelProbs(torch.tensor(index), torch.tensor(values, dtype=torch.float64))


def test_known_distances() -> None:
    p, q = probs([0.5, 0.5]), probs([0.9, 0.1])
    assert total_variation(p, q) == pytest.approx(0.4, abs=1e-15)
    assert max_abs_error(p, q) == pytest.approx(0.4, abs=1e-15)
    assert kl_divergence(p, q) == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), abs=1e-15)


def test_identical_distributions_have_zero_error() -> None:
    p = probs([0.2, 0.3, 0.5])
    assert all(v.value == 0.0 for v in model_prob_metrics(p, p).values())


def test_sparse_supports_are_aligned_by_model_index() -> None:
    truth = probs([0.6, 0.4], index=[3, 7])
    estimate = probs([0.4, 0.6], index=[7, 11])  # misses model 3, invents model 11
    assert total_variation(truth, estimate) == pytest.approx(0.5 * (0.6 + 0.0 + 0.6))
    assert max_abs_error(truth, estimate) == pytest.approx(0.6)
    assert kl_divergence(truth, estimate) == math.inf
    assert missed_mass(truth, estimate) == pytest.approx(0.6)  # the mass that makes the KL infinite
    assert missed_mass(truth, probs([1.0], index=[3])) == pytest.approx(0.4)
    assert missed_mass(truth, truth) == 0.0


def test_cross_entropy_of_exact_gaussian_is_its_entropy() -> None:
    cov = torch.tensor([[2.0, 0.6, 0.0], [0.6, 1.0, 0.3], [0.0, 0.3, 0.5]], dtype=torch.float64)
    dist = torch.distributions.MultivariateNormal(torch.zeros(3, dtype=torch.float64), cov)
    entropy = 0.5 * torch.logdet(2 * math.pi * math.e * cov).item()
    x = dist.sample((200_000,))
    est = cross_entropy(dist.log_prob(x))
    assert abs(est.value - entropy) < 4 * est.se  # 4 standard errors: fails by chance ~6e-5 of the time


def test_cross_entropy_standard_error_is_calibrated() -> None:
    # Over many replicates the z-scores (estimate - truth) / se should have mean 0 and sd 1.
    dist = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), 1.5)
    entropy = 0.5 * math.log(2 * math.pi * math.e * 1.5**2)
    z = []
    for _ in range(400):
        est = cross_entropy(dist.log_prob(dist.sample((400,))))
        z.append((est.value - entropy) / est.se)
    z = torch.tensor(z)
    # sd of the mean of 400 z-scores is 0.05; sd of their sd is about 1/sqrt(800) = 0.035.
    assert abs(z.mean().item()) < 0.2
    assert 0.86 < z.std().item() < 1.14


def test_cross_entropy_infinite_when_density_misses_draws() -> None:
    est = cross_entropy(torch.tensor([-1.0, -math.inf, -2.0]))
    assert est.value == math.inf and est.se is None
