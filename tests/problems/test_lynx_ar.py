"""lynx-ar: exact evidences, model probabilities, draws and entropy against independent computations."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from problems.lynx_ar.data import NUM_YEARS, lagged, load_lynx
from problems.lynx_ar.problem import LynxAR
from suite.data.locate import unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason("lynx.csv") is not None, reason="lynx.csv is not available")


@pytest.fixture(scope="module")
def problem() -> LynxAR:
    return LynxAR()


@pytest.fixture(scope="module")
def independent() -> LynxAR:
    return LynxAR(prior="independent", prior_scale=0.7, a0=1.0, b0=0.05)


def _prior_covariance(problem: LynxAR, order: int) -> np.ndarray:
    """Cov(phi_{1:p}) / s2 of the prior, from the prior's definition."""
    x = problem.x.numpy()[:, :order]
    if problem.hyper.prior == "g":
        return problem.hyper.g * np.linalg.inv(x.T @ x)
    return problem.hyper.prior_scale**2 * np.eye(order)


def _marginal_log_evidence(problem: LynxAR, order: int) -> float:
    """log int N(y; 0, s2 (I + X V X^T)) IG(s2; a0, b0) ds2: the marginal of y given s2, integrated by scipy.quad.

    A different route from the posterior-precision formula of the problem: the n x n marginal covariance of y
    (slogdet and solve of a 94 x 94 matrix) and a numerical integral over u = log s2.
    """
    y, x = problem.y.numpy(), problem.x.numpy()[:, :order]
    cov = np.eye(len(y)) + x @ _prior_covariance(problem, order) @ x.T
    _, log_det = np.linalg.slogdet(cov)
    quad = y @ np.linalg.solve(cov, y)
    a0, b0, n = problem.hyper.a0, problem.hyper.b0, len(y)

    def log_integrand(u: float) -> float:  # in u = log s2: N(y; 0, s2 C) IG(s2) s2
        return (
            -0.5 * n * (math.log(2 * math.pi) + u)
            - 0.5 * log_det
            - 0.5 * quad * math.exp(-u)
            + a0 * math.log(b0)
            - special.gammaln(a0)
            - a0 * u
            - b0 * math.exp(-u)
        )

    mode = math.log((quad / 2 + b0) / (n / 2 + a0))  # the integrand's maximum in u
    peak = log_integrand(mode)
    value, _ = integrate.quad(lambda u: math.exp(log_integrand(u) - peak), mode - 8, mode + 8, epsabs=0, epsrel=1e-13)
    return peak + math.log(value)


def test_data_are_the_centred_log10_series() -> None:
    counts = load_lynx()
    assert len(counts) == NUM_YEARS and counts[0] == 269 and counts[-1] == 3396
    data = lagged(counts, 20)
    assert data.x.shape == (94, 20) and data.y.shape == (94,)
    assert float(data.series.sum()) == pytest.approx(0.0, abs=1e-12)
    # column j holds lag j + 1: x[t, j] = series[20 + t - j - 1]
    assert torch.equal(data.x[5, 3], data.series[20 + 5 - 4])
    assert torch.equal(data.y, data.series[20:])


@pytest.mark.parametrize("fixture", ["problem", "independent"])
def test_evidence_matches_the_integrated_marginal_likelihood(fixture: str, request: pytest.FixtureRequest) -> None:
    # scipy.quad at epsrel 1e-13 over +-8 in u (the posterior sd of u is ~0.15, so the cut tails are < e^-1000).
    lynx = request.getfixturevalue(fixture)
    log_evidence = lynx.log_evidence()
    for order in (0, 1, 2, 5, 11, 20):
        assert float(log_evidence[order]) == pytest.approx(_marginal_log_evidence(lynx, order), abs=1e-8)


@pytest.mark.parametrize("fixture", ["problem", "independent"])
def test_log_joint_is_evidence_times_posterior_density(fixture: str, request: pytest.FixtureRequest) -> None:
    # log pi(p, theta) - log p(theta | p, y) = log p(y | p) + log p(p) at every theta; the posterior density is
    # written here from scratch (phi | s2 ~ N(mu, s2 P^-1), s2 ~ IG(a_n, b_n), times s2 for u = log s2).
    lynx = request.getfixturevalue(fixture)
    gen = torch.Generator().manual_seed(5)
    y, n, a0, b0 = lynx.y.numpy(), len(lynx.y), lynx.hyper.a0, lynx.hyper.b0
    for order in (0, 3, 12):
        x = lynx.x.numpy()[:, :order]
        precision = x.T @ x + np.linalg.inv(_prior_covariance(lynx, order)) if order else np.zeros((0, 0))
        mu = np.linalg.solve(precision, x.T @ y) if order else np.zeros(0)
        a_n, b_n = a0 + n / 2, b0 + 0.5 * (y @ y - mu @ precision @ mu)
        theta = torch.randn(7, lynx.dim_max, generator=gen, dtype=torch.float64) * 0.3
        theta[:, -1] -= 3.0
        model = torch.full((7,), order, dtype=torch.int64)
        log_joint = lynx.log_joint(model, theta).numpy()
        phi, u = theta[:, :order].numpy(), theta[:, -1].numpy()
        s2 = np.exp(u)
        log_post = stats.invgamma.logpdf(s2, a_n, scale=b_n) + u
        if order:
            log_post += np.array(
                [
                    stats.multivariate_normal.logpdf(p, mu, v * np.linalg.inv(precision))
                    for p, v in zip(phi, s2, strict=True)
                ]
            )
        expected = float(lynx.log_evidence()[order]) - math.log(21)
        np.testing.assert_allclose(log_joint - log_post, expected, rtol=0, atol=1e-8)


def test_model_probabilities_and_log_z(problem: LynxAR) -> None:
    probs = problem.reference_model_probs().dense(21)
    log_evidence = problem.log_evidence()
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(probs.numpy(), torch.softmax(log_evidence, 0).numpy(), rtol=1e-12, atol=0)
    assert problem.exact_log_evidence() == pytest.approx(
        float(special.logsumexp(log_evidence.numpy()) - math.log(21)), abs=1e-12
    )
    # The values of docs/problems.md (AR(2) dominates, then 3, 4 and Tong's AR(11)).
    top = torch.argsort(probs, descending=True)[:4].tolist()
    assert top == [2, 3, 4, 11]
    assert float(probs[2]) == pytest.approx(0.819464, abs=1e-6)


def test_exact_draws_and_entropy_agree_with_monte_carlo(problem: LynxAR) -> None:
    # 40,000 exact draws: order frequencies within 5 binomial se, and H = -E[log pi(p, theta) - log Z] within
    # 5 Monte Carlo se (the sd of log pi over draws is ~3.5, so the se is ~0.02).
    draws = problem.reference_draws(40_000, torch.Generator().manual_seed(11))
    probs = problem.reference_model_probs().dense(21)
    freq = torch.bincount(draws.model_index, minlength=21).double() / len(draws)
    se = (probs * (1 - probs) / len(draws)).sqrt()
    assert bool(((freq - probs).abs() <= 5 * se + 1e-12).all())
    assert bool((draws.theta[~problem.mask(draws.model_index)] == 0).all())
    log_density = problem.log_joint(draws.model_index, draws.theta) - problem.exact_log_evidence()
    estimate, mc_se = -float(log_density.mean()), float(log_density.std()) / math.sqrt(len(draws))
    assert problem.exact_entropy() == pytest.approx(estimate, abs=5 * mc_se)


def test_training_draws_are_exact_and_not_the_scoring_draws(problem: LynxAR) -> None:
    scoring = problem.reference_draws(500, torch.Generator().manual_seed(1))
    training = problem.training_draws(500, torch.Generator().manual_seed(1))
    assert not torch.equal(scoring.theta, training.theta)
    assert bool(torch.isfinite(problem.log_joint(training.model_index, training.theta)).all())


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_order": 0}, "max_order"),
        ({"prior": "ridge"}, "independent, g"),
        ({"g": -1.0}, "g must be positive"),
        ({"b0": 0.0}, "b0 must be positive"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        LynxAR(**kwargs)
