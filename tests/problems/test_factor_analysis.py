"""factor-analysis: data, layout, likelihood and prior against scipy, prior sampling, variants (TRJ sec. 4.2)."""

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

import problems.factor_analysis.problem as fa
from suite.core.backend import TORCH
from suite.core.registry import make_problem
from suite.data.locate import DataUnavailable

DIAG_SLOTS = (0, 6, 11)


def _shipped(name: str = "factor-analysis") -> fa.FactorAnalysis:
    problem = make_problem(name)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


@pytest.fixture(scope="module")
def real() -> fa.FactorAnalysis:
    return _shipped()


@pytest.fixture(scope="module")
def simulated() -> fa.SimulatedFactorAnalysis:
    return make_problem("factor-analysis-simulated")


def loading_matrix(theta: np.ndarray, k: int) -> np.ndarray:
    """B (6 x 3) from one saturated vector, written out slot by slot from the documented layout."""
    b = np.zeros((6, 3))
    slot = 0
    for col in range(3):
        for row in range(col, 6):
            if col < k:
                b[row, col] = math.exp(theta[slot]) if row == col else theta[slot]
            slot += 1
    return b


def plausible_theta(num: int, seed: int) -> torch.Tensor:
    """Parameters in a region of moderate likelihood: loadings ~ N(0, 0.5), log beta_cc, log lambda ~ N(-1, 0.3)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 0.5, size=(num, 21))
    theta[:, list(DIAG_SLOTS)] = rng.normal(-0.5, 0.3, size=(num, 3))
    theta[:, 15:] = rng.normal(-1.0, 0.3, size=(num, 6))
    return torch.from_numpy(theta)


def test_shipped_data_matches_the_spec(real: fa.FactorAnalysis) -> None:
    y = real.data.numpy()
    assert y.shape == (143, 6) and y.dtype == np.float64
    np.testing.assert_allclose(y[0], fa.DATA_ROW_0, atol=1e-8)
    np.testing.assert_allclose(y.mean(0), 0.0, atol=1e-10)
    np.testing.assert_allclose((y**2).sum(0), 142.0, rtol=1e-10)
    np.testing.assert_allclose(real.scatter.numpy(), y.T @ y, rtol=1e-12)
    assert real.config() == {"factors": [1, 2, 3], "data": "fa_exchange_rates.npy"}


def test_models_parameter_counts_and_masks(real: fa.FactorAnalysis) -> None:
    assert real.dim_max == 21 and real.model_space.labels == ["k=1", "k=2", "k=3"]
    models = real.model_space.all_indices()
    # 6(k+1) - k(k-1)/2 parameters for k = 1, 2, 3.
    assert real.model_dim(models).tolist() == [12, 17, 21]
    mask = real.mask(models)
    assert mask[0, :6].all() and not mask[0, 6:15].any() and mask[0, 15:].all()
    assert mask[1, :11].all() and not mask[1, 11:15].any() and mask[1, 15:].all()
    assert mask[2].all()
    torch.testing.assert_close(real.log_model_prior(models), torch.full((3,), -math.log(3), dtype=torch.float64))


def test_restricted_model_set_shares_the_layout(real: fa.FactorAnalysis) -> None:
    k23 = _shipped("factor-analysis-k23")
    assert k23.model_space.labels == ["k=2", "k=3"] and k23.dim_max == 21
    assert k23.config()["factors"] == [2, 3]
    assert k23.model_dim(k23.model_space.all_indices()).tolist() == [17, 21]
    half = torch.full((2,), -math.log(2), dtype=torch.float64)
    torch.testing.assert_close(k23.log_model_prior(torch.tensor([0, 1])), half)
    theta = plausible_theta(50, seed=1)
    for label in ("k=2", "k=3"):
        m_full = torch.full((50,), real.model_space.index(label))
        m_k23 = torch.full((50,), k23.model_space.index(label))
        restricted, full = k23.log_joint(m_k23, theta), real.log_joint(m_full, theta)
        torch.testing.assert_close(restricted + math.log(2), full + math.log(3), rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError):
        fa.FactorAnalysis(factors=(3, 2))
    with pytest.raises(ValueError):
        fa.FactorAnalysis(factors=(4,))


def test_covariance_is_built_from_the_layout(real: fa.FactorAnalysis) -> None:
    # A hand-filled lower-trapezoidal B with positive diagonal, written into theta by hand.
    b = np.array(
        [
            [0.9, 0.0, 0.0],
            [0.8, 0.3, 0.0],
            [-0.2, 0.5, 0.7],
            [0.4, -0.6, 0.1],
            [0.3, 0.2, -0.4],
            [0.1, 0.9, 0.25],
        ]
    )
    lam = np.array([0.1, 0.2, 0.3, 0.15, 0.25, 0.05])
    column_0 = [math.log(0.9), 0.8, -0.2, 0.4, 0.3, 0.1]
    column_1 = [math.log(0.3), 0.5, -0.6, 0.2, 0.9]
    column_2 = [math.log(0.7), 0.1, -0.4, 0.25]
    theta = np.concatenate([column_0, column_1, column_2, np.log(lam)])
    y = real.data.numpy()
    for k in (1, 2, 3):
        bk = b[:, :k]
        sigma = bk @ bk.T + np.diag(lam)
        m = torch.tensor([k - 1])
        t = torch.from_numpy(theta)[None].clone()
        t[~real.mask(m)] = 0.0
        np.testing.assert_allclose(real.covariance(m, t)[0].numpy(), sigma, rtol=1e-13, atol=1e-15)
        log_lik = real.log_joint(m, t) - real.log_model_prior(m) - real.log_prior_with(TORCH, m, t)
        expected = stats.multivariate_normal(np.zeros(6), sigma).logpdf(y).sum()
        assert log_lik.item() == pytest.approx(expected, rel=1e-11)


@pytest.mark.parametrize("problem_name", ["factor-analysis", "factor-analysis-simulated"])
def test_likelihood_matches_scipy(problem_name: str) -> None:
    problem = _shipped(problem_name)
    theta = plausible_theta(60, seed=2)
    m = torch.arange(60) % 3
    log_lik = problem.log_joint(m, theta) - problem.log_model_prior(m) - problem.log_prior_with(TORCH, m, theta)
    y = problem.data.numpy()
    for i in range(60):
        b = loading_matrix(theta[i].numpy(), int(m[i]) + 1)
        sigma = b @ b.T + np.diag(np.exp(theta[i, 15:].numpy()))
        expected = stats.multivariate_normal(np.zeros(6), sigma).logpdf(y).sum()
        assert log_lik[i].item() == pytest.approx(expected, rel=1e-11, abs=1e-8)


def test_prior_matches_scipy_with_log_jacobians(real: fa.FactorAnalysis) -> None:
    rng = np.random.default_rng(3)
    theta = torch.from_numpy(rng.normal(0.0, 1.5, size=(90, 21)))
    m = torch.arange(90) % 3
    got = real.log_prior_with(TORCH, m, theta).numpy()
    mask = real.mask(m).numpy()
    for i in range(90):
        t, expected = theta[i].numpy(), 0.0
        for slot in np.flatnonzero(mask[i, :15]):
            if slot in DIAG_SLOTS:  # beta_cc = exp(u): half-normal density times the Jacobian e^u
                expected += stats.halfnorm.logpdf(math.exp(t[slot])) + t[slot]
            else:
                expected += stats.norm.logpdf(t[slot])
        lam = np.exp(t[15:])
        expected += (stats.invgamma.logpdf(lam, 1.1, scale=0.05) + t[15:]).sum()
        assert got[i] == pytest.approx(expected, rel=1e-12, abs=1e-10)


def test_prior_ignores_inactive_nan(real: fa.FactorAnalysis) -> None:
    theta = plausible_theta(30, seed=4)
    m = torch.arange(30) % 3
    garbage = torch.where(real.mask(m), theta, torch.full_like(theta, math.nan))
    torch.testing.assert_close(real.log_prior_with(TORCH, m, garbage), real.log_prior_with(TORCH, m, theta))


def test_sample_prior_moments(real: fa.FactorAnalysis) -> None:
    n = 200_000
    gen = torch.Generator().manual_seed(5)
    m = torch.arange(n) % 3
    theta = real.sample_prior(m, gen)
    assert theta.dtype == torch.float64 and theta.shape == (n, 21)
    assert (theta[~real.mask(m)] == 0).all()

    def check(x: torch.Tensor, mean: float, var: float) -> None:
        # sample mean within 5 standard errors; sample variance within 5 % (n >= 66k draws each)
        assert abs(x.mean().item() - mean) < 5 * math.sqrt(var / len(x))
        assert x.var().item() == pytest.approx(var, rel=0.05)

    # log lambda = log 0.05 - log G, G ~ Gamma(1.1, 1): mean log 0.05 - digamma(1.1), variance trigamma(1.1).
    log_lambda = theta[:, 15:].flatten()
    check(log_lambda, math.log(0.05) - special.digamma(1.1), special.polygamma(1, 1.1))
    # log |Z|, Z ~ N(0, 1): mean (digamma(1/2) + log 2) / 2, variance trigamma(1/2) / 4 = pi^2 / 8.
    active = real.mask(m)
    diag = theta[:, list(DIAG_SLOTS)][active[:, list(DIAG_SLOTS)]]
    check(diag, (special.digamma(0.5) + math.log(2)) / 2, math.pi**2 / 8)
    off = [s for s in range(15) if s not in DIAG_SLOTS]
    check(theta[:, off][active[:, off]], 0.0, 1.0)
    assert torch.isfinite(real.log_joint(m[:1000], theta[:1000])).all()
    # Same generator seed, same draws.
    torch.testing.assert_close(
        real.sample_prior(m[:100], torch.Generator().manual_seed(6)),
        real.sample_prior(m[:100], torch.Generator().manual_seed(6)),
    )


def test_simulated_data_is_seeded_and_standardised(simulated: fa.SimulatedFactorAnalysis) -> None:
    y = simulated.data
    assert y.shape == (143, 6)
    torch.testing.assert_close(y.mean(0), torch.zeros(6, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close((y**2).sum(0), torch.full((6,), 142.0, dtype=torch.float64))
    assert torch.equal(fa.SimulatedFactorAnalysis(data_seed=0).data, y)
    assert not torch.allclose(fa.SimulatedFactorAnalysis(data_seed=1).data, y)
    assert simulated.config() == {"factors": [1, 2, 3], "data": "simulated", "data_seed": 0}
    assert simulated.unavailable_reason() is None
    # The two-factor structure shows in the data: two eigenvalues of the correlation matrix well above the rest.
    eig = torch.linalg.eigvalsh(torch.corrcoef(y.T)).flip(0)
    assert eig[1] > 2 * eig[2]


def test_float32_and_gradients(real: fa.FactorAnalysis) -> None:
    theta = plausible_theta(64, seed=7)
    m = torch.arange(64) % 3
    lp64 = real.log_joint(m, theta)
    lp32 = real.log_joint(m, theta.float())
    assert lp32.dtype == torch.float32
    torch.testing.assert_close(lp32.double(), lp64, rtol=1e-4, atol=1e-2)
    t = theta.clone().requires_grad_(True)
    real.log_joint(m, t).sum().backward()
    assert torch.isfinite(t.grad).all()
    assert (t.grad[~real.mask(m)] == 0).all()


def test_degenerate_covariance_gives_minus_inf(real: fa.FactorAnalysis) -> None:
    theta = plausible_theta(3, seed=8)
    theta[:, 15:] = -800.0  # lambda underflows to 0: Sigma = B B^T has rank k < 6, not positive definite
    lp = real.log_joint(torch.arange(3), theta)
    assert (lp == -math.inf).all()


def test_missing_or_wrong_data_makes_the_problem_unavailable(monkeypatch, tmp_path) -> None:
    def missing(name: str):
        raise DataUnavailable(f"data file {name!r} not found")

    monkeypatch.setattr(fa, "locate", missing)
    problem = fa.FactorAnalysisK23()
    assert "not found" in problem.unavailable_reason()
    with pytest.raises(DataUnavailable):
        problem.log_joint(torch.tensor([0]), torch.zeros(1, 21, dtype=torch.float64))

    wrong = tmp_path / "fa.npy"
    np.save(wrong, np.zeros((143, 6)))
    monkeypatch.setattr(fa, "locate", lambda name: wrong)
    assert "first row" in fa.FactorAnalysis().unavailable_reason()


def test_stored_reference_two_factor_probability() -> None:
    """The shipped reference of factor-analysis-k23 against Lopes & West's P(k=2) = 0.88 (TRJ sec. 4.2).

    SMC alone (4 runs x 4,000 particles, 100 random-walk moves per temperature) gave 0.92 ± 0.01: it put the
    3-factor evidence 0.3-0.5 nats low, more than its stated errors. The reference now takes the evidences from
    bridge sampling (Gaussian-mixture proposal, NUTS draws for k=3, SMC particles for k=2), which gives
    0.888 ± 0.002, within the issue's tolerance of 0.03.
    """
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    reference = problem.stored_reference()
    assert reference is not None, "factor-analysis-k23 reference is not shipped"
    p2 = float(reference.prob[0])
    assert abs(p2 - 0.88) <= 0.03, f"reference P(k=2) = {p2:.3f} ± {reference.prob_se[0]:.3f}, reported 0.88"


def test_full_and_restricted_references_agree_on_two_versus_three_factors() -> None:
    """Two independent bridge-sampling references: P(k=2 | {2,3}) from factor-analysis against -k23.

    Each reference's evidences come from its own SMC, NUTS and bridge runs (other seeds, other model priors),
    so their agreement within 4 combined standard errors checks the stated Monte Carlo errors.
    """
    full, k23 = make_problem("factor-analysis"), make_problem("factor-analysis-k23")
    if full.unavailable_reason():
        pytest.skip(full.unavailable_reason())
    a, b = full.stored_reference(), k23.stored_reference()
    assert a is not None and b is not None, "factor-analysis references are not shipped"
    two, three = full.model_space.index("k=2"), full.model_space.index("k=3")
    p_full = a.prob[two] / (a.prob[two] + a.prob[three])
    se_full = a.prob_se[three] / (a.prob[two] + a.prob[three])
    k23_two = k23.model_space.index("k=2")
    assert abs(p_full - b.prob[k23_two]) < 4 * np.hypot(se_full, b.prob_se[k23_two])
