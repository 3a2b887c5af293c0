"""Kernel invariance: started exactly at pi, one or more moves must leave pi unchanged.

Exact draws from the target are pushed through the kernels with arbitrary
fixed standardisations; a wrong acceptance ratio (a missing Jacobian or
auxiliary density) shifts the model frequencies or the parameter moments.
"""

import math

import pytest
import torch

from methods.rjmcmc.kernels import ChainState, between_model_move, random_walk_move
from problems.sas.problem import SinhArcsinh
from suite.core.tensor_ops import row_sum, rows

N = 400_000


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
