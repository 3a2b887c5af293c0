"""conjugate-vs: exact evidence, model probabilities, draws and entropy against independent computations."""

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from problems.conjugate_vs.problem import ConjugateVS
from suite.core.registry import make_problem
from suite.store import references as store

VARIANTS = [(noise, prior) for noise in ("known", "inverse-gamma") for prior in ("independent", "g")]


def _one_model(problem: ConjugateVS, model: int, n: int) -> torch.Tensor:
    return torch.full((n,), model, dtype=torch.int64)


def _closed_form(problem: ConjugateVS, model: int) -> dict:
    """Posterior of one model written from scratch in numpy: P, mu, a_n, b_n (Lambda0 from the prior's definition)."""
    hyper = problem.hyper
    active = problem.mask(torch.tensor([model]))[0, : problem.num_coefficients].numpy()
    x, y = problem.x.numpy()[:, active], problem.y.numpy()
    gram = x.T @ x
    if hyper.prior == "g":
        lambda0 = gram / hyper.g
    else:
        lambda0 = np.eye(active.sum()) * (hyper.noise_variance if hyper.noise == "known" else 1.0)
        lambda0 /= hyper.prior_scale**2
    precision = gram + lambda0
    mu = np.linalg.solve(precision, x.T @ y)
    a_n = hyper.a0 + 0.5 * len(y)
    b_n = hyper.b0 + 0.5 * (y @ y - mu @ precision @ mu)
    return {"active": active, "precision": precision, "mu": mu, "a_n": a_n, "b_n": b_n}


def _grid_log_integral(problem: ConjugateVS, model: int, points: int = 81, width: float = 9.0) -> float:
    """log of the integral of exp(log_joint(model, .)) over a trapezoid grid of +-width posterior sds per axis."""
    cf = _closed_form(problem, model)
    cov = np.linalg.inv(cf["precision"])
    if problem.hyper.noise == "known":
        centre, scale = cf["mu"], np.sqrt(problem.hyper.noise_variance * np.diag(cov))
    else:  # (beta, u = log s2): centre u at its mode log(b_n / a_n), scale by its sd sqrt(trigamma(a_n))
        s2 = cf["b_n"] / cf["a_n"]
        centre = np.append(cf["mu"], math.log(s2))
        scale = np.append(np.sqrt(s2 * np.diag(cov)), math.sqrt(special.polygamma(1, cf["a_n"])))
    axes = [
        torch.linspace(c - width * s, c + width * s, points, dtype=torch.float64)
        for c, s in zip(centre, scale, strict=True)
    ]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))
    theta = torch.zeros(len(grid), problem.dim_max, dtype=torch.float64)
    theta[:, problem.mask(torch.tensor([model]))[0]] = grid
    log_joint = problem.log_joint(_one_model(problem, model, len(grid)), theta)
    shift = log_joint.max()
    values = (log_joint - shift).exp().reshape([points] * len(axes))
    for axis in reversed(axes):
        values = torch.trapezoid(values, axis, dim=-1)
    return float(shift + values.log())


@pytest.mark.parametrize(("noise", "prior"), VARIANTS)
def test_evidence_matches_numerical_integration_for_one_covariate(noise: str, prior: str) -> None:
    # p = 1: the intercept-only model (1 or 2 integrated coordinates) and intercept + x1 (2 or 3). The
    # integrands are smooth and decay like Gaussians, so the trapezoid rule on +-9 sds with 81 points
    # per axis is accurate to far below 1e-6 (the grid has at most 81^3 = 531,441 points).
    problem = ConjugateVS(1, noise=noise, prior=prior, num_observations=20, data_seed=3)
    log_evidence = problem.log_evidence()
    for model in (0, 1):
        numerical = _grid_log_integral(problem, model)
        assert numerical == pytest.approx(float(log_evidence[model]) - math.log(2.0), abs=1e-6)


@pytest.mark.parametrize(("noise", "prior"), VARIANTS)
def test_log_joint_is_evidence_times_posterior_density(noise: str, prior: str) -> None:
    # log pi(m, theta) - log p(theta | m, y) = log p(y | m) + log p(m) for every theta; the posterior
    # density is written here from scratch with scipy (N(mu, s2 P^-1), times IG(s2) s2 for the log-s2 coordinate).
    problem = ConjugateVS(5, noise=noise, prior=prior, num_observations=30, data_seed=2)
    rng = np.random.default_rng(0)
    for model in (0, 5, 31):
        cf = _closed_form(problem, model)
        k = int(cf["active"].sum())
        full_mask = problem.mask(torch.tensor([model]))[0].numpy()
        theta = np.zeros((50, problem.dim_max))
        beta = cf["mu"] + rng.normal(size=(50, k)) * 0.3
        theta[:, np.flatnonzero(full_mask)[:k]] = beta
        if noise == "known":
            s2 = np.full(50, problem.hyper.noise_variance)
            log_post = np.zeros(50)
        else:
            u = math.log(cf["b_n"] / cf["a_n"]) + rng.normal(size=50) * 0.5
            theta[:, -1] = u
            s2 = np.exp(u)
            log_post = stats.invgamma.logpdf(s2, cf["a_n"], scale=cf["b_n"]) + u
        cov = np.linalg.inv(cf["precision"])
        log_post = log_post + np.array(
            [stats.multivariate_normal(cf["mu"], s * cov).logpdf(b) for s, b in zip(s2, beta, strict=True)]
        )
        got = problem.log_joint(_one_model(problem, model, 50), torch.from_numpy(theta)).numpy() - log_post
        expected = float(problem.log_evidence()[model]) - 5 * math.log(2.0)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)


def test_registered_p8_has_exact_normalised_probabilities_and_a_non_trivial_posterior() -> None:
    problem = make_problem("conjugate-vs-p8")
    truth = problem.reference_model_probs()
    assert truth.prob.shape == (256,) and (truth.se == 0).all()
    assert truth.total() == pytest.approx(1.0, abs=1e-12)
    entropy_m = -float(torch.xlogy(truth.prob, truth.prob).sum())
    assert 0.05 < float(truth.prob.max()) < 0.4 and entropy_m > 2.0  # many models carry mass
    log_z = torch.logsumexp(problem.log_evidence() + problem.log_model_prior(torch.arange(256)), 0)
    assert problem.exact_log_evidence() == pytest.approx(float(log_z), abs=1e-12)
    assert store.has_exact_reference(problem) and store.describe(problem) == {"kind": "exact"}


@pytest.mark.parametrize("noise", ["known", "inverse-gamma"])
def test_exact_draws_match_the_closed_form_posterior_of_the_top_model(noise: str) -> None:
    # The top model's draws (about 27,000 of 100,000): means within 4.5 standard errors, covariance entries
    # within 4.5 of their Gaussian standard errors sqrt((S_ii S_jj + S_ij^2) / N) (beta is Student-t with
    # 2 a_n = 102 degrees of freedom under IG noise, close enough to Gaussian for this bound).
    problem = ConjugateVS(8, noise=noise)
    truth = problem.reference_model_probs()
    model = int(truth.prob.argmax())
    draws = problem.reference_draws(100_000, torch.Generator().manual_seed(5))
    freq = float((draws.model_index == model).double().mean())
    p = float(truth.prob[model])
    assert abs(freq - p) < 4.5 * math.sqrt(p * (1 - p) / 100_000)
    theta = draws.theta[draws.model_index == model][:, problem.mask(torch.tensor([model]))[0]].numpy()
    cf = _closed_form(problem, model)
    cov = np.linalg.inv(cf["precision"])
    if noise == "known":
        mean, cov = cf["mu"], problem.hyper.noise_variance * cov
    else:
        a_n, b_n = cf["a_n"], cf["b_n"]
        mean = np.append(cf["mu"], math.log(b_n) - special.digamma(a_n))
        # Cov(beta) = E[s2] P^-1 = b_n / (a_n - 1) P^-1; u = log s2 is uncorrelated with beta (E[beta | u] = mu).
        k = len(cf["mu"])
        full = np.zeros((k + 1, k + 1))
        full[:k, :k] = b_n / (a_n - 1) * cov
        full[k, k] = special.polygamma(1, a_n)
        cov = full
    n = len(theta)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(theta.mean(0) - mean) < 4.5 * sd / math.sqrt(n))
    cov_se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / n)
    assert np.all(np.abs(np.cov(theta, rowvar=False) - cov) < 4.5 * cov_se)


@pytest.mark.parametrize(("noise", "prior"), VARIANTS)
def test_exact_entropy_matches_monte_carlo(noise: str, prior: str) -> None:
    # H(m, theta) = -E[log pi(m, theta) - log Z] over exact draws; 40,000 draws, within 4 standard errors.
    problem = ConjugateVS(6, noise=noise, prior=prior, num_observations=40, data_seed=4)
    draws = problem.reference_draws(40_000, torch.Generator().manual_seed(6))
    values = -(problem.log_joint(draws.model_index, draws.theta) - problem.exact_log_evidence())
    se = float(values.std()) / math.sqrt(len(values))
    assert abs(float(values.mean()) - problem.exact_entropy()) < 4 * se


def test_training_draws_are_exact_but_never_the_scoring_draws() -> None:
    problem = ConjugateVS(4)
    scoring = problem.reference_draws(1000, torch.Generator().manual_seed(0))
    training = problem.training_draws(1000, torch.Generator().manual_seed(0))
    assert not torch.equal(scoring.theta, training.theta)
    assert (training.theta[~problem.mask(training.model_index)] == 0).all()
    again = problem.training_draws(1000, torch.Generator().manual_seed(0))
    assert torch.equal(training.theta, again.theta)  # reproducible by seed


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_covariates": 0},
        {"num_covariates": 25},
        {"num_covariates": 3.0},
        {"noise": "student"},
        {"prior": "horseshoe"},
        {"correlation": 1.0},
        {"num_observations": 5, "num_covariates": 4},
        {"data_seed": "1"},
        {"prior_scale": 0.0},
        {"g": -1.0},
        {"noise_variance": math.inf},
        {"a0": 0},
        {"b0": -2.0},
    ],
)
def test_invalid_options_raise_value_errors(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ConjugateVS(**kwargs)


def test_sweep_registration_and_profiles() -> None:
    for p in (8, 12, 16, 20):
        problem = make_problem(f"conjugate-vs-p{p}")
        assert problem.num_models == 2**p and problem.dim_max == p + 2  # default noise: inverse-gamma
        assert type(problem).sweep[1] == p
    assert "quick" not in type(make_problem("conjugate-vs-p8")).planned_in  # per-model VI on 256 models: 4.5 min
    assert type(make_problem("conjugate-vs-p20")).planned_in == ("paper",)
    variant = make_problem("conjugate-vs-p12", noise="known", prior="independent", data_seed=3)
    assert variant.dim_max == 13 and variant.config()["num_covariates"] == 12 and variant.config()["data_seed"] == 3


@pytest.mark.slow
@pytest.mark.xdist_group("exact-conjugate-vs-p20")  # the 2^20 evidences, computed once per process
def test_p20_enumerates_all_models_and_draws_exactly() -> None:
    # 2^20 = 1,048,576 models in chunks: about 10 s on the 2-core CI machine, peak memory under 0.6 GB.
    problem = make_problem("conjugate-vs-p20")
    truth = problem.reference_model_probs()
    assert truth.prob.shape == (2**20,) and torch.isfinite(problem.log_evidence()).all()
    assert truth.total() == pytest.approx(1.0, abs=1e-9)
    assert math.isfinite(problem.exact_entropy()) and math.isfinite(problem.exact_log_evidence())
    draws = problem.reference_draws(2000, torch.Generator().manual_seed(0))
    assert torch.isfinite(problem.log_joint(draws.model_index, draws.theta)).all()


@pytest.mark.parametrize(("noise", "prior"), VARIANTS)
def test_every_variant_agrees_across_dtypes_and_backends(noise: str, prior: str) -> None:
    # The registered instances cover one variant in the conformance tests; here all four: float32 within the
    # conformance bound (1e-4 relative, 1e-3 absolute) and JAX float64 within 1e-10 of torch, NaN-free on
    # inactive coordinates, at exact draws and at random points.
    import jax.numpy as jnp

    from suite.core.backend import jax_backend

    xp = jax_backend()
    problem = ConjugateVS(6, noise=noise, prior=prior)
    draws = problem.reference_draws(500, torch.Generator().manual_seed(7))
    lp64 = problem.log_joint(draws.model_index, draws.theta)
    torch.testing.assert_close(
        problem.log_joint(draws.model_index, draws.theta.float()).double(), lp64, rtol=1e-4, atol=1e-3
    )
    garbage = torch.where(problem.mask(draws.model_index), draws.theta, math.nan)
    torch.testing.assert_close(problem.log_joint(draws.model_index, garbage), lp64)
    theta = torch.randn(500, problem.dim_max, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    for m, t in ((draws.model_index, draws.theta), (draws.model_index, theta)):
        got = np.asarray(problem.log_joint_with(xp, jnp.asarray(m.numpy()), jnp.asarray(t.numpy())))
        np.testing.assert_allclose(got, problem.log_joint(m, t).numpy(), rtol=1e-12, atol=1e-10)
