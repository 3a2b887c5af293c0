"""Comparison proposals: independence jumps on sas, the Lopes & West proposal on factor analysis, scaled identity."""

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from methods.common.chains import ChainState
from methods.trj.bbe import bartolucci_model_probs
from methods.trj.kernels import propose_from_probs, transport_jump
from methods.trj.proposals import (
    GaussianIndependenceProposal,
    LopesWestProposal,
    ScaledIdentityTransport,
    independence_jump,
)
from suite.core.registry import make_problem

TRUE = torch.tensor([0.25, 0.75], dtype=torch.float64)


def exact_state(problem, num: int, seed: int) -> ChainState:
    draws = problem.reference_draws(num, torch.Generator().manual_seed(seed))
    return ChainState(draws.model_index, draws.theta, problem.log_joint(draws.model_index, draws.theta))


def sas_proposal(problem, seed: int) -> GaussianIndependenceProposal:
    train = problem.reference_draws(8000, torch.Generator().manual_seed(seed))
    return GaussianIndependenceProposal.fit(problem, train.model_index, train.theta, cov_scale=2.0)


# ------------------------------------------------------------------ independence jump on sas
def test_independence_jumps_keep_exact_draws_exact() -> None:
    """Invariance: exact draws keep pi(m) = (1/4, 3/4) and per-model medians; own-model proposals stay put.

    Checked by hand: without the log q terms in log alpha the model-1 frequency falls to 0.672 (36 SE below 3/4).
    """
    problem = make_problem("sas")
    proposal = sas_proposal(problem, 0)
    num = 40_000
    state = exact_state(problem, num, 1)
    generator = torch.Generator().manual_seed(2)
    half = torch.full((2,), -math.log(2.0), dtype=torch.float64)
    for step in range(5):
        model_to, log_ratio = propose_from_probs(state.model_index, half, generator)
        new, accept, record = independence_jump(problem, state, proposal, model_to, log_ratio, generator)
        if step == 0:
            stay = model_to == state.model_index
            assert bool((record.log_alpha[stay] == 0).all()) and not bool(accept[stay].any())
            assert torch.equal(new.theta[stay], state.theta[stay])
            moved = ~stay
            assert 0.1 < float(accept[moved].double().mean()) < 0.95
        state = new
    torch.testing.assert_close(state.log_joint, problem.log_joint(state.model_index, state.theta), rtol=0, atol=1e-12)
    freq = float((state.model_index == 1).double().mean())
    assert abs(freq - 0.75) < 4.5 * math.sqrt(0.75 * 0.25 / num)
    fresh = problem.reference_draws(num, torch.Generator().manual_seed(3))
    for model, coords in ((0, (0,)), (1, (0, 1))):
        for i in coords:
            a = state.theta[state.model_index == model][:, i]
            b = fresh.theta[fresh.model_index == model][:, i]
            se = 1.2533 * math.sqrt(a.var() / a.numel() + b.var() / b.numel())
            assert abs(float(a.median() - b.median())) < 5 * se


def test_bbe_from_independence_jumps() -> None:
    """One independence proposal per exact draw; the bridge estimate of pi(1) = 3/4 within 4 standard errors."""
    problem = make_problem("sas")
    proposal = sas_proposal(problem, 4)
    state = exact_state(problem, 8000, 5)
    generator = torch.Generator().manual_seed(6)
    model_to, log_ratio = problem.model_space.propose_jump(state.model_index, generator)
    _, _, record = independence_jump(problem, state, proposal, model_to, log_ratio.to(torch.float64), generator)
    probs, se = bartolucci_model_probs(record, 2)
    assert float(se[1]) < 0.02
    assert abs(float(probs[1]) - 0.75) < 4 * float(se[1]), (probs, se)


def test_gaussian_proposal_matches_scipy() -> None:
    problem = make_problem("sas")
    proposal = sas_proposal(problem, 7)
    train = problem.reference_draws(8000, torch.Generator().manual_seed(7))
    m = torch.tensor([0, 1, 1, 0])
    theta = torch.tensor([[0.3, math.inf], [0.3, -0.2], [-1.0, 2.0], [2.0, math.nan]], dtype=torch.float64)
    got = proposal.log_prob(m, theta)
    x0 = train.theta[train.model_index == 0][:, 0].numpy()
    x1 = train.theta[train.model_index == 1].numpy()
    q0 = stats.norm(x0.mean(), math.sqrt(2 * x0.var(ddof=1)))
    q1 = stats.multivariate_normal(x1.mean(0), 2 * np.cov(x1.T))
    expected = [q0.logpdf(0.3), q1.logpdf([0.3, -0.2]), q1.logpdf([-1.0, 2.0]), q0.logpdf(2.0)]
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ Lopes & West on factor analysis
@pytest.fixture(scope="module")
def fa_fit():
    problem = make_problem("factor-analysis-k23")
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    train = problem.reference_draws(6000, torch.Generator().manual_seed(0))
    if train is None:
        pytest.skip("no stored reference draws for factor-analysis-k23")
    return problem, train, LopesWestProposal.fit(problem, train.model_index, train.theta)


@pytest.fixture(scope="module")
def fa_scipy(fa_fit):
    """Per model, by numpy/scipy: the Gaussian block's slots, mean and 2 x covariance, and the KDE modes of lambda."""
    problem, train, _ = fa_fit
    out = {}
    for k in (0, 1):
        x = train.theta[train.model_index == k].numpy()
        block = np.flatnonzero((problem.mask(torch.tensor([k])) & ~problem.variance_mask(torch.tensor([k])))[0])
        lam = np.exp(x[:, 15:])
        modes = np.array([lam[np.argmax(stats.gaussian_kde(col).pdf(col)), i] for i, col in enumerate(lam.T)])
        out[k] = block, x[:, block].mean(0), 2 * np.cov(x[:, block].T), modes, lam
    return out


def test_fa_masks() -> None:
    problem = make_problem("factor-analysis-k23")
    m = torch.tensor([0, 1])
    variance = problem.variance_mask(m)
    assert variance.shape == (2, 21) and variance.dtype == torch.bool
    assert torch.equal(variance.nonzero()[:, 1], torch.arange(15, 21).repeat(2))
    assert torch.equal(problem.log_diagonal_mask(m)[0].nonzero().flatten(), torch.tensor([0, 6]))
    assert torch.equal(problem.log_diagonal_mask(m)[1].nonzero().flatten(), torch.tensor([0, 6, 11]))
    assert LopesWestProposal.supports(problem) is None
    assert "variance_mask" in LopesWestProposal.supports(make_problem("sas"))


@pytest.mark.slow
def test_lw_kde_modes(fa_fit, fa_scipy) -> None:
    """The mode v_k,i is the training value of lambda_i with the highest KDE density (as scipy's gaussian_kde finds)."""
    _, _, proposal = fa_fit
    for k in (0, 1):
        _, _, _, modes, lam = fa_scipy[k]
        got = proposal.modes()[k, 15:].numpy()
        np.testing.assert_allclose(got, modes, rtol=1e-12, atol=0)
        assert np.all((lam.min(0) <= got) & (got <= lam.max(0)))
    assert bool((proposal.modes()[:, :15] == 0).all())


def test_lw_samples_in_the_right_coordinates(fa_fit) -> None:
    problem, _, proposal = fa_fit
    num = 20_000
    for k in (0, 1):
        m = torch.full((num,), k)
        theta = proposal.sample(m, torch.Generator().manual_seed(10 + k))
        active = problem.mask(m)
        assert bool(theta[active].isfinite().all()) and bool((theta[~active] == 0).all())
        assert bool(proposal.log_prob(m, theta).isfinite().all())
        # log lambda = log(18 v) - log Gamma(18): mean log(18 v) - digamma(18), sd sqrt(trigamma(18)).
        expected = torch.log(18 * proposal.modes()[k, 15:]) - special.digamma(18.0)
        se = math.sqrt(special.polygamma(1, 18.0) / num)
        assert float((theta[:, 15:].mean(0) - expected).abs().max()) < 5 * se
        block = active[0] & ~problem.variance_mask(m[:1])[0]
        mean, sd = proposal.gaussian.mean[k, block], theta[:, block].std(0)
        assert bool(((theta[:, block].mean(0) - mean).abs() < 5 * sd / math.sqrt(num)).all())


def test_lw_log_prob_matches_scipy(fa_fit, fa_scipy) -> None:
    """log q_k = log N(block; mu, 2 B) + sum_i [log IG(lambda_i; 18, 18 v_i) + log lambda_i], written with scipy."""
    _, train, proposal = fa_fit
    for k in (0, 1):
        block, mean, cov, modes, _ = fa_scipy[k]
        drawn = proposal.sample(torch.full((3,), k), torch.Generator().manual_seed(20 + k))
        theta = torch.cat([train.theta[train.model_index == k][:3], drawn])
        got = proposal.log_prob(torch.full((6,), k), theta).numpy()
        x = theta.numpy()
        expected = stats.multivariate_normal(mean, cov).logpdf(x[:, block])
        expected += (stats.invgamma(18.0, scale=18.0 * modes).logpdf(np.exp(x[:, 15:])) + x[:, 15:]).sum(1)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)


# ------------------------------------------------------------------ Brooks et al. scaled identity
def test_scaled_identity_round_trip_and_log_dets() -> None:
    problem = make_problem("sas")
    m = torch.tensor([0, 1, 0, 1])
    theta = torch.tensor([[0.5, 7.5], [-1.0, 2.0], [3.0, 7.5], [0.1, -0.3]], dtype=torch.float64)
    scale = torch.tensor([1.5, 3.0], dtype=torch.float64)
    transport = ScaledIdentityTransport(problem, scale)
    z, log_det = transport.to_reference(m, theta)
    expected_z = torch.tensor(
        [[0.5 / 1.5, 7.5], [-1.0 / 1.5, 2.0 / 3], [2.0, 7.5], [0.1 / 1.5, -0.1]], dtype=torch.float64
    )
    torch.testing.assert_close(z, expected_z, rtol=0, atol=1e-15)
    expected = -torch.tensor([math.log(1.5), math.log(4.5), math.log(1.5), math.log(4.5)], dtype=torch.float64)
    torch.testing.assert_close(log_det, expected, rtol=0, atol=1e-15)
    back, log_det_inv = transport.from_reference(m, z)
    torch.testing.assert_close(back, theta, rtol=0, atol=1e-15)
    torch.testing.assert_close(log_det_inv, -log_det, rtol=0, atol=1e-15)


def test_scaled_identity_trj_jump_is_the_brooks_proposal() -> None:
    """Shared coordinates kept, newborn ones ~ N(0, s^2): log alpha = log pi' - log pi -+ log N(theta_2; 0, s^2)."""
    problem = make_problem("sas")
    state = exact_state(problem, 2000, 30)
    scale = 2.5
    model_to, log_ratio = problem.model_space.propose_jump(state.model_index, torch.Generator().manual_seed(31))
    log_ratio = log_ratio.to(torch.float64)
    new, _, record = transport_jump(
        problem, state, ScaledIdentityTransport(problem, scale), model_to, log_ratio, torch.Generator().manual_seed(32)
    )
    # transport_jump draws u ~ N(0, I) first from its generator: the proposal is reproducible.
    u = torch.randn(state.theta.shape, generator=torch.Generator().manual_seed(32), dtype=torch.float64)
    born = model_to == 1
    proposed = torch.where(born[:, None], torch.stack([state.theta[:, 0], scale * u[:, 1]], -1), state.theta)
    moved = new.model_index != state.model_index
    assert bool(moved.any())  # the two models sit apart in theta_1 (means -4.9, 2.9): few jumps succeed
    torch.testing.assert_close(new.theta[moved], proposed[moved], rtol=0, atol=1e-15)
    second = torch.where(born, proposed[:, 1], state.theta[:, 1])
    log_g = torch.from_numpy(stats.norm(0.0, scale).logpdf(second.numpy()))
    expected = problem.log_joint(model_to, proposed) - state.log_joint + log_ratio + torch.where(born, -log_g, log_g)
    torch.testing.assert_close(record.log_alpha, expected.clamp_max(0.0), rtol=1e-12, atol=1e-10)
