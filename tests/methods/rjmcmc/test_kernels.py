"""Kernel invariance: started exactly at pi, one or more moves must leave pi unchanged.

Exact draws from the target are pushed through the kernels with arbitrary
fixed standardisations; a wrong acceptance ratio (a missing Jacobian or
auxiliary density) shifts the model frequencies or the parameter moments.
"""

import math

import pytest
import torch

from methods.common.chains import ChainState, random_walk_move
from methods.rjmcmc.kernels import between_model_move, propose_model, propose_swap
from problems.sas.problem import SinhArcsinh
from suite.core.model_space import BinarySpace, CountSpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import row_sum, rows
from suite.core.types import Draws, ModelProbs

N = 400_000


class GaussiansPerModel(Problem):
    """pi(m, theta) = w_m N(theta_A; mu_m, diag(sd_m^2)) on 3 coordinates: exact draws and model probabilities."""

    WEIGHTS: tuple[float, ...]
    mu: torch.Tensor
    sd: torch.Tensor
    log_w: torch.Tensor

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


class NestedGaussians(GaussiansPerModel):
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


class CollinearBits(GaussiansPerModel):
    """Three bits; pi(m, theta) = w_m N(theta_A; mu_m, diag(sd_m^2)) with bits 0 and 1 as collinear covariates.

    Models with exactly one of bits 0 and 1 carry 90% of the mass; both or neither are improbable, so single
    flips between "0 in, 1 out" and "0 out, 1 in" are rare and add-one-drop-one swaps make them directly.
    """

    name = "test-collinear-bits"
    #: Index b0 + 2 b1 + 4 b2.
    WEIGHTS = (0.01, 0.25, 0.20, 0.02, 0.02, 0.25, 0.20, 0.05)

    def __init__(self) -> None:
        self.model_space = BinarySpace(3)
        self.dim_max = 3
        gen = torch.Generator().manual_seed(11)
        self.mu = 2.0 * torch.randn(8, 3, generator=gen, dtype=torch.float64)
        self.sd = 0.3 + torch.rand(8, 3, generator=gen, dtype=torch.float64)
        self.log_w = torch.tensor(self.WEIGHTS, dtype=torch.float64).log()

    def mask(self, model_index: torch.Tensor) -> torch.Tensor:
        return self.model_space.bits(model_index)

    def log_model_prior(self, model_index: torch.Tensor) -> torch.Tensor:
        return torch.full(model_index.shape, -math.log(8.0), dtype=torch.float64)


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


def test_swaps_keep_the_number_of_bits_and_are_uniform_both_ways() -> None:
    # Every model of 4 bits, 100,000 swaps each: k included bits go to each of the k (4 - k) models with one bit
    # dropped and one added with probability 1 / (k (4 - k)), the same in both directions; k = 0 and k = 4 stay.
    space, n = BinarySpace(4), 100_000
    m = torch.arange(16).repeat_interleave(n)
    m_new = propose_swap(space, m, torch.Generator().manual_seed(12))
    freq = torch.bincount(m * 16 + m_new, minlength=256).double().view(16, 16) / n
    k = space.bits(torch.arange(16)).sum(-1)
    hamming = space.bits(torch.arange(16)[:, None] ^ torch.arange(16)[None, :]).sum(-1)
    swap = (k[:, None] == k[None, :]) & (hamming == 2)
    expected = torch.where(swap, 1.0 / (k * (4 - k)).clamp_min(1)[:, None].double(), 0.0)
    expected[0, 0] = expected[15, 15] = 1.0
    assert torch.equal(expected, expected.T)
    assert ((freq - expected).abs() <= 5 * (expected * (1 - expected) / n).sqrt()).all(), freq


def test_swap_proposals_mix_with_flips_and_uniform_draws() -> None:
    # From 1100 (index 3): flips (weight 0.5) reach the 4 one-bit neighbours, swaps (0.3) the 4 models with one
    # of bits 0, 1 and one of bits 2, 3, uniform draws (0.2) the 15 other models; every log ratio is 0.
    space = BinarySpace(4)
    problem = CollinearBits()
    problem.model_space = space
    m = torch.full((N,), 3, dtype=torch.int64)
    m_new, log_ratio = propose_model(problem, m, torch.Generator().manual_seed(13), global_prob=0.2, swap_prob=0.3)
    freq = torch.bincount(m_new, minlength=16).double() / N
    expected = torch.full((16,), 0.2 / 15, dtype=torch.float64)
    expected[3] = 0.0
    for j in range(4):
        expected[3 ^ (1 << j)] += 0.5 / 4
    for drop in (0, 1):
        for add in (2, 3):
            expected[3 ^ (1 << drop) ^ (1 << add)] += 0.3 / 4
    assert ((freq - expected).abs() <= 5 * (expected * (1 - expected) / N).sqrt()).all(), freq
    assert (log_ratio == 0).all()


def test_swap_weight_is_ignored_off_binary_spaces() -> None:
    problem = NestedGaussians()
    m = torch.randint(0, 4, (1000,), generator=torch.Generator().manual_seed(14))
    plain = propose_model(problem, m, torch.Generator().manual_seed(15), global_prob=0.3)
    with_swaps = propose_model(problem, m, torch.Generator().manual_seed(15), global_prob=0.3, swap_prob=0.5)
    assert all(torch.equal(a, b) for a, b in zip(plain, with_swaps, strict=True))


@pytest.mark.parametrize(("global_prob", "swap_prob"), [(0.0, 1.0), (0.1, 0.4)])
def test_swap_jumps_preserve_collinear_bits(global_prob: float, swap_prob: float) -> None:
    # Exact draws through swaps alone (000 and 111 stay put) and through the three-way mixture.
    problem = CollinearBits()
    gen = torch.Generator().manual_seed(16)
    state = start(problem, N, seed=0)
    std = fixed_standardiser(problem, (0.5 * problem.mu).tolist(), (0.8 * problem.sd + 0.2).tolist())
    crossed = torch.zeros((), dtype=torch.float64)
    for _ in range(5):
        before = state.model_index
        state, accept = between_model_move(problem, state, std, gen, global_prob=global_prob, swap_prob=swap_prob)
        crossed += ((before ^ state.model_index) == 3).double().mean()  # "0 in, 1 out" <-> "0 out, 1 in"
    assert accept.double().mean() > 0.02
    assert crossed / 5 > 0.01  # the swaps do cross between the collinear bits
    check_invariance(problem, state, start(problem, N, seed=1))


def test_a_swap_moves_the_dropped_coordinate_to_the_added_one() -> None:
    # From 100 every swap goes to 010 or 001; an accepted one carries theta_0 (standardised) to the added coordinate.
    problem = CollinearBits()
    m = torch.ones(1000, dtype=torch.int64)
    theta = torch.zeros(1000, 3, dtype=torch.float64)
    theta[:, 0] = torch.linspace(-1.0, 1.0, 1000, dtype=torch.float64)
    state = ChainState(m, theta, problem.log_joint(m, theta))
    std = fixed_standardiser(problem, [[0.0] * 3] * 8, [[2.0] * 3] * 8)
    new, accept = between_model_move(problem, state, std, torch.Generator().manual_seed(17), swap_prob=1.0)
    assert accept.any() and set(new.model_index[accept].tolist()) <= {2, 4}
    added = torch.where(new.model_index == 2, 1, 2)
    assert torch.equal(new.theta[accept, added[accept]], theta[accept, 0])
