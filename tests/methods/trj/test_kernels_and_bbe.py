"""The TRJ jump and the Bartolucci bridge estimator on sas, where transports and model probabilities are exact."""

import math

import torch

from methods.common.chains import ChainState
from methods.trj.bbe import bartolucci_model_probs
from methods.trj.kernels import propose_from_probs, transport_jump
from methods.trj.transports import AffineTransport
from suite.core.registry import make_problem

TRUE = torch.tensor([0.25, 0.75], dtype=torch.float64)
LOG_J = TRUE.log()


def exact_state(problem, num: int, seed: int) -> ChainState:
    draws = problem.reference_draws(num, torch.Generator().manual_seed(seed))
    return ChainState(draws.model_index, draws.theta, problem.log_joint(draws.model_index, draws.theta))


def test_exact_transports_with_j_equal_to_pi_accept_every_jump() -> None:
    """TRJ Proposition 1: with exact transports and j_k(k') = pi(k'), alpha = 1 up to float error."""
    problem = make_problem("sas")
    state = exact_state(problem, 4000, 0)
    generator = torch.Generator().manual_seed(1)
    model_to, log_ratio = propose_from_probs(state.model_index, LOG_J, generator)
    new, accept, record = transport_jump(problem, state, problem, model_to, log_ratio, generator)
    moved = model_to != state.model_index
    assert int(moved.sum()) > 1000
    assert float(record.log_alpha[moved].min()) > -1e-9
    assert bool(accept[moved].all())
    torch.testing.assert_close(new.log_joint, problem.log_joint(new.model_index, new.theta), rtol=0, atol=1e-9)


def test_bbe_is_exact_with_exact_transports() -> None:
    """Every alpha is known in closed form here, so the estimate is exact for either jump distribution."""
    problem = make_problem("sas")
    state = exact_state(problem, 4000, 2)
    generator = torch.Generator().manual_seed(3)
    for model_to, log_ratio in (
        propose_from_probs(state.model_index, LOG_J, generator),  # all alpha = 1; the jump ratio carries pi
        problem.model_space.propose_jump(state.model_index, generator),  # alpha(2 -> 1) = 1/3 exactly
    ):
        _, _, record = transport_jump(problem, state, problem, model_to, log_ratio.to(torch.float64), generator)
        probs, _ = bartolucci_model_probs(record, 2)
        torch.testing.assert_close(probs, TRUE, rtol=0, atol=1e-9)


def test_bbe_with_affine_transports_within_its_standard_error() -> None:
    """Affine transports fitted on a training set; one proposal per evaluation draw (TRJ sec. 4)."""
    problem = make_problem("sas")
    train = problem.reference_draws(8000, torch.Generator().manual_seed(4))
    transport = AffineTransport.fit(problem, train.model_index, train.theta)
    state = exact_state(problem, 8000, 5)
    generator = torch.Generator().manual_seed(6)
    model_to, log_ratio = problem.model_space.propose_jump(state.model_index, generator)
    _, accept, record = transport_jump(problem, state, transport, model_to, log_ratio.to(torch.float64), generator)
    probs, se = bartolucci_model_probs(record, 2)
    assert 0.0 < float(accept.double().mean()) < 0.9  # an imperfect transport: some jumps are rejected
    assert float(se[1]) < 0.02
    assert abs(float(probs[1]) - 0.75) < 4 * float(se[1]), (probs, se)


def test_trj_chains_keep_exact_draws_exact() -> None:
    """Invariance: exact draws pushed through affine TRJ jumps keep pi(m) = (1/4, 3/4) and the moments of theta."""
    problem = make_problem("sas")
    train = problem.reference_draws(8000, torch.Generator().manual_seed(7))
    transport = AffineTransport.fit(problem, train.model_index, train.theta)
    num = 40_000
    state = exact_state(problem, num, 8)
    generator = torch.Generator().manual_seed(9)
    for _ in range(5):
        model_to, log_ratio = problem.model_space.propose_jump(state.model_index, generator)
        state, _, _ = transport_jump(problem, state, transport, model_to, log_ratio.to(torch.float64), generator)
    freq = float((state.model_index == 1).double().mean())
    assert abs(freq - 0.75) < 4.5 * math.sqrt(0.75 * 0.25 / num)
    fresh = problem.reference_draws(num, torch.Generator().manual_seed(10))
    for model in (0, 1):
        a = state.theta[state.model_index == model][:, 0]
        b = fresh.theta[fresh.model_index == model][:, 0]
        # Two independent samples of the same law: their medians agree within a few standard errors.
        se = 1.2533 * math.sqrt(a.var() / a.numel() + b.var() / b.numel())
        assert abs(float(a.median() - b.median())) < 5 * se
