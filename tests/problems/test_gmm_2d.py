"""gmm-2d: log joint against a direct formula, chunking, masks, the prior's Jacobian, metrics, plot, arguments."""

import math

import pytest
import torch
from torch import Tensor
from torch.distributions import MultivariateNormal

from problems.gmm_2d.problem import GaussianMixture2D, GaussianMixture2DK100, generate
from suite.core.registry import make_problem
from suite.core.types import Draws, Estimate, ModelProbs


@pytest.fixture(scope="module")
def quick() -> GaussianMixture2D:
    return GaussianMixture2D()


@pytest.fixture(scope="module")
def k100() -> GaussianMixture2DK100:
    return GaussianMixture2DK100()


@pytest.fixture(scope="module")
def k100_small() -> GaussianMixture2DK100:
    """The paper instance's shapes (K_max = 100, k_true = 50) with N = 500, so absolute tolerances stay meaningful."""
    return GaussianMixture2DK100(num_observations=500)


def direct_log_joint(problem: GaussianMixture2D, model_index: Tensor, theta: Tensor) -> Tensor:
    """The log joint written out row by row, component by component, with torch.distributions (no chunking)."""
    n, k_max = problem.y.shape[0], problem.max_components
    low, width = problem.box_low, problem.box_high - problem.box_low
    ks = torch.arange(1, k_max + 1, dtype=torch.float64)
    penalty = -problem.complexity_penalty * 0.5 * math.log(n) * (ks - 1)
    cov = problem.noise_sd**2 * torch.eye(2, dtype=torch.float64)
    out = []
    for row in range(len(model_index)):
        k = int(model_index[row]) + 1
        tx, ty = theta[row, :k], theta[row, k_max : k_max + k]
        sx, sy = torch.sigmoid(tx), torch.sigmoid(ty)
        log_jac_x = torch.log(torch.clamp(width[0] * sx * (1 - sx), min=1e-30))
        log_jac_y = torch.log(torch.clamp(width[1] * sy * (1 - sy), min=1e-30))
        log_prior = (-torch.log(width[0] * width[1]) + log_jac_x + log_jac_y).sum()
        means = torch.stack([low[0] + width[0] * sx, low[1] + width[1] * sy], -1)
        per_component = torch.stack([MultivariateNormal(means[i], cov).log_prob(problem.y) for i in range(k)])
        log_lik = torch.logsumexp(per_component - math.log(k), 0).sum()
        out.append(penalty[k - 1] - torch.logsumexp(penalty, 0) + log_prior + log_lik)
    return torch.stack(out)


def random_inputs(problem: GaussianMixture2D, num: int, seed: int, scale: float = 2.0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    model_index = problem.model_space.sample_uniform(num, gen)
    return model_index, torch.randn(num, problem.dim_max, generator=gen, dtype=torch.float64) * scale


def theta_of_means(problem: GaussianMixture2D, means: Tensor) -> Tensor:
    """Saturated theta (inactive slots 0) whose first len(means) components have these means."""
    k = means.shape[0]
    u = (means - problem.box_low) / (problem.box_high - problem.box_low)
    theta = torch.zeros(problem.dim_max, dtype=torch.float64)
    theta[:k], theta[problem.max_components : problem.max_components + k] = torch.logit(u[:, 0]), torch.logit(u[:, 1])
    return theta


# ------------------------------------------------------------------------------------------- density
# float64 rounding: each of N log-terms of size <= ~150 (the centred |y|^2 / (2 sigma^2)) carries ~1e-16
# relative error, so sums over N = 400..500 points agree to ~1e-11 and 1e-10 is a safe absolute bound; at
# N = 4000 and |log joint| ~ 7e4 a relative 1e-14 (7e-10) is added.
@pytest.mark.parametrize("name", ["quick", "k100_small"])
def test_log_joint_matches_direct_formula(name: str, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(name)
    model_index, theta = random_inputs(problem, 12, seed=1)
    model_index[:3] = torch.tensor([0, problem.true_k - 1, problem.max_components - 1])
    torch.testing.assert_close(
        problem.log_joint(model_index, theta), direct_log_joint(problem, model_index, theta), rtol=0, atol=1e-10
    )


def test_log_joint_matches_direct_formula_at_full_size(k100: GaussianMixture2DK100) -> None:
    model_index, theta = random_inputs(k100, 4, seed=2)
    torch.testing.assert_close(
        k100.log_joint(model_index, theta), direct_log_joint(k100, model_index, theta), rtol=1e-14, atol=1e-10
    )


@pytest.mark.parametrize("name", ["quick", "k100_small"])
def test_gradient_matches_autograd_of_direct_formula(name: str, request: pytest.FixtureRequest) -> None:
    # The likelihood's gradient is hand-written (one pass with the value); autograd through the direct
    # formula is the independent check. Gradients are O(1e4), so 1e-8 relative is rounding-level.
    problem = request.getfixturevalue(name)
    model_index, theta = random_inputs(problem, 6, seed=3)
    ours, direct = theta.clone().requires_grad_(True), theta.clone().requires_grad_(True)
    problem.log_joint(model_index, ours).sum().backward()
    direct_log_joint(problem, model_index, direct).sum().backward()
    assert torch.isfinite(ours.grad).all()
    torch.testing.assert_close(ours.grad, direct.grad, rtol=1e-8, atol=1e-8)


def test_gradcheck_on_a_tiny_instance() -> None:
    # Finite differences on a small instance (K_max = 3, N = 20) where they are well conditioned.
    problem = GaussianMixture2D(max_components=3, true_components=2, num_observations=20)
    model_index = torch.tensor([0, 1, 2, 2])
    theta = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: problem.log_joint(model_index, t), (theta,))


def test_gradient_in_float32_and_weighted_rows(quick: GaussianMixture2D) -> None:
    model_index, theta = random_inputs(quick, 8, seed=5)
    weights = torch.linspace(-1, 2, 8, dtype=torch.float64)
    g64 = theta.clone().requires_grad_(True)
    (weights * quick.log_joint(model_index, g64)).sum().backward()
    g32 = theta.float().requires_grad_(True)
    (weights.float() * quick.log_joint(model_index, g32)).sum().backward()
    assert g32.grad.dtype == torch.float32 and torch.isfinite(g32.grad).all()
    # float32 logits carry ~1e-7 relative error; gradients of size up to 1e4 agree to ~1e-3 relative.
    torch.testing.assert_close(g32.grad.double(), g64.grad, rtol=1e-3, atol=1e-1)


@pytest.mark.parametrize("chunk", [1, 7, 64, 400])
def test_chunking_does_not_change_value_or_gradient(chunk: int) -> None:
    problem = GaussianMixture2D()
    model_index, theta = random_inputs(problem, 10, seed=6)
    reference_theta = theta.clone().requires_grad_(True)
    reference = problem.log_joint(model_index, reference_theta)
    reference.sum().backward()
    problem.data_chunk = chunk
    chunked_theta = theta.clone().requires_grad_(True)
    chunked = problem.log_joint(model_index, chunked_theta)
    chunked.sum().backward()
    # only the order of the float64 sums changes
    torch.testing.assert_close(chunked, reference, rtol=1e-13, atol=1e-10)
    torch.testing.assert_close(chunked_theta.grad, reference_theta.grad, rtol=1e-12, atol=1e-10)


def test_float32_agrees_with_float64_and_keeps_dtype(quick: GaussianMixture2D) -> None:
    model_index, theta = random_inputs(quick, 32, seed=7)
    lp64 = quick.log_joint(model_index, theta)
    lp32 = quick.log_joint(model_index, theta.float())
    assert lp64.dtype == torch.float64 and lp32.dtype == torch.float32
    # float32 logits (|.| <= ~150) round at ~1e-5 each, 400 of them per row: ~1e-3 absolute on |lp| ~ 1e4.
    torch.testing.assert_close(lp32.double(), lp64, rtol=1e-6, atol=1e-2)


def test_non_finite_active_coordinates_give_minus_inf_and_inactive_are_ignored(quick: GaussianMixture2D) -> None:
    model_index = torch.tensor([2, 2, 2, 2])
    theta = torch.zeros(4, quick.dim_max, dtype=torch.float64)
    theta[0, 1], theta[1, quick.max_components], theta[2, 0] = math.nan, math.inf, -math.inf
    theta[3, 3], theta[3, quick.max_components + 6] = math.nan, math.inf  # inactive for k = 3
    out = quick.log_joint(model_index, theta)
    assert (out[:3] == -math.inf).all()
    assert out[3] == quick.log_joint(model_index[3:], torch.zeros(1, quick.dim_max, dtype=torch.float64))[0]


def test_likelihood_and_prior_helpers_add_up(quick: GaussianMixture2D) -> None:
    model_index, theta = random_inputs(quick, 16, seed=8)
    parts = quick.log_model_prior(model_index) + quick.log_param_prior(model_index, theta)
    torch.testing.assert_close(parts + quick.log_likelihood(model_index, theta), quick.log_joint(model_index, theta))


# ------------------------------------------------------------------------------------------- structure
def test_mask_layout_and_labels() -> None:
    problem = GaussianMixture2D(max_components=4, true_components=2)
    assert problem.dim_max == 8 and problem.model_space.labels == ["k=1", "k=2", "k=3", "k=4"]
    expected = torch.tensor(
        [[1, 0, 0, 0, 1, 0, 0, 0], [1, 1, 0, 0, 1, 1, 0, 0], [1, 1, 1, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1]],
        dtype=torch.bool,
    )
    mask = problem.mask(torch.arange(4))
    assert mask.dtype == torch.bool and torch.equal(mask, expected)
    assert torch.equal(problem.model_dim(torch.arange(4)), torch.tensor([2, 4, 6, 8]))


@pytest.mark.parametrize("name", ["quick", "k100"])
def test_model_prior_is_normalised_bic_penalty(name: str, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(name)
    log_prior = problem.log_model_prior(problem.model_space.all_indices())
    assert log_prior.dtype == torch.float64
    assert torch.logsumexp(log_prior, 0).item() == pytest.approx(0.0, abs=1e-12)
    step = -problem.complexity_penalty * 0.5 * math.log(problem.y.shape[0])  # 8.294 nats at N = 4000
    torch.testing.assert_close(log_prior.diff(), torch.full_like(log_prior[1:], step), rtol=0, atol=1e-12)


def test_data_generating_process_and_box(k100: GaussianMixture2DK100) -> None:
    data = generate(50, 4000, 0.5, 42)
    assert torch.equal(data.y, k100.y) and k100.true_k == 50 and k100.dim_max == 200
    assert data.true_means.min() >= 0 and data.true_means.max() <= 10
    assert torch.bincount(data.labels, minlength=50).min() > 40  # ~80 points per component
    residual_sd = (data.y - data.true_means[data.labels]).std()
    assert residual_sd.item() == pytest.approx(0.5, rel=0.03)  # 8000 N(0, 0.25) draws: se ~0.8%
    low, high = k100.y.amin(0), k100.y.amax(0)
    torch.testing.assert_close(k100.box_low, low - 0.2 * (high - low))
    torch.testing.assert_close(k100.box_high, high + 0.2 * (high - low))


def test_registration_configs_and_profiles() -> None:
    quick, paper = make_problem("gmm-2d"), make_problem("gmm-2d-k100")
    assert quick.config() == {
        "max_components": 8,
        "true_components": 5,
        "num_observations": 150,
        "noise_sd": 0.5,
        "complexity_penalty": 2.0,
        "data_seed": 21,
    }
    assert paper.config()["max_components"] == 100 and paper.config()["data_seed"] == 42
    assert paper.planned_in == ("paper",) and quick.planned_in == ("smoke", "paper")
    assert quick.reference_model_probs() is None and quick.reference_draws(10, torch.Generator()) is None
    assert quick.main_metric == "k_abs_error" and quick.higher_is_better == frozenset({"q_true_k"})


def test_quick_instance_true_means_are_well_separated(quick: GaussianMixture2D) -> None:
    distance = torch.cdist(quick.true_means, quick.true_means) + 100 * torch.eye(quick.true_k, dtype=torch.float64)
    assert distance.min() >= 6 * quick.noise_sd


# ------------------------------------------------------------------------------------------- prior Jacobian
def test_prior_is_the_uniform_box_density_through_the_sigmoid(quick: GaussianMixture2D) -> None:
    # Change of variables for k = 1: theta = logit((mu - lo) / w) with mu ~ U(box) has density
    # 1 / (w_x w_y) * |d mu / d theta|, the derivative taken here by autograd through decode_means.
    gen = torch.Generator().manual_seed(9)
    width = quick.box_high - quick.box_low
    means = quick.box_low + width * torch.rand(200, 2, generator=gen, dtype=torch.float64)
    theta = torch.stack([theta_of_means(quick, mu[None]) for mu in means]).requires_grad_(True)
    decoded = quick.decode_means(theta)[:, 0]  # [200, 2]
    torch.testing.assert_close(decoded, means)
    dx = torch.autograd.grad(decoded[:, 0].sum(), theta, retain_graph=True)[0][:, 0]
    dy = torch.autograd.grad(decoded[:, 1].sum(), theta)[0][:, quick.max_components]
    expected = -torch.log(width[0] * width[1]) + dx.log() + dy.log()
    model_index = torch.zeros(200, dtype=torch.int64)
    torch.testing.assert_close(quick.log_param_prior(model_index, theta.detach()), expected, rtol=1e-12, atol=1e-12)


def test_prior_density_integrates_to_one(quick: GaussianMixture2D) -> None:
    # p(theta | k=1) = f(theta_x) f(theta_y) with f the standard logistic density: with theta_y = 0 fixed
    # (f(0) = 1/4) the trapezoid rule over theta_x in [-60, 60] (tails e^-60) must give 1/4.
    t = torch.linspace(-60, 60, 240_001, dtype=torch.float64)
    theta = torch.zeros(len(t), quick.dim_max, dtype=torch.float64)
    theta[:, 0] = t
    density = quick.log_param_prior(torch.zeros(len(t), dtype=torch.int64), theta).exp()
    assert torch.trapezoid(density, t).item() == pytest.approx(0.25, abs=1e-9)


def test_jacobian_floor_of_the_reference(quick: GaussianMixture2D) -> None:
    # Far out, w s(t) (1 - s(t)) < 1e-30 and each log-Jacobian is floored at log(1e-30) as in [GMM-ref].
    theta = torch.zeros(1, quick.dim_max, dtype=torch.float64)
    theta[0, 0], theta[0, quick.max_components] = 90.0, -120.0
    expected = 2 * math.log(1e-30) - math.log(float((quick.box_high - quick.box_low).prod()))
    assert quick.log_param_prior(torch.tensor([0]), theta).item() == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------------- metrics, plots
def test_task_metrics_on_hand_made_model_probs(quick: GaussianMixture2D) -> None:
    probs = ModelProbs(torch.tensor([3, 4, 5]), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64))
    metrics = quick.task_metrics(probs, None)
    assert set(metrics) == {"q_true_k", "expected_k", "k_abs_error"}
    assert all(isinstance(v, Estimate) for v in metrics.values())
    assert metrics["q_true_k"].value == pytest.approx(0.5)  # true k = 5 is index 4
    assert metrics["expected_k"].value == pytest.approx(0.2 * 4 + 0.5 * 5 + 0.3 * 6)  # 5.1
    assert metrics["k_abs_error"].value == pytest.approx(0.1)
    assert quick.task_metrics(None, None) == {}
    with_se = ModelProbs(probs.index, probs.prob, torch.tensor([0.01, 0.02, 0.03], dtype=torch.float64))
    assert quick.task_metrics(with_se, None)["q_true_k"].se == pytest.approx(0.02)
    missing = quick.task_metrics(ModelProbs.from_dense(torch.eye(8, dtype=torch.float64)[7]), None)
    assert missing["q_true_k"].value == 0 and missing["k_abs_error"].value == pytest.approx(3.0)


def fake_draws(problem: GaussianMixture2D, seed: int) -> Draws:
    """40 draws of k = 5 near the true means, 10 of k = 6 with an extra mean: a plausible posterior sample."""
    gen = torch.Generator().manual_seed(seed)
    rows, models = [], []
    for k, count in ((5, 40), (6, 10)):
        for _ in range(count):
            means = problem.true_means + 0.05 * torch.randn(5, 2, generator=gen, dtype=torch.float64)
            if k == 6:
                means = torch.cat([means, torch.tensor([[5.0, 5.0]], dtype=torch.float64)])
            rows.append(theta_of_means(problem, means))
            models.append(k - 1)
    return Draws(torch.tensor(models), torch.stack(rows))


def test_predictive_density_matches_direct_average(quick: GaussianMixture2D) -> None:
    draws = fake_draws(quick, seed=10)
    grid = torch.tensor([[1.0, 2.0], [5.0, 5.0], [8.0, 1.0], [-3.0, 12.0]], dtype=torch.float64)
    means = quick.decode_means(draws.theta)
    expected = torch.zeros(len(grid), dtype=torch.float64)
    cov = quick.noise_sd**2 * torch.eye(2, dtype=torch.float64)
    for s in range(len(draws)):
        k = int(draws.model_index[s]) + 1
        for i in range(k):
            expected += MultivariateNormal(means[s, i], cov).log_prob(grid).exp() / k
    torch.testing.assert_close(quick.predictive_density(grid, draws), expected / len(draws), rtol=1e-12, atol=1e-300)


def test_plot_result_writes_a_png(quick: GaussianMixture2D, tmp_path) -> None:
    draws = fake_draws(quick, seed=11)
    probs = ModelProbs(torch.tensor([4, 5]), torch.tensor([0.8, 0.2], dtype=torch.float64))
    for name, model_probs, result_draws in (("full", probs, draws), ("probs", probs, None), ("draws", None, draws)):
        path = quick.plot_result(model_probs, result_draws, tmp_path / "sub" / f"{name}.png")
        assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert quick.plot_result(None, None, tmp_path / "none.png") is None


# ------------------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_components": 0},
        {"max_components": 2.5},
        {"max_components": True},
        {"true_components": 0},
        {"true_components": 11},
        {"num_observations": 1},
        {"noise_sd": 0.0},
        {"noise_sd": -1.0},
        {"noise_sd": math.inf},
        {"complexity_penalty": -0.1},
        {"complexity_penalty": math.nan},
        {"data_seed": 1.5},
    ],
)
def test_bad_arguments_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        GaussianMixture2D(**kwargs)


# ------------------------------------------------------------------------------------------- posterior
def _smooth_log_joint(problem: GaussianMixture2D, k: int, theta: Tensor) -> Tensor:
    """log p(y, theta, k) for one k on theta [2k], twice differentiable (for Hessians); no floor (not reached)."""
    low, width = problem.box_low, problem.box_high - problem.box_low
    means = low + width * torch.sigmoid(theta.reshape(2, k).T)
    log_prior = (torch.nn.functional.logsigmoid(theta) + torch.nn.functional.logsigmoid(-theta)).sum()
    sq = (problem.y[:, None, :] - means[None]).square().sum(-1)
    log_norm = math.log(k) + math.log(2 * math.pi * problem.noise_sd**2)
    log_lik = (torch.logsumexp(-0.5 * sq / problem.noise_sd**2, 1) - log_norm).sum()
    return problem.log_model_prior(torch.tensor([k - 1]))[0] + log_prior + log_lik


def _laplace_log_evidence(problem: GaussianMixture2D, k: int, gen: torch.Generator) -> float:
    """log p(y, k) by Laplace at the best of 4 EM + L-BFGS fits, times k! label-switched modes."""
    y, best = problem.y, None
    for _ in range(4):
        means = y[torch.randperm(len(y), generator=gen)[:k]].clone()
        for _ in range(100):  # EM for the means of an equal-weight, known-sigma mixture
            resp = torch.softmax(-0.5 * (y[:, None] - means[None]).square().sum(-1) / problem.noise_sd**2, 1)
            means = (resp.T @ y) / resp.sum(0)[:, None].clamp_min(1e-12)
        u = ((means - problem.box_low) / (problem.box_high - problem.box_low)).clamp(1e-9, 1 - 1e-9)
        theta = torch.logit(u.T.reshape(-1)).requires_grad_(True)
        opt = torch.optim.LBFGS([theta], max_iter=100, line_search_fn="strong_wolfe")

        def closure(theta: Tensor = theta, opt: torch.optim.Optimizer = opt) -> Tensor:
            opt.zero_grad()
            loss = -_smooth_log_joint(problem, k, theta)
            loss.backward()
            return loss

        opt.step(closure)
        if best is None or closure().item() < best[0]:
            best = (closure().item(), theta.detach().clone())
    theta = best[1]
    # the problem's own log joint at the mode (slots beyond k inactive)
    saturated = torch.zeros(1, problem.dim_max, dtype=torch.float64)
    saturated[0, :k], saturated[0, problem.max_components : problem.max_components + k] = theta[:k], theta[k:]
    log_peak = problem.log_joint(torch.tensor([k - 1]), saturated).item()
    hessian = torch.autograd.functional.hessian(lambda t: _smooth_log_joint(problem, k, t), theta)
    return log_peak + k * math.log(2 * math.pi) - 0.5 * torch.linalg.slogdet(-hessian)[1].item() + math.lgamma(k + 1)


def test_quick_posterior_concentrates_on_the_true_k(quick: GaussianMixture2D) -> None:
    # Known answer by design: the 5 true means are >= 6 sigma apart, so dropping one component costs hundreds
    # of nats of likelihood and adding one the penalty 5.0 nats plus an Occam factor of ~log(15^2 * 30 / (2 pi
    # sigma^2)) ~ 8 nats. Laplace approximations of log p(y, k) must show margins of well over 10 nats (about
    # 229 to k = 4 and 15 to k = 6), i.e. q(5) > 0.9999; the fits only lower-bound the peaks of k = 6, 7.
    gen = torch.Generator().manual_seed(12)
    evidence = {k: _laplace_log_evidence(quick, k, gen) for k in (4, 5, 6, 7)}
    assert max(evidence, key=evidence.get) == quick.true_k
    assert evidence[5] - max(evidence[4], evidence[6], evidence[7]) > 10
