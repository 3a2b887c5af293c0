"""block-vs: data, densities against scipy, prior sampling, simulated data, and the quadrature evidence."""

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import Tensor

import problems.block_vs.problem as block_vs
from problems.block_vs.problem import BlockVS, BlockVSSimulated, simulate_block_vs_data
from problems.block_vs.quadrature import find_box, log_evidence_by_quadrature
from suite.core.backend import TORCH
from suite.core.model_space import CategoricalSpace
from suite.core.problem import Problem
from suite.data.locate import DataUnavailable

IDENTIFIERS = ["(1,0,0,0)", "(1,1,0,0)", "(1,0,1,1)", "(1,1,1,1)"]
MASKS = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1]]


@pytest.fixture(scope="module")
def shipped() -> BlockVS:
    problem = BlockVS()
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


@pytest.fixture(scope="module", params=["shipped", "simulated"])
def problem(request: pytest.FixtureRequest) -> BlockVS:
    if request.param == "simulated":
        return BlockVSSimulated(data_seed=3)
    return request.getfixturevalue("shipped")


def random_points(problem: BlockVS, n: int, seed: int, scale: float = 3.0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    m = problem.model_space.sample_uniform(n, gen)
    theta = scale * torch.randn(n, 4, generator=gen, dtype=torch.float64)
    return m, torch.where(problem.mask(m), theta, 0.0)


def scipy_log_lik(x: np.ndarray, y: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """The spec's normalised form: sum_i log(1/2 N(r; 0, 1) + 1/2 N(r; 0, 10^2)) + n log(2 sqrt(2 pi))."""
    r = y[None, :] - beta @ x.T
    mix = np.logaddexp(stats.norm(0, 1).logpdf(r), stats.norm(0, 10).logpdf(r)) + math.log(0.5)
    return mix.sum(-1) + len(y) * math.log(2 * math.sqrt(2 * math.pi))


# ---------------------------------------------------------------------------- data and models
def test_shipped_data_matches_the_spec(shipped: BlockVS) -> None:
    assert shipped.x.shape == (80, 4) and shipped.y.shape == (80,)
    assert (shipped.x[:, 0] == 1).all()
    assert shipped.y.sum().item() == pytest.approx(249.781291, abs=1e-5)
    assert shipped.y.mean().item() == pytest.approx(3.1223, abs=1e-4)
    assert shipped.y.std().item() == pytest.approx(4.552, abs=1e-3)
    np.testing.assert_allclose(shipped.y[:3].numpy(), [-2.46979747, 0.50775025, 6.05480637], atol=1e-8)
    assert shipped.config() == {"data": "block_vs.csv"} and shipped.unavailable_reason() is None


def test_a_wrong_data_summary_is_reported_as_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_vs, "SUM_Y", 250.0)
    if block_vs.unavailable_reason(block_vs.DATA_FILE):
        pytest.skip("data file missing")
    with pytest.raises(DataUnavailable, match="sum"):
        block_vs.load_block_vs_data()


def test_missing_data_makes_the_problem_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_vs, "unavailable_reason", lambda name: f"{name} not found")
    problem = BlockVS()
    assert problem.unavailable_reason() == "block_vs.csv not found"
    assert problem.mask(torch.tensor([2])).tolist() == [[True, False, True, True]]
    with pytest.raises(DataUnavailable):
        problem.log_joint(torch.tensor([0]), torch.zeros(1, 4, dtype=torch.float64))


def test_models_masks_and_prior(problem: BlockVS) -> None:
    space = problem.model_space
    assert isinstance(space, CategoricalSpace) and space.num_models == 4 and problem.dim_max == 4
    assert [space.identifier(i) for i in range(4)] == IDENTIFIERS
    all_models = space.all_indices()
    assert problem.mask(all_models).tolist() == [[bool(b) for b in row] for row in MASKS]
    assert problem.model_dim(all_models).tolist() == [1, 2, 3, 4]
    torch.testing.assert_close(
        problem.log_model_prior(all_models), torch.full((4,), math.log(0.25), dtype=torch.float64)
    )


# ---------------------------------------------------------------------------- densities
def test_log_joint_matches_scipy(problem: BlockVS) -> None:
    m, theta = random_points(problem, 500, seed=0)
    x, y, beta = problem.x.numpy(), problem.y.numpy(), theta.numpy()
    prior = np.where(problem.mask(m).numpy(), stats.norm(0, 10).logpdf(beta), 0.0).sum(-1)
    expected = math.log(0.25) + prior + scipy_log_lik(x, y, beta)
    np.testing.assert_allclose(problem.log_joint(m, theta).numpy(), expected, rtol=1e-12, atol=1e-10)


def test_likelihood_is_the_prior_split_and_stable_for_huge_residuals(problem: BlockVS) -> None:
    # log_joint - log p(m) - log p(theta | m) is the likelihood alone, also where exp(-r^2/2) underflows.
    for scale in (3.0, 1e3):
        m, theta = random_points(problem, 300, seed=1, scale=scale)
        log_lik = (
            problem.log_joint(m, theta) - problem.log_model_prior(m) - problem.log_prior_with(TORCH, m, theta)
        ).numpy()
        expected = scipy_log_lik(problem.x.numpy(), problem.y.numpy(), theta.numpy())
        assert np.isfinite(log_lik).all()
        np.testing.assert_allclose(log_lik, expected, rtol=1e-12, atol=1e-9)


def test_log_prior_is_normalised_normal_sd_10(problem: BlockVS) -> None:
    m, theta = random_points(problem, 400, seed=2, scale=10.0)
    expected = np.where(problem.mask(m).numpy(), stats.norm(0, 10).logpdf(theta.numpy()), 0.0).sum(-1)
    np.testing.assert_allclose(problem.log_prior_with(TORCH, m, theta).numpy(), expected, rtol=1e-13, atol=1e-12)


def test_sample_prior_moments(problem: BlockVS) -> None:
    n = 40_000
    m = torch.full((n,), 3, dtype=torch.int64)
    draws = problem.sample_prior(m, torch.Generator().manual_seed(5))
    assert draws.dtype == torch.float64 and draws.shape == (n, 4)
    # mean: se = 10 / sqrt(n) = 0.05; sd: se ~ 10 / sqrt(2n) = 0.035; 5 standard errors each.
    assert draws.mean(0).abs().max().item() < 0.25
    assert (draws.std(0) - 10).abs().max().item() < 0.18
    partial = problem.sample_prior(torch.tensor([0, 1, 2] * 100), torch.Generator().manual_seed(6))
    assert (partial[~problem.mask(torch.tensor([0, 1, 2] * 100))] == 0).all()


def test_float32_agrees_with_float64_near_the_posterior(problem: BlockVS) -> None:
    m, theta = random_points(problem, 256, seed=7, scale=1.0)
    theta = torch.where(problem.mask(m), theta + torch.tensor([2.5, 1.0, 0.0, 0.0], dtype=torch.float64), 0.0)
    lp64 = problem.log_joint(m, theta)
    lp32 = problem.log_joint(m, theta.float())
    assert lp32.dtype == torch.float32
    torch.testing.assert_close(lp32.double(), lp64, rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------------------- simulated data
def test_simulated_data_are_deterministic_by_seed() -> None:
    a, b, c = BlockVSSimulated(data_seed=0), BlockVSSimulated(data_seed=0), BlockVSSimulated(data_seed=1)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.y, c.y)
    assert a.config() == {"data": "simulated", "data_seed": 0} and a.unavailable_reason() is None
    assert a.x.shape == (80, 4) and (a.x[:, 0] == 1).all()


def test_simulated_data_follow_the_papers_process() -> None:
    # Regress y on (first-half intercept, second-half intercept, X.2, X.3, X.4) for a large sample:
    # coefficients (1, 6, 1, 0, 0) and residual sd 5 within 5 standard errors.
    n = 40_000
    x, y = simulate_block_vs_data(seed=11, num_samples=n)
    first = torch.arange(n) < n // 2
    design = torch.stack([first.double(), (~first).double(), x[:, 1], x[:, 2], x[:, 3]], 1)
    coef = torch.linalg.lstsq(design, y[:, None]).solution.squeeze(-1)
    se = 5.0 / math.sqrt(n / 2)
    torch.testing.assert_close(coef, torch.tensor([1.0, 6.0, 1.0, 0.0, 0.0], dtype=torch.float64), atol=5 * se, rtol=0)
    resid_sd = (y - design @ coef).std().item()
    assert resid_sd == pytest.approx(5.0, abs=5 * 5.0 / math.sqrt(2 * n))


# ---------------------------------------------------------------------------- quadrature
class GaussianRegression(Problem):
    """y = X_m beta + N(0, s^2), beta ~ N(0, tau^2 I): log evidence log N(y; 0, s^2 I + tau^2 X_m X_m^T)."""

    name = "test-gaussian-regression"

    def __init__(self, noise_sd: float = 1.5, prior_sd: float = 2.0) -> None:
        self.model_space = CategoricalSpace(["1", "2", "3"])
        self.dim_max = 3
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(30, 3, generator=gen, dtype=torch.float64)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + noise_sd * torch.randn(
            30, generator=gen, dtype=torch.float64
        )
        self.noise_sd, self.prior_sd = noise_sd, prior_sd
        self.masks = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])

    def mask(self, model_index: Tensor) -> Tensor:
        return self.masks[model_index]

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        return torch.full(model_index.shape, -math.log(3.0), dtype=torch.float64)

    def log_prior_with(self, xp: object, model_index: Tensor, theta: Tensor) -> Tensor:
        beta = torch.where(self.mask(model_index), theta, 0.0)
        dims = self.mask(model_index).sum(-1).double()
        return -0.5 * (beta**2).sum(-1) / self.prior_sd**2 - dims * (
            math.log(self.prior_sd) + 0.5 * math.log(2 * math.pi)
        )

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        z = torch.randn(len(model_index), 3, generator=generator, dtype=torch.float64)
        return torch.where(self.mask(model_index), self.prior_sd * z, 0.0)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        beta = torch.where(self.mask(model_index), theta, 0.0)
        r = self.y - beta @ self.x.T
        log_lik = (-0.5 * (r / self.noise_sd) ** 2 - math.log(self.noise_sd) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return self.log_model_prior(model_index) + self.log_prior_with(None, model_index, theta) + log_lik

    def exact_log_evidence(self, model_index: int) -> float:
        xm = self.x[:, self.masks[model_index]].numpy()
        cov = self.noise_sd**2 * np.eye(len(self.y)) + self.prior_sd**2 * xm @ xm.T
        return float(stats.multivariate_normal(np.zeros(len(self.y)), cov).logpdf(self.y.numpy()))


class TwoModes(Problem):
    """One model, exp(log_joint) = 7 (0.3 N(mu_1, diag(0.3^2)) + 0.7 N(mu_2, diag(0.5^2))): log evidence log 7."""

    name = "test-two-modes"
    MU = ((-4.0, 1.0), (5.0, 3.0))

    def __init__(self) -> None:
        self.model_space = CategoricalSpace(["only"])
        self.dim_max = 2

    def mask(self, model_index: Tensor) -> Tensor:
        return torch.ones(len(model_index), 2, dtype=torch.bool)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        return torch.zeros(model_index.shape, dtype=torch.float64)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        mu = torch.tensor(self.MU, dtype=theta.dtype)
        sd = torch.tensor([0.3, 0.5], dtype=theta.dtype)
        comp = -0.5 * (((theta[:, None, :] - mu) / sd[:, None]) ** 2).sum(-1) - 2 * sd.log() - math.log(2 * math.pi)
        return math.log(7.0) + torch.logsumexp(comp + torch.tensor([0.3, 0.7], dtype=theta.dtype).log(), -1)


@pytest.mark.parametrize("model_index", [0, 1, 2])
def test_quadrature_matches_a_closed_form_evidence(model_index: int) -> None:
    problem = GaussianRegression()
    lo, hi = find_box(problem, model_index)
    box = list(zip(lo.tolist(), hi.tolist(), strict=True))
    exact = problem.exact_log_evidence(model_index)
    assert log_evidence_by_quadrature(problem, model_index, 32, box=box) == pytest.approx(exact, abs=1e-9)
    assert log_evidence_by_quadrature(problem, model_index, 40, box=box, rule="gauss-legendre") == pytest.approx(
        exact, abs=1e-9
    )


def test_quadrature_finds_and_covers_two_separated_modes() -> None:
    problem = TwoModes()
    lo, hi = find_box(problem, 0)
    assert (lo < torch.tensor([-4 - 6 * 0.3, 1 - 6 * 0.3])).all() and (
        hi > torch.tensor([5 + 6 * 0.5, 3 + 6 * 0.5])
    ).all()
    assert log_evidence_by_quadrature(problem, 0, 160) == pytest.approx(math.log(7.0), abs=1e-9)


def test_quadrature_rejects_bad_rules() -> None:
    with pytest.raises(ValueError, match="rule"):
        log_evidence_by_quadrature(TwoModes(), 0, 10, rule="simpson", box=[(-1, 1), (-1, 1)])


@pytest.mark.parametrize(("model_index", "nodes"), [(0, (40, 56, 64)), (1, (56, 72, 96)), (2, (48, 64, 80))])
def test_quadrature_converges_on_block_vs(shipped: BlockVS, model_index: int, nodes: tuple[int, int, int]) -> None:
    # Two trapezoid node counts, and Gauss-Legendre as an independent rule, agree on the box found once.
    lo, hi = find_box(shipped, model_index)
    box = list(zip(lo.tolist(), hi.tolist(), strict=True))
    coarse = log_evidence_by_quadrature(shipped, model_index, nodes[0], box=box)
    fine = log_evidence_by_quadrature(shipped, model_index, nodes[1], box=box)
    legendre = log_evidence_by_quadrature(shipped, model_index, nodes[2], box=box, rule="gauss-legendre")
    assert fine == pytest.approx(coarse, abs=1e-6)
    assert legendre == pytest.approx(fine, abs=1e-6)


@pytest.mark.slow
def test_quadrature_converges_on_block_vs_full_model(shipped: BlockVS) -> None:
    # Model (1,1,1,1): 52^4 and 60^4 points (~2e7 evaluations, ~15 s on 2 idle cores).
    lo, hi = find_box(shipped, 3)
    box = list(zip(lo.tolist(), hi.tolist(), strict=True))
    coarse = log_evidence_by_quadrature(shipped, 3, 52, box=box)
    fine = log_evidence_by_quadrature(shipped, 3, 60, box=box)
    assert fine == pytest.approx(coarse, abs=1e-6)


@pytest.mark.slow
def test_stored_reference_has_the_quadrature_probabilities_and_smc_evidences_within_their_errors() -> None:
    """The shipped reference's p(m | D) are quadrature's (64 nodes here, accurate to ~1e-9); SMC's own evidences, kept
    in its provenance, are within 4 of their standard errors of the same integrals."""
    problem = BlockVS()
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    reference = problem.stored_reference()
    assert reference is not None, "block-vs reference is not shipped"
    assert reference.provenance["evidence_used"] == "quadrature"
    exact = np.array([log_evidence_by_quadrature(problem, m, num_nodes=64) for m in range(4)])
    assert np.all(np.abs(reference.log_evidence - exact) <= reference.log_evidence_se + 1e-8)
    smc = np.asarray(reference.provenance["log_z_smc"]) - reference.log_model_prior
    smc_se = np.asarray(reference.provenance["log_z_se_smc"])
    assert np.all(np.abs(smc - exact) <= 4 * smc_se), (smc - exact, smc_se)


@pytest.mark.slow
def test_quadrature_model_probs_agree_with_an_independent_rule(shipped: BlockVS) -> None:
    """The study's exact p(m | D) (trapezoid, 40 and 48 nodes) against Gauss-Legendre evidences on the same boxes."""
    exact = shipped.quadrature_model_probs()
    assert float(exact.prob.sum()) == pytest.approx(1.0, abs=1e-12) and float(exact.se.max()) < 1e-4
    log_z = []
    for m in range(shipped.num_models):
        lo, hi = find_box(shipped, m)
        box = list(zip(lo.tolist(), hi.tolist(), strict=True))
        log_z.append(log_evidence_by_quadrature(shipped, m, 48, box=box, rule="gauss-legendre"))
    prior = shipped.log_model_prior(torch.arange(shipped.num_models)).to(torch.float64)
    legendre = torch.softmax(torch.tensor(log_z, dtype=torch.float64) + prior, 0)
    # Gauss-Legendre converges more slowly here (its nodes crowd the box's edges, where the integrand is ~0): 32
    # nodes are 6e-4 off, 48 nodes 1.4e-4. 3e-4 is still a tenth of the stored SMC reference's standard error.
    assert torch.allclose(exact.prob, legendre, atol=3e-4)
