"""Kernel invariance: started exactly at pi, one or more moves must leave pi unchanged.

Exact draws from the target are pushed through the kernels with arbitrary
fixed standardisations; a wrong acceptance ratio (a missing Jacobian or
auxiliary density) shifts the model frequencies or the parameter moments.
"""

import math

import pytest
import torch

from methods.rjmcmc.kernels import ChainState, between_model_move, propose_model, random_walk_move
from problems.sas.problem import SinhArcsinh
from suite.core.model_space import CountSpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import row_sum, rows
from suite.core.types import Draws, ModelProbs

N = 400_000


class NestedGaussians(Problem):
    """k = 0..3 with coordinates 0..k-1 active; pi(k, theta) = w_k N(theta_A; mu_k, diag(sd_k^2)).

    The weights put a valley at k = 1, 2 between the modes k = 0 and k = 3, which neighbour jumps cross rarely.
    """

    name = "test-nested-gaussians"
    WEIGHTS = (0.35, 0.03, 0.07, 0.55)

    def __init__(self) -> None:
        self.model_space = CountSpace(0, 3)
        self.dim_max = 3
        self.mu = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [-1.0, 2.0, 0.0], [0.5, -2.0, 1.0]])
        self.sd = torch.tensor([[1.0, 1.0, 1.0], [0.5, 1.0, 1.0], [1.0, 0.3, 1.0], [2.0, 0.5, 0.7]])
        self.mu, self.sd = self.mu.double(), self.sd.double()
        self.log_w = torch.tensor(self.WEIGHTS, dtype=torch.float64).log()

    def mask(self, model_index: torch.Tensor) -> torch.Tensor:
        return torch.arange(3, device=model_index.device)[None, :] < model_index[:, None]

    def log_model_prior(self, model_index: torch.Tensor) -> torch.Tensor:
        return torch.full(model_index.shape, -math.log(4.0), dtype=torch.float64)

    def log_joint(self, model_index: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        mu, sd, active = rows(self.mu, model_index), rows(self.sd, model_index), self.mask(model_index)
        per = -0.5 * ((theta - mu) / sd) ** 2 - sd.log() - LOG_SQRT_2PI
        return rows(self.log_w, model_index) + torch.where(active, per, 0.0).sum(-1)

    def reference_model_probs(self) -> ModelProbs:
        return ModelProbs.from_dense(torch.tensor(self.WEIGHTS, dtype=torch.float64))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        weights = torch.tensor(self.WEIGHTS, dtype=torch.float64)
        m = torch.multinomial(weights, num_draws, replacement=True, generator=generator)
        eps = torch.randn(num_draws, 3, generator=generator, dtype=torch.float64)
        return Draws(m, torch.where(self.mask(m), self.mu[m] + self.sd[m] * eps, 0.0))


def start(problem, n: int, seed: int) -> ChainState:
    draws = problem.reference_draws(n, torch.Generator().manual_seed(seed))
    return ChainState(draws.model_index, draws.theta, problem.log_joint(draws.model_index, draws.theta))


def fixed_standardiser(problem, loc: list, scale: list):
    loc_t, scale_t = torch.tensor(loc, dtype=torch.float64), torch.tensor(scale, dtype=torch.float64)

    def standardiser(m: torch.Tensor, active: torch.Tensor):
        lo, sc = rows(loc_t, m), rows(scale_t, m)
        return lo, sc, row_sum(torch.where(active, sc.log(), 0.0))

    return standardiser


def check_invariance(problem, state: ChainState, reference: ChainState) -> None:
    num_models = problem.num_models
    freq, ref_freq = (torch.bincount(s.model_index, minlength=num_models).double() / N for s in (state, reference))
    se = (ref_freq * (1 - ref_freq) / N).sqrt() * math.sqrt(2)  # difference of two independent samples
    assert ((freq - ref_freq).abs() < 5 * se + 1e-12).all(), (freq, ref_freq)
    for m in range(num_models):
        a, b = state.theta[state.model_index == m], reference.theta[reference.model_index == m]
        active = problem.mask(torch.tensor([m]))[0]
        # Compare medians of each active coordinate (robust to the heavy sinh-arcsinh tails).
        for i in torch.nonzero(active).flatten().tolist():
            qa, qb = a[:, i].median(), b[:, i].median()
            spread = (b[:, i].quantile(0.75) - b[:, i].quantile(0.25)).item()
            assert abs(qa - qb) < 6 * 1.25 * spread / math.sqrt(len(a)) * math.sqrt(2), (m, i, qa, qb)


def test_standardised_jumps_preserve_sas() -> None:
    problem = SinhArcsinh()
    gen = torch.Generator().manual_seed(3)
    state = start(problem, N, seed=0)
    # A deliberately imperfect standardisation: the ratio must correct for it.
    std = fixed_standardiser(problem, [[-3.0, 0.0], [2.0, -1.5]], [[2.0, 1.0], [1.5, 2.5]])
    for _ in range(5):
        state, accept = between_model_move(problem, state, std, gen)
    assert accept.double().mean() > 0.02  # the test must exercise accepted jumps
    check_invariance(problem, state, start(problem, N, seed=1))


def test_identity_jumps_preserve_gaussian_models(gaussian_models) -> None:
    problem = gaussian_models
    gen = torch.Generator().manual_seed(4)
    state = start(problem, N, seed=0)
    std = fixed_standardiser(problem, [[0.0, 0.0]] * 4, [[1.0, 1.0]] * 4)
    for _ in range(5):
        state, accept = between_model_move(problem, state, std, gen)
    assert accept.double().mean() > 0.05
    check_invariance(problem, state, start(problem, N, seed=1))


def test_random_walk_preserves_sas() -> None:
    problem = SinhArcsinh()
    gen = torch.Generator().manual_seed(5)
    state = start(problem, N, seed=0)
    chol = torch.tensor([[1.0, 0.0], [0.8, 0.4]], dtype=torch.float64).expand(N, 2, 2)
    for _ in range(5):
        state, accept = random_walk_move(problem, state, chol, gen)
    assert 0.05 < accept.double().mean() < 0.95
    check_invariance(problem, state, start(problem, N, seed=1))


@pytest.mark.slow
def test_dag_jumps_preserve_linear_dag() -> None:
    # Non-symmetric jumps (edge toggles weighted by neighbour counts) and 20-dimensional saturation.
    from problems.linear_dag.problem import LinearDAG

    problem = LinearDAG(num_nodes=4)
    gen = torch.Generator().manual_seed(6)
    state = start(problem, N, seed=0)
    dim = problem.dim_max
    std = fixed_standardiser(problem, [[0.0] * dim] * problem.num_models, [[1.0] * dim] * problem.num_models)
    for _ in range(5):
        state, accept = between_model_move(problem, state, std, gen)
    assert accept.double().mean() > 0.02
    reference = start(problem, N, seed=1)
    # 543 models: compare the models that carry most of the mass, each within its binomial error.
    freq, ref_freq = (
        torch.bincount(s.model_index, minlength=problem.num_models).double() / N for s in (state, reference)
    )
    common = ref_freq > 0.005
    se = (ref_freq * (1 - ref_freq) / N).sqrt() * math.sqrt(2)
    assert ((freq - ref_freq).abs() < 5 * se)[common].all()


def test_global_proposals_mix_uniform_draws_into_neighbour_jumps() -> None:
    # From k = 1 the neighbour jump reaches 0 or 2 only; with global_prob 0.3 a third of the uniform draws over
    # the other models (0, 2, 3) reach k = 3, and none stays at k = 1.
    problem = NestedGaussians()
    m = torch.ones(N, dtype=torch.int64)
    m_new, log_ratio = propose_model(problem, m, torch.Generator().manual_seed(8), global_prob=0.3)
    freq = torch.bincount(m_new, minlength=4).double() / N
    expected = torch.tensor([0.7 * 0.5 + 0.3 / 3, 0.0, 0.7 * 0.5 + 0.3 / 3, 0.3 / 3], dtype=torch.float64)
    assert ((freq - expected).abs() <= 5 * (expected * (1 - expected) / N).sqrt()).all(), freq
    # Uniform draws are symmetric (ratio 0); neighbour jumps from the interior to an end carry log 2.
    assert log_ratio.unique().tolist() == pytest.approx([0.0, math.log(2.0)])


@pytest.mark.parametrize("global_prob", [0.0, 0.5])
def test_neighbour_and_global_jumps_preserve_nested_gaussians(global_prob: float) -> None:
    # CountSpace jumps are not symmetric at the ends; the uniform part adds jumps between k = 0 and k = 3.
    problem = NestedGaussians()
    gen = torch.Generator().manual_seed(9)
    state = start(problem, N, seed=0)
    std = fixed_standardiser(problem, [[0.3, -0.5, 0.2]] * 4, [[1.5, 0.8, 1.2]] * 4)
    for _ in range(5):
        before = state.model_index
        state, accept = between_model_move(problem, state, std, gen, global_prob=global_prob)
    assert accept.double().mean() > 0.02
    crossed = ((before - state.model_index).abs() == 3).double().mean()
    assert (crossed > 0.005) == (global_prob > 0)  # only global proposals jump from one end to the other
    check_invariance(problem, state, start(problem, N, seed=1))
