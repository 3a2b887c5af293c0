"""galaxy: the data parser, RG's prior against scipy, the change of variables, prior draws and the k = 1 evidence."""

import math

import numpy as np
import pytest
import torch
from scipy import special, stats
from torch import Tensor

from problems.galaxy.data import DATA_SETS, load, parse_mass_csv, parse_r_vector
from problems.galaxy.problem import ALPHA, DELTA, G_SHAPE, Galaxy
from problems.galaxy.quadrature import log_evidence_k1
from suite.core.backend import TORCH, jax_backend
from suite.data.locate import locate, unavailable_reason


@pytest.fixture(scope="module")
def galaxy() -> Galaxy:
    problem = Galaxy()
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


def constrained(problem: Galaxy, k: int, theta: Tensor) -> Tensor:
    """(beta, mu_1..k, tau_1..k, w_1..w_{k-1}) of one theta row, written independently of the problem's code."""
    k_max = problem.k_max
    beta = theta[0].exp()
    u = theta[1 : 1 + k]
    mu = torch.cat([u[:1], u[:1] + torch.cumsum(u[1:].exp(), 0)])
    tau = theta[1 + k_max : 1 + k_max + k].exp()
    logits = torch.cat([theta[1 + 2 * k_max : 2 * k_max + k], theta.new_zeros(1)])
    w = torch.softmax(logits, 0)
    return torch.cat([beta[None], mu, tau, w[:-1]])


def scipy_log_prior(problem: Galaxy, k: int, params: np.ndarray) -> float:
    """RG's prior density of (beta, ordered mu, tau, w_1..w_{k-1}) from scipy: k! prod N for the order statistics."""
    c = problem.constants
    beta, mu, tau, w = params[0], params[1 : 1 + k], params[1 + k : 1 + 2 * k], params[1 + 2 * k :]
    assert (np.diff(mu) > 0).all()
    weights = np.append(w, 1 - w.sum())
    log_dirichlet = stats.dirichlet(np.full(k, DELTA)).logpdf(weights) if k > 1 else 0.0
    return float(
        stats.gamma(G_SHAPE, scale=1 / c["h"]).logpdf(beta)
        + math.lgamma(k + 1)
        + stats.norm(c["xi"], 1 / math.sqrt(c["kappa"])).logpdf(mu).sum()
        + stats.gamma(ALPHA, scale=1 / beta).logpdf(tau).sum()
        + log_dirichlet
    )


# ---------------------------------------------------------------------------------------------- data
def _need(*names: str) -> None:
    """Skip, naming the file, where a data file is not on this machine (a fresh clone without ../shared)."""
    reason = unavailable_reason(*names)
    if reason:
        pytest.skip(reason)


def test_galaxy_r_holds_rg_values_and_mass_differs_in_one_entry() -> None:
    _need("Galaxy.R", "galaxies.csv")
    name, values = parse_r_vector(locate("Galaxy.R").read_text())
    assert name == "Galaxy" and values.shape == (82,)
    rg, mass = np.sort(values), np.sort(parse_mass_csv(locate("galaxies.csv").read_text()))
    assert (rg[0], rg[77], rg[-1]) == (9.172, 26.960, 34.279)
    differ = np.flatnonzero(np.abs(rg - mass) > 1e-9)
    assert differ.tolist() == [77] and mass[77] == pytest.approx(26.690)
    np.testing.assert_array_equal(load("rg").numpy(), values)


@pytest.mark.parametrize("data", ["enzyme", "acidity"])
def test_rgs_other_data_sets_parse(data: str) -> None:
    _need(DATA_SETS[data][0])
    assert load(data).shape == (DATA_SETS[data][1],)


@pytest.mark.parametrize(
    "text", ["x <- c(1, 2); system('ls')", "x <- c(1, rnorm(3))", "x = c(1, 2)", "c(1, 2)", "x <- c()"]
)
def test_the_parser_refuses_anything_but_a_vector_of_numbers(text: str) -> None:
    with pytest.raises(ValueError, match="name <- c"):
        parse_r_vector(text)


def test_bad_arguments_name_the_valid_choices() -> None:
    with pytest.raises(ValueError, match="acidity"):
        Galaxy(data="galaxies")
    with pytest.raises(ValueError, match=r"1\.\.30"):
        Galaxy(k_max=31)


# ---------------------------------------------------------------------------------------------- model
def test_config_space_masks_and_prior_constants(galaxy: Galaxy) -> None:
    assert galaxy.config() == {"k_max": 15, "data": "rg"} and galaxy.dim_max == 45
    assert galaxy.model_space.identifier(0) == "k=1" and galaxy.num_models == 15
    m = torch.arange(15)
    assert galaxy.model_dim(m).tolist() == [3 * (i + 1) for i in range(15)]
    assert torch.allclose(galaxy.log_model_prior(m).exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    # RG Sec. 2.2: xi the midpoint of the range R = 34.279 - 9.172, kappa = 1/R^2, h = 10/R^2.
    r = 34.279 - 9.172
    assert galaxy.constants == pytest.approx({"xi": (9.172 + 34.279) / 2, "kappa": r**-2, "h": 10 / r**2})


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_log_prior_is_rgs_density_times_the_autograd_jacobian(galaxy: Galaxy, k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    m = torch.full((3,), k - 1)
    theta = galaxy.sample_prior(m, gen)
    ours = galaxy.log_prior_with(TORCH, m, theta)
    active = galaxy.mask(m)[0]
    for row, value in zip(theta, ours, strict=True):

        def to_params(x: Tensor, row: Tensor = row) -> Tensor:
            full = row.clone()
            full[active] = x
            return constrained(galaxy, k, full)

        jac = torch.autograd.functional.jacobian(to_params, row[active])
        log_det = torch.linalg.slogdet(jac).logabsdet.item()
        expected = scipy_log_prior(galaxy, k, to_params(row[active]).numpy()) + log_det
        # scipy and torch evaluate the same float64 formulas: agreement to rounding of terms of size ~100.
        assert value.item() == pytest.approx(expected, abs=1e-8)


def test_log_joint_adds_the_model_prior_and_scipys_mixture_likelihood(galaxy: Galaxy) -> None:
    gen = torch.Generator().manual_seed(5)
    m = torch.tensor([0, 2, 5, 14])
    theta = galaxy.sample_prior(m, gen) * 0.3  # nearer the data, so the likelihood is not astronomically small
    ours = galaxy.log_joint(m, theta) - galaxy.log_model_prior(m) - galaxy.log_prior_with(TORCH, m, theta)
    y = galaxy.y.numpy()
    for i, k in enumerate((m + 1).tolist()):
        params = constrained(galaxy, k, theta[i]).numpy()
        mu, tau = params[1 : 1 + k], params[1 + k : 1 + 2 * k]
        w = np.append(params[1 + 2 * k :], 1 - params[1 + 2 * k :].sum())
        dens = stats.norm(mu[None, :], 1 / np.sqrt(tau[None, :])).logpdf(y[:, None]) + np.log(w)[None, :]
        assert ours[i].item() == pytest.approx(special.logsumexp(dens, axis=1).sum(), rel=1e-10, abs=1e-8)


def prior_points(galaxy: Galaxy) -> tuple[Tensor, Tensor]:
    """One shrunken prior draw per model (nearer the data, so log joints are a few hundred nats)."""
    m = torch.arange(galaxy.num_models)
    return m, galaxy.sample_prior(m, torch.Generator().manual_seed(6)) * 0.5


def test_inactive_coordinates_are_ignored_and_float32_agrees(galaxy: Galaxy) -> None:
    m, theta = prior_points(galaxy)
    value = galaxy.log_joint(m, theta)
    noisy = torch.where(galaxy.mask(m), theta, torch.nan)
    assert torch.equal(galaxy.log_joint(m, noisy), value)
    # float32 keeps 7 digits of log joints of a few hundred nats.
    assert torch.allclose(galaxy.log_joint(m, theta.float()).double(), value, rtol=1e-5)
    grad_theta = theta.clone().requires_grad_()
    galaxy.log_joint(m, grad_theta).sum().backward()
    assert torch.isfinite(grad_theta.grad).all() and (grad_theta.grad[~galaxy.mask(m)] == 0).all()


def test_prior_draws_have_rgs_marginals(galaxy: Galaxy) -> None:
    """KS tests of the draws mapped back: beta ~ Gamma(g, h), beta tau ~ Gamma(alpha, 1), min mu, w_1 ~ Beta."""
    k, n = 4, 4000
    gen = torch.Generator().manual_seed(7)
    theta = galaxy.sample_prior(torch.full((n,), k - 1), gen)
    params = torch.stack([constrained(galaxy, k, row) for row in theta]).numpy()
    beta, mu, tau, w1 = params[:, 0], params[:, 1 : 1 + k], params[:, 1 + k : 1 + 2 * k], params[:, 1 + 2 * k]
    c = galaxy.constants
    normal = stats.norm(c["xi"], 1 / math.sqrt(c["kappa"]))
    assert (np.diff(mu, axis=1) > 0).all()
    # With n = 4000 draws a KS p-value under 1e-4 would be a real mismatch, not chance (fixed seed).
    checks = {
        "beta": stats.kstest(beta, stats.gamma(G_SHAPE, scale=1 / c["h"]).cdf),
        "beta tau": stats.kstest((beta[:, None] * tau).ravel(), stats.gamma(ALPHA).cdf),
        "min mu": stats.kstest(mu[:, 0], lambda x: 1 - normal.sf(x) ** k),
        "max mu": stats.kstest(mu[:, -1], lambda x: normal.cdf(x) ** k),
        "w_1": stats.kstest(w1, stats.beta(DELTA, (k - 1) * DELTA).cdf),
    }
    assert all(r.pvalue > 1e-4 for r in checks.values()), {name: r.pvalue for name, r in checks.items()}


@pytest.mark.slow
def test_jax_evaluates_the_same_log_joint(galaxy: Galaxy) -> None:
    m, theta = prior_points(galaxy)
    jnp = jax_backend().jnp
    in_jax = np.asarray(galaxy.log_joint_with(jax_backend(), jnp.asarray(m.numpy()), jnp.asarray(theta.numpy())))
    # The same float64 formulas; only the order of summation differs.
    np.testing.assert_allclose(in_jax, galaxy.log_joint(m, theta).numpy(), rtol=1e-10)


# ---------------------------------------------------------------------------------------------- evidence
@pytest.mark.slow
def test_one_component_evidence_by_quadrature_matches_the_log_joint(galaxy: Galaxy) -> None:
    """A 3-D grid over theta for k = 1 (precision not integrated out) against the 2-D quadrature with it."""
    one = Galaxy(k_max=1)
    y, c = one.y.numpy(), one.constants
    # Posterior sds: mu ~ 0.5, log tau ~ 0.16 (around -log var y = -3.0); given tau, beta ~ Gamma(2.2, h + tau),
    # so log beta ~ 3.5 +- 0.7. The ranges span >= 6 sd (log beta: 8 sd down, 8 up).
    mu = torch.linspace(y.mean() - 3.0, y.mean() + 3.0, 41, dtype=torch.float64)
    log_tau = torch.linspace(-math.log(y.var()) - 1.2, -math.log(y.var()) + 1.2, 41, dtype=torch.float64)
    log_beta = torch.linspace(-4.0, 9.0, 61, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(log_beta, mu, log_tau, indexing="ij"), -1).reshape(-1, 3)
    values = one.log_joint(torch.zeros(len(grid), dtype=torch.int64), grid).reshape(61, 41, 41)
    top = values.max()
    volume = (log_beta[1] - log_beta[0]) * (mu[1] - mu[0]) * (log_tau[1] - log_tau[0])
    grid_log_z = (torch.log((values - top).exp().sum() * volume) + top).item()
    # The plain grid sum of a smooth integrand that vanishes at the ends converges like the trapezoid rule,
    # spectrally; steps of 0.15-0.4 sd leave errors far below the 1e-3 nats allowed.
    assert grid_log_z == pytest.approx(log_evidence_k1(y, c["xi"], c["kappa"], c["h"]), abs=1e-3)


def test_the_stored_reference_matches_the_quadrature_at_k1(galaxy: Galaxy) -> None:
    reference = galaxy.stored_reference()
    if reference is None:
        pytest.skip("no stored galaxy reference (python -m suite.reference galaxy makes it)")
    assert reference.config == galaxy.config() and len(reference.prob) == galaxy.num_models
    c = galaxy.constants
    exact = log_evidence_k1(galaxy.y.numpy(), c["xi"], c["kappa"], c["h"])
    # Within 4 Monte Carlo standard errors of the SMC runs (plus 0.02 nats for a lucky tiny spread).
    assert abs(reference.log_evidence[0] - exact) < 4 * reference.log_evidence_se[0] + 0.02
    assert abs(reference.prob.sum() - 1) < 1e-9
