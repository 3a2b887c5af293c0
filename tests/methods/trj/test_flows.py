"""Spline flow transports for TRJ and CTRJ: exact inverses, log-determinants, identity start, fit quality, fallback."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from methods.trj.flows import ConditionalSplineTransport, SplineTransport
from methods.trj.transports import AffineTransport, transport_log_prob
from suite.core.registry import make_problem

F64 = torch.float64
NUM_FIT = 8000
FIT_ITERATIONS = 400


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    # The training loops are many small ops; a second thread only adds contention on a shared CPU.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sas():
    return make_problem("sas")


@pytest.fixture(scope="module")
def sas_draws(sas):
    return sas.reference_draws(NUM_FIT, torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def fitted(sas, sas_draws):
    return SplineTransport.fit(
        sas,
        sas_draws.model_index,
        sas_draws.theta,
        iterations=FIT_ITERATIONS,
        generator=torch.Generator().manual_seed(1),
    )


@pytest.fixture(scope="module")
def conditional(sas, sas_draws):
    return ConditionalSplineTransport.fit(
        sas, sas_draws.model_index, sas_draws.theta, iterations=150, generator=torch.Generator().manual_seed(2)
    )


def _mixed_batch(sas, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    draws = sas.reference_draws(n, torch.Generator().manual_seed(seed))
    return draws.model_index, draws.theta.clone()


def test_untrained_transport_is_the_standardisation(sas, sas_draws) -> None:
    transport = SplineTransport.fit(sas, sas_draws.model_index, sas_draws.theta, iterations=0)
    z, log_det = transport.to_reference(sas_draws.model_index, sas_draws.theta)
    for model, dim in ((0, 1), (1, 2)):
        rows = sas_draws.model_index == model
        x = sas_draws.theta[rows][:, :dim]
        mean, sd = x.mean(0), x.std(0, correction=0)
        # The spline stack starts as the identity up to rounding; logit(sigmoid(x)) loses ~eps / sigmoid'(x)
        # relative precision, about 1e-8 at the ~15 sd tails of 8000 sinh-arcsinh draws.
        torch.testing.assert_close(z[rows][:, :dim], (x - mean) / sd, rtol=0, atol=1e-6)
        torch.testing.assert_close(log_det[rows], -sd.log().sum().expand(int(rows.sum())), rtol=0, atol=1e-6)
    assert all(r.kind == "flow" and r.iterations == 0 for r in transport.records)


@pytest.mark.slow
def test_round_trip_and_inactive_coordinates(sas, fitted) -> None:
    m, theta = _mixed_batch(sas, 500, 3)
    inactive = ~sas.mask(m)
    theta[inactive] = 7.5  # inactive slots must come back untouched
    z, log_det = fitted.to_reference(m, theta)
    back, log_det_inv = fitted.from_reference(m, z)
    torch.testing.assert_close(back, theta, rtol=0, atol=1e-8)
    torch.testing.assert_close(log_det + log_det_inv, torch.zeros_like(log_det), rtol=0, atol=1e-8)
    assert bool((z[inactive] == 7.5).all())
    assert bool((back[inactive] == 7.5).all())


@pytest.mark.slow
def test_log_determinant_matches_autograd(sas, sas_draws, fitted) -> None:
    for model, dim in ((0, 1), (1, 2)):
        m = torch.tensor([model])
        theta = sas_draws.theta[sas_draws.model_index == model][:1]
        jac = torch.autograd.functional.jacobian(lambda t, m=m: fitted.to_reference(m, t)[0], theta).reshape(2, 2)
        expected = torch.linalg.slogdet(jac[:dim, :dim])[1]
        torch.testing.assert_close(fitted.to_reference(m, theta)[1][0], expected, rtol=0, atol=1e-10)
        z = fitted.to_reference(m, theta)[0]
        jac_inv = torch.autograd.functional.jacobian(lambda u, m=m: fitted.from_reference(m, u)[0], z).reshape(2, 2)
        expected_inv = torch.linalg.slogdet(jac_inv[:dim, :dim])[1]
        torch.testing.assert_close(fitted.from_reference(m, z)[1][0], expected_inv, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_fitted_transport_whitens_fresh_draws(sas, fitted) -> None:
    """Per model, z of fresh draws has mean ~0 and covariance ~I."""
    draws = sas.reference_draws(20_000, torch.Generator().manual_seed(4))
    z, _ = fitted.to_reference(draws.model_index, draws.theta)
    for model, dim in ((0, 1), (1, 2)):
        zm = z[draws.model_index == model][:, :dim]
        # 5 standard errors of this sample's moments and of the fit's own draws (its sampling error); the
        # standardisation alone fails this for model "k=2", whose coordinates have correlation ~0.8.
        scale = math.sqrt(1 / zm.shape[0] + 1 / (NUM_FIT * (0.25 if model == 0 else 0.75)))
        torch.testing.assert_close(zm.mean(0), torch.zeros(dim, dtype=F64), rtol=0, atol=5 * scale)
        products = zm[:, :, None] * zm[:, None, :]
        error = (torch.cov(zm.T).reshape(dim, dim) - torch.eye(dim, dtype=F64)).abs()
        assert bool((error < 5 * scale * products.std(0)).all()), error


@pytest.mark.slow
def test_fitted_density_is_close_to_the_exact_one(sas, fitted) -> None:
    """E_p[log p_m - log q_m] = KL(p_m || q_m) >= 0, and small after fitting (far below the affine flow's)."""
    draws = sas.reference_draws(20_000, torch.Generator().manual_seed(5))
    m, theta = draws.model_index, draws.theta
    # sas is normalised (evidence 1), so log p(theta | m) = log pi(m, theta) - log p(m | D).
    log_p = sas.log_joint(m, theta) - sas.reference_model_probs().dense(2).log()[m]
    log_q = fitted.log_prob(m, theta)
    affine = AffineTransport.fit(sas, m, theta)
    log_q_affine = transport_log_prob(affine, sas, m, theta)
    for model in (0, 1):
        rows = m == model
        gap = log_p[rows] - log_q[rows]
        error = gap.std() / math.sqrt(int(rows.sum()))
        assert -5 * error < gap.mean() < 0.05, (model, gap.mean(), error)
        assert gap.mean() < 0.25 * (log_p[rows] - log_q_affine[rows]).mean()


@pytest.mark.slow
def test_log_prob_helper_agrees(sas, fitted) -> None:
    m, theta = _mixed_batch(sas, 200, 6)
    torch.testing.assert_close(fitted.log_prob(m, theta), transport_log_prob(fitted, sas, m, theta))


@pytest.mark.slow
def test_float32_inputs_get_float32_outputs(sas, fitted) -> None:
    m, theta = _mixed_batch(sas, 100, 7)
    z32, log_det32 = fitted.to_reference(m, theta.float())
    z64, log_det64 = fitted.to_reference(m, theta)
    assert z32.dtype == log_det32.dtype == torch.float32
    # float32 rounding of z ~ N(0, 1) values and of log-determinants of size ~1.
    torch.testing.assert_close(z32.double(), z64, rtol=0, atol=1e-4)
    torch.testing.assert_close(log_det32.double(), log_det64, rtol=0, atol=1e-4)


def test_too_few_draws_fall_back_to_affine(sas) -> None:
    draws = sas.reference_draws(400, torch.Generator().manual_seed(8))
    m, theta = draws.model_index, draws.theta
    # About 100 and 300 draws per model, both below min_draws = 400.
    transport = SplineTransport.fit(sas, m, theta, iterations=20, min_draws=400)
    assert [r.kind for r in transport.records] == ["affine", "affine"]
    # 30 draws of model 0 are below the default max(50, 10 n_k) = 50; model 1 keeps its ~300 draws.
    few = torch.cat([torch.nonzero(m == 0).flatten()[:30], torch.nonzero(m == 1).flatten()])
    transport = SplineTransport.fit(sas, m[few], theta[few], iterations=20)
    assert [r.kind for r in transport.records] == ["affine", "flow"]
    assert transport.records[0].iterations == 0 and transport.records[1].iterations == 20
    # The affine block is AffineTransport on that model.
    affine = AffineTransport.fit(sas, m[few], theta[few])
    rows = m[few] == 0
    torch.testing.assert_close(
        transport.to_reference(m[few][rows], theta[few][rows]), affine.to_reference(m[few][rows], theta[few][rows])
    )
    # Below n_k + 2 draws (model 1: 2 draws of 2 coordinates) the moments are shrunk to the pooled ones, as
    # AffineTransport.fit(shrink=True) does, so that every model still has an invertible transport.
    m_few, theta_few = (
        torch.tensor([0, 0, 0, 1, 1]),
        torch.randn(5, 2, dtype=F64, generator=torch.Generator().manual_seed(1)),
    )
    transport = SplineTransport.fit(sas, m_few, theta_few, iterations=5)
    assert transport.records[1].kind.startswith("affine (shrunk")
    shrunk = AffineTransport.fit(sas, m_few, theta_few, shrink=True)
    ones = torch.ones(3, dtype=torch.int64)
    probe = torch.randn(3, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(transport.to_reference(ones, probe), shrunk.to_reference(ones, probe))


@pytest.mark.slow
def test_conditional_round_trip_and_log_determinant(sas, conditional) -> None:
    m, theta = _mixed_batch(sas, 500, 9)
    xi = torch.where(
        sas.mask(m), theta, torch.randn(theta.shape, generator=torch.Generator().manual_seed(0), dtype=F64)
    )
    z, log_det = conditional.to_reference(m, xi)
    back, log_det_inv = conditional.from_reference(m, z)
    torch.testing.assert_close(back, xi, rtol=0, atol=1e-8)
    torch.testing.assert_close(log_det + log_det_inv, torch.zeros_like(log_det), rtol=0, atol=1e-8)
    for model in (0, 1):
        k = torch.tensor([model])
        row = xi[m == model][:1]
        jac = torch.autograd.functional.jacobian(lambda t, k=k: conditional.to_reference(k, t)[0], row).reshape(2, 2)
        torch.testing.assert_close(
            conditional.to_reference(k, row)[1][0], torch.linalg.slogdet(jac)[1], rtol=0, atol=1e-10
        )


def test_conditional_fit_lowers_validation_nll(sas, sas_draws, conditional) -> None:
    untrained = ConditionalSplineTransport.fit(
        sas, sas_draws.model_index, sas_draws.theta, iterations=0, generator=torch.Generator().manual_seed(2)
    )
    # Same seed, so the same validation rows and auxiliaries. The standardised start is far from the target
    # (4.7 nats per row; 150 iterations reach 3.0; the exact saturated density gives 2.77).
    assert conditional.record.validation_nll < untrained.record.validation_nll - 1.0
    m, theta = _mixed_batch(sas, 100, 10)
    xi = torch.where(sas.mask(m), theta, 0.0)
    z, log_det = conditional.to_reference(m, xi)
    expected = -0.5 * (z * z).sum(-1) - math.log(2 * math.pi) + log_det
    torch.testing.assert_close(conditional.log_prob_saturated(m, xi), expected)
