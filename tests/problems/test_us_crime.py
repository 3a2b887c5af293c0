"""us-crime: exact evidences, model and inclusion probabilities, draws and entropy against independent computations."""

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from problems.us_crime import hyper_g, posterior
from problems.us_crime.data import COVARIATES, load_uscrime
from problems.us_crime.problem import USCrime, log_model_prior_table
from suite.core.types import ModelProbs
from suite.data.locate import locate, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason("UScrime.csv") is not None, reason="UScrime.csv is not available")


@pytest.fixture(scope="module")
def problem() -> USCrime:
    return USCrime()


def _bits(model: int) -> np.ndarray:
    return np.array([(model >> j) & 1 for j in range(15)], dtype=bool)


def _lstsq_r2(problem: USCrime, model: int) -> float:
    """R^2 from numpy's least squares on the design with an intercept column."""
    y, n = problem.y.numpy(), len(problem.y)
    x = np.column_stack([np.ones(n), problem.x.numpy()[:, _bits(model)]])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return 1 - np.sum((y - x @ coef) ** 2) / np.sum((y - y.mean()) ** 2)


def _lstsq_log_evidence(problem: USCrime, model: int) -> float:
    """Liang et al.'s closed form with R^2 from numpy's least squares."""
    y, g, n = problem.y.numpy(), problem.g, len(problem.y)
    sst = np.sum((y - y.mean()) ** 2)
    r2 = _lstsq_r2(problem, model)
    k = int(_bits(model).sum())
    return (
        special.gammaln((n - 1) / 2)
        - (n - 1) / 2 * math.log(math.pi)
        - 0.5 * math.log(n)
        - (n - 1) / 2 * math.log(sst)
        + (n - 1 - k) / 2 * math.log1p(g)
        - (n - 1) / 2 * math.log1p(g * (1 - r2))
    )


def _posterior_log_density(problem: USCrime, model: int, theta: np.ndarray, g: float | None = None) -> np.ndarray:
    """log p(alpha, beta_gamma, u | gamma, g, y) from scratch (IG, then Gaussians given s2)."""
    y, n = problem.y.numpy(), len(problem.y)
    g = problem.g if g is None else g
    active = _bits(model)
    x = problem.x.numpy()[:, active]
    yc = y - y.mean()
    gram = x.T @ x
    ols = np.linalg.solve(gram, x.T @ yc) if active.any() else np.zeros(0)
    fit = yc @ x @ ols if active.any() else 0.0
    rate = 0.5 * (yc @ yc - g / (1 + g) * fit)
    alpha, beta, u = theta[:, 0], theta[:, 1:16][:, active], theta[:, 16]
    s2 = np.exp(u)
    out = stats.invgamma.logpdf(s2, (n - 1) / 2, scale=rate) + u + stats.norm.logpdf(alpha, y.mean(), np.sqrt(s2 / n))
    if active.any():
        cov = g / (1 + g) * np.linalg.inv(gram)
        out += [stats.multivariate_normal.logpdf(b, g / (1 + g) * ols, v * cov) for b, v in zip(beta, s2, strict=True)]
    return out


def test_data_follow_raftery_madigan_hoeting() -> None:
    # All variables logged except So (0/1), the response too; covariates centred.
    data = load_uscrime()
    raw = np.genfromtxt(locate("UScrime.csv"), delimiter=",", skip_header=1)[:, 1:]
    so = COVARIATES.index("So")
    np.testing.assert_allclose(data.x[:, so].numpy(), raw[:, so] - raw[:, so].mean(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(data.x[:, 0].numpy(), np.log(raw[:, 0]) - np.log(raw[:, 0]).mean(), atol=1e-14)
    np.testing.assert_allclose(data.y.numpy(), np.log(raw[:, -1]), atol=1e-14)
    assert data.x.shape == (47, 15)


def test_evidences_match_least_squares_on_random_models(problem: USCrime) -> None:
    # The batched Cholesky R^2 against numpy's least squares (another algorithm, uncentred design with intercept).
    gen = np.random.default_rng(0)
    models = [0, 2**15 - 1, *gen.integers(0, 2**15, 40).tolist()]
    log_evidence = problem.log_evidence()
    for model in models:
        assert float(log_evidence[model]) == pytest.approx(_lstsq_log_evidence(problem, model), abs=1e-8)


def test_log_joint_is_evidence_times_posterior_density(problem: USCrime) -> None:
    # log pi(gamma, theta) - log p(theta | gamma, y) = log p(y | gamma) + log p(gamma) at every theta; the posterior
    # density is written from scratch in numpy/scipy. This ties log_joint to the closed-form evidence.
    gen = torch.Generator().manual_seed(4)
    for model in (0, 1, 0b101000001010101, 2**15 - 1):
        theta = torch.randn(5, problem.dim_max, generator=gen, dtype=torch.float64) * 0.2
        theta[:, 0] += 6.7
        theta[:, 16] -= 3.0
        index = torch.full((5,), model, dtype=torch.int64)
        mask = problem.mask(index)
        theta = torch.where(mask, theta, 0.0)
        got = problem.log_joint(index, theta).numpy() - _posterior_log_density(problem, model, theta.numpy())
        expected = float(problem.log_evidence()[model]) - 15 * math.log(2)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)


def test_evidence_of_the_null_model_matches_numerical_integration(problem: USCrime) -> None:
    # The intercept-only model: integrate exp(log_joint) over (alpha, u) on a trapezoid grid of +-12 posterior sds
    # with 401 points per axis (the integrand is smooth; the truncation and grid errors are below 1e-9).
    y, n = problem.y.numpy(), len(problem.y)
    a_n, rate = (n - 1) / 2, 0.5 * np.sum((y - y.mean()) ** 2)
    u_mode, u_sd = math.log(rate / a_n), math.sqrt(special.polygamma(1, a_n))
    alpha_sd = math.sqrt(rate / a_n / n)
    alpha = torch.linspace(y.mean() - 14 * alpha_sd, y.mean() + 14 * alpha_sd, 401, dtype=torch.float64)
    u = torch.linspace(u_mode - 14 * u_sd, u_mode + 14 * u_sd, 401, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(alpha, u, indexing="ij"), -1).reshape(-1, 2)
    theta = torch.zeros(len(grid), problem.dim_max, dtype=torch.float64)
    theta[:, 0], theta[:, 16] = grid[:, 0], grid[:, 1]
    log_joint = problem.log_joint(torch.zeros(len(grid), dtype=torch.int64), theta)
    shift = log_joint.max()
    values = torch.trapezoid(torch.trapezoid((log_joint - shift).exp().reshape(401, 401), u, dim=-1), alpha)
    numerical = float(shift + values.log()) + 15 * math.log(2)
    assert numerical == pytest.approx(float(problem.log_evidence()[0]), abs=1e-8)


def test_model_and_inclusion_probabilities_by_enumeration(problem: USCrime) -> None:
    # Inclusion probabilities summed model by model over itertools' bit strings (not a matrix product).
    prob = problem.posterior_model_probs().numpy()
    assert prob.sum() == pytest.approx(1.0, abs=1e-12)
    totals = np.zeros(15)
    for model, bits in enumerate(itertools.product((0, 1), repeat=15)):
        totals += prob[model] * np.array(bits[::-1])  # product() varies the last entry fastest: reverse to bit j
    np.testing.assert_allclose(problem.inclusion_probabilities().numpy(), totals, rtol=0, atol=1e-12)
    # The figures of docs/problems.md.
    best = int(np.argmax(prob))
    assert problem.model_label(best) == "M+Ed+Po1+NW+U2+Ineq+Prob"
    assert prob[best] == pytest.approx(0.0246958, abs=1e-7)
    ineq = COVARIATES.index("Ineq")
    assert float(problem.inclusion_probabilities()[ineq]) == pytest.approx(0.99749, abs=1e-5)


def test_beta_binomial_model_prior() -> None:
    # p(gamma) = B(1 + k, 1 + p - k) / B(1, 1) sums to one over all 2^15 subsets, and is 1 / 16 per model size.
    table = log_model_prior_table("beta-binomial")
    sizes = torch.tensor([special.comb(15, k) for k in range(16)], dtype=torch.float64)
    np.testing.assert_allclose((table.exp() * sizes).numpy(), np.full(16, 1 / 16), rtol=1e-12)
    expected = [special.betaln(1 + k, 16 - k) - special.betaln(1, 1) for k in range(16)]
    np.testing.assert_allclose(table.numpy(), expected, rtol=0, atol=1e-12)


def test_exact_draws_and_entropy_agree_with_monte_carlo(problem: USCrime) -> None:
    # 40,000 exact draws: inclusion frequencies within 5 binomial se, and H = -E[log pi - log Z] within 5 se.
    draws = problem.reference_draws(40_000, torch.Generator().manual_seed(9))
    freq = problem.model_space.bits(draws.model_index).double().mean(0)
    truth = problem.inclusion_probabilities()
    se = (truth * (1 - truth) / len(draws)).sqrt()
    assert bool(((freq - truth).abs() <= 5 * se).all())
    assert bool((draws.theta[~problem.mask(draws.model_index)] == 0).all())
    log_density = problem.log_joint(draws.model_index, draws.theta) - problem.exact_log_evidence()
    estimate, mc_se = -float(log_density.mean()), float(log_density.std()) / math.sqrt(len(draws))
    assert problem.exact_entropy() == pytest.approx(estimate, abs=5 * mc_se)
    training = problem.training_draws(100, torch.Generator().manual_seed(9))
    assert not torch.equal(training.model_index, draws.model_index[:100])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"model_prior": "flat"}, "uniform, beta-binomial"),
        ({"g": 0}, "g"),
        ({"g_prior": "zs"}, "fixed, hyper-g"),
        ({"g_prior": "hyper-g", "hyper_a": 2.0}, "hyper_a"),
        ({"g_prior": "hyper-g", "g": 10.0}, "g is random"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        USCrime(**kwargs)


# ------------------------------------------------------------------------------------------------ hyper-g prior
HYPER_MODELS = (0, 1, 0b101000001010101, 0b110100100110101, 2**15 - 1)


@pytest.fixture(scope="module")
def hyper() -> USCrime:
    return USCrime(g_prior="hyper-g")  # cheap: the 2^15 grid integrals run only when an exact answer is asked for


def _factors(problem: USCrime, models: tuple[int, ...]) -> posterior.SubsetFactors:
    return posterior.subset_factors(problem.design, problem.model_space.bits(torch.tensor(models)))


def test_hyper_g_evidence_matches_the_hypergeometric_closed_form(hyper: USCrime) -> None:
    # Liang et al. (2008, sec. 3.2): p(y | gamma) / p(y | null) = (a - 2) / (k + a - 2) 2F1((n-1)/2, 1; (k+a)/2; R^2),
    # and p(y | null) does not depend on g. scipy's hyp2f1 sums the (convergent, R^2 < 0.9) series.
    a, n = hyper.hyper_a, hyper.num_observations
    fac = _factors(hyper, HYPER_MODELS)
    got = hyper_g.log_evidence(hyper.design, fac, a).numpy()
    null = posterior.log_evidence_constant(hyper.design)
    for i, model in enumerate(HYPER_MODELS):
        k, r2 = int(_bits(model).sum()), float(fac.r2[i])
        expected = null + math.log((a - 2) / (k + a - 2)) + math.log(special.hyp2f1((n - 1) / 2, 1, (k + a) / 2, r2))
        assert got[i] == pytest.approx(expected, abs=1e-8)


def test_hyper_g_evidence_matches_scipy_quad_over_g(hyper: USCrime) -> None:
    # scipy.quad over g in (0, inf) of p(y | gamma, g) pi(g), written with the numpy least-squares R^2.
    a, n = hyper.hyper_a, hyper.num_observations
    got = hyper_g.log_evidence(hyper.design, _factors(hyper, HYPER_MODELS[1:4]), a).numpy()
    for i, model in enumerate(HYPER_MODELS[1:4]):
        k = int(_bits(model).sum())
        const = posterior.log_evidence_constant(hyper.design)
        one_minus_r2 = 1 - _lstsq_r2(hyper, model)

        def log_integrand(g: float, k: int = k, s: float = one_minus_r2) -> float:
            log_f = (n - 1 - k) / 2 * math.log1p(g) - (n - 1) / 2 * math.log1p(g * s) - a / 2 * math.log1p(g)
            return log_f + math.log((a - 2) / 2)

        shift = max(log_integrand(g) for g in np.geomspace(1e-3, 1e6, 200))

        def integrand(g: float, shift: float = shift, log_integrand: Callable = log_integrand) -> float:
            return math.exp(log_integrand(g) - shift)

        value = sum(
            integrate.quad(integrand, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]
            for lo, hi in ((0, 1), (1, 1e3), (1e3, np.inf))
        )
        assert got[i] == pytest.approx(const + shift + math.log(value), abs=1e-8)


def test_hyper_g_log_joint_is_evidence_times_posterior_density(hyper: USCrime) -> None:
    # log pi(gamma, theta) - log p(theta | gamma, y) = log p(y | gamma) + log p(gamma), where the posterior density is
    # p(w | gamma, y) p(alpha, beta, u | gamma, g, y): the second from scratch (numpy/scipy) at g = e^w, the first
    # the grid's integrand over its integral.
    gen = torch.Generator().manual_seed(6)
    fac = _factors(hyper, HYPER_MODELS)
    log_evidence = hyper_g.log_evidence(hyper.design, fac, hyper.hyper_a)
    for i, model in enumerate(HYPER_MODELS):
        theta = torch.randn(4, hyper.dim_max, generator=gen, dtype=torch.float64) * 0.2
        theta[:, 0] += 6.7
        theta[:, 16] -= 3.0
        theta[:, 17] = torch.tensor([-2.0, 0.5, 3.0, 6.0])
        index = torch.full((4,), model, dtype=torch.int64)
        theta = torch.where(hyper.mask(index), theta, 0.0)
        log_post = np.empty(4)
        for row in range(4):
            log_g = theta[row, 17]
            log_post[row] = _posterior_log_density(hyper, model, theta[row : row + 1, :17].numpy(), float(log_g.exp()))[
                0
            ]
            one = posterior.SubsetFactors(fac.chol[i], fac.half_log_det[i], fac.r2[i], fac.ols[i], fac.dims[i])
            log_w = hyper_g.log_integrand(
                hyper.design, posterior.SubsetFactors(*(t[None] for t in one.__dict__.values())), hyper.hyper_a, log_g
            )
            log_post[row] += float(log_w[0]) - float(log_evidence[i])
        got = hyper.log_joint(index, theta).numpy() - log_post
        np.testing.assert_allclose(got, float(log_evidence[i]) - 15 * math.log(2), rtol=0, atol=1e-8)


def test_hyper_g_draws_and_entropy_of_one_model_agree_with_monte_carlo(hyper: USCrime) -> None:
    # 20,000 exact draws of (w, alpha, beta, u) given the top model: E[w] against the grid's mean within 5 Monte Carlo
    # se, and H(theta | gamma) = -E[log p(theta | gamma, y)] within 5 se (sd of log p over draws ~3: se ~0.02).
    model = 0b110100100110101
    fac = _factors(hyper, (model,))
    log_ev = hyper_g.log_evidence(hyper.design, fac, hyper.hyper_a)
    gen = torch.Generator().manual_seed(8)
    rows = torch.zeros(20_000, dtype=torch.int64)
    log_g = hyper_g.sample_log_g(hyper.design, fac, hyper.hyper_a, rows, gen)
    w = hyper_g.grid()
    density = (hyper_g.log_integrand(hyper.design, fac, hyper.hyper_a, w)[0] - log_ev).exp()
    mean_w = float(hyper_g.STEP * (density * w).sum())
    assert float(log_g.mean()) == pytest.approx(mean_w, abs=5 * float(log_g.std()) / math.sqrt(len(log_g)))
    masks = hyper.model_space.bits(torch.full((20_000,), model))
    alpha, beta, log_s2 = posterior.sample_given_g(hyper.design, fac.take(rows), masks, log_g.exp(), gen)
    theta = torch.cat([alpha[:, None], beta, log_s2[:, None], log_g[:, None]], dim=1)
    index = torch.full((20_000,), model, dtype=torch.int64)
    log_density = hyper.log_joint(index, theta) - float(log_ev[0]) + 15 * math.log(2)
    entropy = float(hyper_g.entropy(hyper.design, fac, hyper.hyper_a, log_ev)[0])
    se = float(log_density.std()) / math.sqrt(len(log_density))
    assert entropy == pytest.approx(-float(log_density.mean()), abs=5 * se)


def test_inclusion_error_is_zero_for_the_exact_answer_and_the_distance_to_one_model_otherwise(problem: USCrime) -> None:
    """The exact q gives 0; a point mass on the top model gives max_j |bit_j - PIP_j|, written out by hand."""
    exact = problem.reference_model_probs()
    assert problem.task_metrics(exact, None)["inclusion_max_abs"].value == pytest.approx(0.0, abs=1e-12)
    top = int(exact.top(1).index[0])
    point = ModelProbs(torch.tensor([top]), torch.tensor([1.0], dtype=torch.float64))
    pip = problem.inclusion_probabilities().numpy()
    by_hand = max(abs(float((top >> j) & 1) - pip[j]) for j in range(len(COVARIATES)))
    assert problem.task_metrics(point, None)["inclusion_max_abs"].value == pytest.approx(by_hand, abs=1e-12)
    assert problem.task_metrics(None, None) == {}
