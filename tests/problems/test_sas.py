"""sas: exact density, exact sampling and exact transports (TRJ sec. 4.1)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from problems.sas.problem import DELTA, EPSILON, SinhArcsinh

M1, M2 = torch.tensor([0]), torch.tensor([1])


@pytest.fixture(scope="module")
def sas() -> SinhArcsinh:
    return SinhArcsinh()


def density_1d(sas: SinhArcsinh, theta: torch.Tensor) -> torch.Tensor:
    """p_1 on a grid (the model weight 1/4 divided out)."""
    x = torch.stack([theta, torch.zeros_like(theta)], -1)
    return (sas.log_joint(M1.expand(len(theta)), x) - math.log(0.25)).exp()


def test_model_1_density_integrates_to_one(sas: SinhArcsinh) -> None:
    # In u = asinh(theta) the integrand p(sinh u) cosh u is smooth and decays like a Gaussian,
    # so the trapezoid rule on a fine grid is accurate far below the tolerance.
    u = torch.linspace(-12, 12, 200_001, dtype=torch.float64)
    total = torch.trapezoid(density_1d(sas, torch.sinh(u)) * torch.cosh(u), u).item()
    assert total == pytest.approx(1.0, abs=1e-8)


@pytest.mark.slow
def test_model_2_density_integrates_to_one(sas: SinhArcsinh) -> None:
    # Mass lies in u_1 in [-1.3, 4.3], u_2 in [-3.2, 0.6]; the ridge is about 0.09 wide in u_2,
    # so a 0.004 grid resolves it and the trapezoid error is negligible.
    u1 = torch.arange(-6, 9, 0.004, dtype=torch.float64)
    u2 = torch.arange(-7, 4, 0.004, dtype=torch.float64)
    inner = []
    for a in u1.split(512):
        g1, g2 = torch.meshgrid(a, u2, indexing="ij")
        x = torch.stack([torch.sinh(g1), torch.sinh(g2)], -1).reshape(-1, 2)
        lp = sas.log_joint(M2.expand(len(x)), x) - math.log(0.75)
        dens = (lp.exp() * torch.cosh(x[:, 0].asinh()) * torch.cosh(x[:, 1].asinh())).reshape(len(a), len(u2))
        inner.append(torch.trapezoid(dens, u2, dim=1))
    total = torch.trapezoid(torch.cat(inner), u1).item()
    assert total == pytest.approx(1.0, abs=1e-6)


def test_density_matches_an_independent_scipy_formula(sas: SinhArcsinh) -> None:
    # pi(2, theta) = 3/4 N(S^{-1}(theta); 0, [[1, .99], [.99, 1]]) prod_i |dS_i^{-1}/dx|, written with numpy/scipy.
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(500, 2)) * 3
    eps, delta = np.array(EPSILON[1]), np.array(DELTA[1])
    y = np.sinh(delta * np.arcsinh(theta) - eps)
    jac = delta * np.cosh(delta * np.arcsinh(theta) - eps) / np.sqrt(1 + theta**2)
    expected = (
        math.log(0.75) + stats.multivariate_normal([0, 0], [[1, 0.99], [0.99, 1]]).logpdf(y) + np.log(jac).sum(-1)
    )
    got = sas.log_joint(M2.expand(500), torch.from_numpy(theta)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_exact_draws_reproduce_model_probabilities(sas: SinhArcsinh) -> None:
    draws = sas.reference_draws(200_000, torch.Generator().manual_seed(0))
    freq = (draws.model_index == 1).double().mean().item()
    assert abs(freq - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 200_000)


def test_transports_are_inverse_with_matching_jacobians(sas: SinhArcsinh) -> None:
    gen = torch.Generator().manual_seed(1)
    for m in (M1, M2):
        z = torch.randn(300, 2, dtype=torch.float64, generator=gen)
        theta, log_det_forward = sas.from_reference(m.expand(300), z)
        z_back, log_det_back = sas.to_reference(m.expand(300), theta)
        active = sas.mask(m)[0]
        torch.testing.assert_close(z_back[:, active], z[:, active], rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(log_det_forward, -log_det_back, rtol=1e-9, atol=1e-9)


def test_transport_log_det_matches_autograd(sas: SinhArcsinh) -> None:
    theta = torch.tensor([0.7, -1.3], dtype=torch.float64)
    for m in (M1, M2):
        active = sas.mask(m)[0]

        def active_map(x: torch.Tensor, m: torch.Tensor = m, active: torch.Tensor = active) -> torch.Tensor:
            full = theta.clone()
            full[active] = x
            return sas.to_reference(m, full[None])[0][0, active]

        jac = torch.autograd.functional.jacobian(active_map, theta[active])
        expected = torch.linalg.slogdet(jac).logabsdet
        torch.testing.assert_close(sas.to_reference(m, theta[None])[1][0], expected, rtol=1e-10, atol=1e-10)


def test_exact_draws_map_to_standard_normal(sas: SinhArcsinh) -> None:
    draws = sas.reference_draws(100_000, torch.Generator().manual_seed(2))
    z, _ = sas.to_reference(draws.model_index, draws.theta)
    for m in (0, 1):
        dim = m + 1
        zm = z[draws.model_index == m][:, :dim]
        n = len(zm)
        assert (zm.mean(0).abs() < 4.5 / math.sqrt(n)).all()
        # sd of a sample covariance entry of N(0, I) is about sqrt(2/n) on the diagonal, 1/sqrt(n) off it
        cov_error = torch.cov(zm.T).reshape(dim, dim) - torch.eye(dim, dtype=torch.float64)
        assert cov_error.abs().max() < 4.5 * math.sqrt(2 / n)
