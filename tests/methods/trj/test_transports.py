"""Affine transports: exact inverses, identity on inactive coordinates, log-determinants, whitening."""

import math

import pytest
import torch

from methods.trj.transports import AffineTransport
from suite.core.registry import make_problem


@pytest.fixture(scope="module")
def sas_fit():
    problem = make_problem("sas")
    draws = problem.reference_draws(20_000, torch.Generator().manual_seed(0))
    return problem, draws, AffineTransport.fit(problem, draws.model_index, draws.theta)


def test_round_trip_and_inactive_coordinates(sas_fit) -> None:
    problem, draws, transport = sas_fit
    theta = draws.theta[:500].clone()
    m = draws.model_index[:500]
    theta[~problem.mask(m)] = 7.5  # inactive slots must come back untouched
    z, log_det = transport.to_reference(m, theta)
    back, log_det_inv = transport.from_reference(m, z)
    torch.testing.assert_close(back, theta, rtol=0, atol=1e-12)
    torch.testing.assert_close(log_det + log_det_inv, torch.zeros_like(log_det), rtol=0, atol=1e-12)
    assert bool((z[~problem.mask(m)] == 7.5).all())


def test_log_determinant_matches_autograd(sas_fit) -> None:
    problem, draws, transport = sas_fit
    for model in (0, 1):
        m = torch.tensor([model])
        theta = draws.theta[draws.model_index == model][:1]
        jac = torch.autograd.functional.jacobian(lambda t, m=m: transport.to_reference(m, t)[0], theta).reshape(2, 2)
        active = problem.mask(m)[0]
        expected = torch.linalg.slogdet(jac[active][:, active])[1]
        torch.testing.assert_close(transport.to_reference(m, theta)[1][0], expected, rtol=0, atol=1e-10)


def test_whitens_each_models_draws(sas_fit) -> None:
    """z of fresh draws has mean 0 and identity covariance per model, up to Monte Carlo error."""
    problem, _, transport = sas_fit
    draws = problem.reference_draws(40_000, torch.Generator().manual_seed(1))
    z, _ = transport.to_reference(draws.model_index, draws.theta)
    for model, dim in ((0, 1), (1, 2)):
        zm = z[draws.model_index == model][:, :dim]
        # Errors of this sample's moments and of the fit's own (20,000 draws), 5 standard errors each; the
        # standard error of a covariance entry comes from the spread of z_i z_j (heavy sinh-arcsinh tails).
        scale = math.sqrt(1 / zm.shape[0] + 1 / 20_000)
        torch.testing.assert_close(zm.mean(0), torch.zeros(dim, dtype=zm.dtype), rtol=0, atol=5 * scale)
        products = zm[:, :, None] * zm[:, None, :]
        error = (torch.cov(zm.T).reshape(dim, dim) - torch.eye(dim, dtype=zm.dtype)).abs()
        assert bool((error < 5 * scale * products.std(0)).all()), error


def test_too_few_draws_is_refused() -> None:
    problem = make_problem("sas")
    m = torch.tensor([0, 0, 0, 1])
    with pytest.raises(ValueError, match="too few draws"):
        AffineTransport.fit(problem, m, torch.randn(4, 2, dtype=torch.float64))
