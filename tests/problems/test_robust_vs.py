"""robust-vs: the authors' likelihood and prior, the data-generating process, and model-space conventions."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats

from problems.robust_vs.data import SETTINGS, generate
from problems.robust_vs.problem import RobustVS
from suite.core.backend import TORCH
from suite.core.registry import make_problem


@pytest.fixture(scope="module")
def problem() -> RobustVS:
    return RobustVS()


def _random_inputs(problem: RobustVS, num: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    model_index = problem.model_space.sample_uniform(num, gen)
    theta = torch.randn(num, problem.dim_max, generator=gen, dtype=torch.float64) * scale
    return model_index, theta


def _code_log_likelihood(x: np.ndarray, y: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """avti RobustVS.log_prob's likelihood, transcribed in numpy: max shift, then + 1e-15 inside the log."""
    r = y[None, :] - beta @ x.T
    u1, u2 = -(r**2) / (2 * 1.0**2), -(r**2) / (2 * 10.0**2)
    m = np.maximum(u1, u2)
    return (m + np.log(0.9 * np.exp(u1 - m) + 0.1 * np.exp(u2 - m) + 1e-15)).sum(-1)


def _log_likelihood(problem: RobustVS, model_index: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    prior = problem.log_prior_with(TORCH, model_index, theta)
    return problem.log_joint(model_index, theta) - problem.log_model_prior(model_index) - prior


# ------------------------------------------------------------------------------------------- density
@pytest.mark.parametrize("scale", [0.5, 3.0, 30.0])
def test_likelihood_matches_the_authors_code_in_numpy(problem: RobustVS, scale: float) -> None:
    model_index, theta = _random_inputs(problem, 500, scale, seed=1)
    beta = (theta * problem.mask(model_index)).numpy()
    expected = _code_log_likelihood(problem.x.numpy(), problem.y.numpy(), beta)
    got = _log_likelihood(problem, model_index, theta).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-10)


def test_likelihood_has_no_floor_from_the_tiny_constant(problem: RobustVS) -> None:
    # The code adds 1e-15 after the max shift: for moderate residuals this is log((1-a)e^u + a e^v + 1e-15)
    # to 1e-12, but one residual of 200 costs -200^2/200 + log(0.1) (no floor at log(1e-15) = -34.5).
    y = problem.y.numpy()
    beta = np.zeros((1, problem.dim_max))
    r = y  # the null model at beta = 0
    spec_form = np.log(0.9 * np.exp(-(r**2) / 2) + 0.1 * np.exp(-(r**2) / 200) + 1e-15).sum()
    got = _log_likelihood(problem, torch.tensor([0]), torch.from_numpy(beta)).item()
    assert np.abs(r).max() < 30 and got == pytest.approx(spec_form, rel=1e-12)
    shifted = torch.zeros(1, problem.dim_max, dtype=torch.float64)
    shifted[0, 0] = 200.0  # intercept 200: every residual is about -200
    r_far = y - 200.0
    expected = (-(r_far**2) / 200 + math.log(0.1 + 1e-15)).sum()  # the inlier kernel underflows to exactly 0
    got_far = _log_likelihood(problem, torch.tensor([0]), shifted).item()
    assert got_far == pytest.approx(expected, rel=1e-12)
    assert got_far < len(y) * math.log(1e-15) - 1000.0


@pytest.mark.parametrize("prior_scale", [1.5, 10.0])
def test_parameter_prior_matches_scipy(prior_scale: float) -> None:
    problem = RobustVS(prior_scale=prior_scale)
    model_index, theta = _random_inputs(problem, 300, prior_scale, seed=2)
    mask = problem.mask(model_index).numpy()
    expected = (stats.norm(0.0, prior_scale).logpdf(theta.numpy()) * mask).sum(-1)
    got = problem.log_prior_with(TORCH, model_index, theta).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_log_joint_is_model_prior_plus_prior_plus_likelihood(problem: RobustVS) -> None:
    model_index, theta = _random_inputs(problem, 200, 1.5, seed=3)
    beta = (theta * problem.mask(model_index)).numpy()
    mask = problem.mask(model_index).numpy()
    expected = (
        -7 * math.log(2.0)
        + (stats.norm(0.0, 1.5).logpdf(theta.numpy()) * mask).sum(-1)
        + _code_log_likelihood(problem.x.numpy(), problem.y.numpy(), beta)
    )
    np.testing.assert_allclose(problem.log_joint(model_index, theta).numpy(), expected, rtol=1e-12)
    prior = problem.log_model_prior(problem.model_space.all_indices())
    assert prior.shape == (128,) and torch.allclose(prior, torch.full((128,), -7 * math.log(2.0), dtype=torch.float64))


def test_gradient_matches_autograd_of_the_direct_formula(problem: RobustVS) -> None:
    model_index, theta = _random_inputs(problem, 256, 2.0, seed=6)
    mask = problem.mask(model_index).double()

    def direct(t: torch.Tensor) -> torch.Tensor:
        r = problem.y - (t * mask) @ problem.x.T
        u1, u2 = -(r**2) / 2, -(r**2) / 200
        lik = (u2 + torch.log(0.9 * torch.exp(u1 - u2) + 0.1 + 1e-15)).sum(-1)
        return lik + (torch.distributions.Normal(0.0, 1.5).log_prob(t) * mask).sum(-1)

    t1 = theta.clone().requires_grad_(True)
    t2 = theta.clone().requires_grad_(True)
    (g1,) = torch.autograd.grad(problem.log_joint(model_index, t1).sum(), t1)
    (g2,) = torch.autograd.grad(direct(t2).sum(), t2)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-10)
    assert (g1[mask == 0] == 0).all()


def test_float32_agrees_with_float64(problem: RobustVS) -> None:
    model_index, theta = _random_inputs(problem, 1000, 1.5, seed=4)
    lp64 = problem.log_joint(model_index, theta)
    lp32 = problem.log_joint(model_index, theta.float())
    assert lp32.dtype == torch.float32
    torch.testing.assert_close(lp32.double(), lp64, rtol=1e-5, atol=1e-3)


def test_non_finite_active_coordinates_give_minus_infinity(problem: RobustVS) -> None:
    theta = torch.zeros(3, problem.dim_max, dtype=torch.float64)
    theta[0, 0], theta[1, 0], theta[2, 1] = math.nan, math.inf, math.nan
    out = problem.log_joint(torch.tensor([0, 0, 1]), theta)
    assert torch.equal(out, torch.full((3,), -math.inf, dtype=torch.float64))


def test_prior_draws_have_the_prior_moments() -> None:
    problem = RobustVS(prior_scale=10.0)
    model_index = torch.full((40_000,), problem.model_space.index("1010011"), dtype=torch.int64)
    draws = problem.sample_prior(model_index, torch.Generator().manual_seed(5))
    active = problem.mask(model_index[:1])[0]
    assert draws.dtype == torch.float64 and (draws[:, ~active] == 0).all()
    # mean: sd 10 / sqrt(40000) = 0.05, checked at 5 se; variance 100 with se 100 sqrt(2 / 40000) = 0.71
    assert draws[:, active].mean(0).abs().max() < 0.25
    assert (draws[:, active].var(0) - 100.0).abs().max() < 3.6
    lp = problem.log_prior_with(TORCH, model_index[:5], draws[:5])
    expected = stats.norm(0, 10.0).logpdf(draws[:5, active].numpy()).sum(-1)
    np.testing.assert_allclose(lp.numpy(), expected, rtol=1e-12)


# --------------------------------------------------------------------------------------- model space
def test_mask_follows_the_bit_convention(problem: RobustVS) -> None:
    space = problem.model_space
    assert space.num_models == 128 and problem.dim_max == 8
    index = space.index("1010000")  # covariates 1 and 3
    assert index == 0b101
    expected = torch.tensor([[True, True, False, True, False, False, False, False]])
    assert torch.equal(problem.mask(torch.tensor([index])), expected)
    all_masks = problem.mask(space.all_indices())
    assert all_masks[:, 0].all()
    assert torch.equal(problem.model_dim(space.all_indices()), 1 + space.bits(space.all_indices()).sum(-1))
    assert torch.equal(all_masks[:, 1:], space.bits(space.all_indices()))


def test_large_model_space_masks() -> None:
    problem = RobustVS(num_covariates=24)
    index = torch.tensor([0, 2**24 - 1, 2**23 + 1])
    mask = problem.mask(index)
    assert mask.shape == (3, 25)
    assert mask.sum(-1).tolist() == [1, 25, 3] and mask[2, [0, 1, 24]].all()


# ------------------------------------------------------------------------------------------------ DGP
def test_data_shapes_and_structure(problem: RobustVS) -> None:
    assert problem.x.shape == (50, 8) and problem.y.shape == (50,)
    assert problem.x.dtype == torch.float64 and (problem.x[:, 0] == 1).all()
    assert len(problem.relevant) == int(8 * 0.4) == 3 and problem.relevant[0] == 0
    assert len(set(problem.relevant)) == 3 and all(1 <= j <= 7 for j in problem.relevant[1:])
    assert len(problem.outliers) == len(set(problem.outliers)) == 5
    bits = problem.model_space.identifier(problem.true_model_index)
    assert [j + 1 for j, b in enumerate(bits) if b == "1"] == sorted(problem.relevant[1:])


def test_data_are_deterministic_by_seed_and_independent_of_the_global_rng() -> None:
    state = torch.get_rng_state()
    torch.manual_seed(123)
    a = RobustVS(data_seed=1003)
    torch.manual_seed(456)
    b = RobustVS(data_seed=1003)
    c = RobustVS(data_seed=1004)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.relevant == b.relevant
    assert not torch.equal(a.x, c.x) and not torch.equal(a.y, c.y)
    torch.set_rng_state(state)
    before = torch.get_rng_state()
    RobustVS(data_seed=7)
    assert torch.equal(torch.get_rng_state(), before)


def test_misspecification_levels_differ_and_follow_the_rng_order() -> None:
    data = {level: RobustVS(misspecification=level, data_seed=1000) for level in SETTINGS}
    assert not torch.equal(data["none"].y, data["mid"].y) and not torch.equal(data["mid"].y, data["high"].y)
    # Same draws for X and the relevant set; 'high' then rescales and mixes int(0.4 * 8) = 3 irrelevant columns
    # (the 'mid' run draws the same permutation of the remaining columns but correlates none).
    assert data["none"].relevant == data["mid"].relevant == data["high"].relevant
    assert torch.equal(data["none"].x, data["mid"].x)
    changed = (data["high"].x != data["mid"].x).any(0)
    assert changed.sum() == 3 and not changed[list(data["high"].relevant)].any()


def test_outliers_and_noise_scales_follow_the_spec() -> None:
    # Only sigma1 and sigma2 scale draws, so runs that differ in them share every other random number.
    base = SETTINGS["mid"]
    clean = generate(50, 8, dataclasses.replace(base, sigma1=0.0), seed=1001)
    assert set(torch.nonzero(clean.y != clean.noise_free).flatten().tolist()) == set(clean.outliers)
    one = generate(50, 8, dataclasses.replace(base, sigma1=1.0, sigma2=0.0), seed=1001)
    two = generate(50, 8, dataclasses.replace(base, sigma1=2.0, sigma2=0.0), seed=1001)
    torch.testing.assert_close(two.y - two.noise_free, 2.0 * (one.y - one.noise_free), rtol=1e-12, atol=1e-12)
    # mid: coefficient 0.5 on the relevant columns for the first 25 rows, 1.5 for the rest
    x, rel = one.x, list(one.relevant)
    torch.testing.assert_close(one.noise_free[:25], 0.5 * x[:25, rel].sum(-1))
    torch.testing.assert_close(one.noise_free[25:], 1.5 * x[25:, rel].sum(-1))
    none = generate(50, 8, SETTINGS["none"], seed=1001)
    torch.testing.assert_close(none.noise_free, 0.5 * none.x[:, list(none.relevant)].sum(-1))
    inlier = torch.ones(50, dtype=torch.bool)
    inlier[list(none.outliers)] = False
    residual_sd = (none.y - none.noise_free)[inlier].std().item()
    assert 0.6 < residual_sd < 1.5  # 45 N(0, 1) draws


def test_true_model_has_the_highest_laplace_evidence_without_misspecification() -> None:
    """With 400 rows and no misspecification the DGP model should win; evidences by Laplace at the mode."""
    problem = RobustVS(misspecification="none", num_observations=400, data_seed=1002)
    models = problem.model_space.all_indices()
    mask = problem.mask(models)
    x, y = problem.x, problem.y
    theta = torch.zeros(len(models), problem.dim_max, dtype=torch.float64)
    for k in range(len(models)):  # least-squares start per model (a test, not a density)
        cols = mask[k]
        theta[k, cols] = torch.linalg.lstsq(x[:, cols], y[:, None]).solution[:, 0]
    eye = torch.eye(problem.dim_max, dtype=torch.float64).expand(len(models), -1, -1)
    block = mask[:, :, None] & mask[:, None, :]
    for _ in range(20):  # Newton iterations on the active block (inactive block held at -I)
        theta = theta.detach().requires_grad_(True)
        grad = torch.autograd.grad(problem.log_joint(models, theta).sum(), theta, create_graph=True)[0]
        hess = torch.stack([torch.autograd.grad(grad[:, j].sum(), theta, retain_graph=True)[0] for j in range(8)], 1)
        hess = torch.where(block, hess, -eye)
        step = torch.linalg.solve(hess, torch.where(mask, grad, 0.0)[..., None])[..., 0]
        theta = theta - step
    assert step.abs().max() < 1e-8
    log_det = torch.linalg.slogdet(-hess.detach())
    assert (log_det.sign > 0).all()
    dims = mask.sum(-1)
    evidence = problem.log_joint(models, theta.detach()) + 0.5 * dims * math.log(2 * math.pi) - 0.5 * log_det.logabsdet
    assert evidence.argmax().item() == problem.true_model_index
    assert evidence.max() - evidence[0] > 10  # the null model is far behind


# ------------------------------------------------------------------------------------------ config
def test_registered_defaults_and_validation() -> None:
    problem = make_problem("robust-vs")
    assert problem.config() == {
        "num_covariates": 7,
        "misspecification": "mid",
        "prior_scale": 1.5,
        "data_seed": 1000,
        "num_observations": 50,
    }
    with pytest.raises(ValueError, match="none, mid, high"):
        RobustVS(misspecification="extreme")
    with pytest.raises(ValueError, match="num_covariates"):
        RobustVS(num_covariates=3)
    with pytest.raises(ValueError, match="prior_scale"):
        RobustVS(prior_scale=0.0)
    with pytest.raises(ValueError, match="num_observations"):
        RobustVS(num_observations=0)


def test_the_paper_profile_plans_the_authors_sweep_points() -> None:
    """VTI App. E.1's sweep at the authors' points (p = 9, 14, 19, 24) in paper; 12, 16, 20 only when named."""
    from suite.core.registry import available_problems, problem_class

    sweep = {name: problem_class(name) for name in available_problems() if name.startswith("robust-vs-p")}
    planned = sorted(cls.num_covariates for cls in sweep.values() if "paper" in cls.planned_in)
    assert planned == [9, 14, 19, 24]
    assert sorted(cls.num_covariates for cls in sweep.values()) == [9, 12, 14, 16, 19, 20, 24]
    assert sweep["robust-vs-p16"].planned_in == ("smoke",)  # CI's point
    assert all(cls.sweep[1] == cls.num_covariates for cls in sweep.values())
