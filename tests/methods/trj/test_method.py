"""The trj/ctrj methods, the saturated (CTRJ) jump and the least-squares bridge estimate, against known answers."""

import math

import pytest
import torch

from methods.common.chains import ChainState
from methods.trj.bbe import PairStatistics
from methods.trj.kernels import JumpRecord, saturated_jump
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

SAS_TRUTH = torch.tensor([0.25, 0.75], dtype=torch.float64)


def _run(method_name: str, problem_name: str, **options):
    problem = make_problem(problem_name)
    method = make_method(method_name, **options)
    return problem, resolve_and_run(method, problem, RunContext(seed=0, profile="smoke"))


def test_trj_with_exact_transports_is_exact_on_sas() -> None:
    """Exact transports make alpha(1 -> 2) = 1 and alpha(2 -> 1) = 1/3 for every proposal: the bridge is exact."""
    problem, result = _run("trj", "sas", transport="exact")
    assert result.status == "ok", result.reason
    torch.testing.assert_close(result.model_probs.dense(2), SAS_TRUTH, rtol=0, atol=1e-9)
    # Half of the proposals (from model 2, 3/4 of the chains) are accepted with probability 1/3.
    expected = 0.25 * 1.0 + 0.75 / 3
    assert abs(result.diagnostics["accept_between"] - expected) < 0.02
    draws = problem.reference_draws(500, torch.Generator().manual_seed(0))
    log_q = result.log_density(draws.model_index, draws.theta)
    # With exact transports q(m, theta) is the target itself: log q = log pi(m, theta) - log Z.
    log_z = problem.log_joint(draws.model_index, draws.theta) - log_q
    assert float(log_z.max() - log_z.min()) < 1e-9


def test_trj_affine_recovers_sas_within_its_standard_error() -> None:
    _, result = _run("trj", "sas", transport="affine", num_chains=512, num_iterations=1000)
    probs, se = result.model_probs.dense(2), result.model_probs.se
    assert 0 < float(se[1]) < 0.01
    assert abs(float(probs[1]) - 0.75) < 4 * float(se[1]), (probs, se)
    running = result.diagnostics["running_estimate"]
    assert running["iteration"][-1] == 1000 and len(running["prob"][-1]) == 2


@pytest.mark.slow
def test_trj_with_fitted_spline_flows_on_sas() -> None:
    """Issue bar: with fitted RQ flows the bridge estimate of P(m=2) is within 0.02 of 3/4 (here at the smoke
    budget: 60 flow iterations, one layer); and within 4 of its jackknife standard errors."""
    _, result = _run("trj", "sas", transport="rq", num_chains=256, num_iterations=200)
    assert result.diagnostics["transport"] == "rq"
    assert [fit["model"] for fit in result.diagnostics["flow_fit"]] == [0, 1]  # the fit is recorded per model
    p2, se = float(result.model_probs.dense(2)[1]), float(result.model_probs.se[1])
    assert abs(p2 - 0.75) < 0.02 and abs(p2 - 0.75) < 4 * se + 1e-3, (p2, se)
    # A better transport than affine: exact maps accept 0.50 of the uniform jumps (1 from model 1, 1/3 from
    # model 2), affine ones 0.14; these weak smoke-budget flows measured 0.26.
    assert result.diagnostics["accept_between"] > 0.2


def test_ctrj_runs_on_sas() -> None:
    _, result = _run("ctrj", "sas", num_chains=256, num_iterations=200)
    p2, se = float(result.model_probs.dense(2)[1]), float(result.model_probs.se[1])
    assert abs(p2 - 0.75) < 0.02 and abs(p2 - 0.75) < 4 * se + 1e-3, (p2, se)


def test_methods_refuse_what_they_cannot_do() -> None:
    assert "more than max_models=256" in make_method("trj").supports(make_problem("linear-dag"))
    assert "lopes-west" in make_method("trj", transport="lopes-west").supports(make_problem("sas"))
    with pytest.raises(ValueError, match="valid: rq, affine"):
        make_method("trj", transport="flowy").resolve(make_problem("sas"), "smoke")
    with pytest.raises(ValueError, match="valid: bbe, visits"):
        make_method("ctrj", estimator="bridge").resolve(make_problem("sas"), "smoke")
    with pytest.raises(ValueError, match="num_chains must be positive"):
        make_method("trj", num_chains=0).resolve(make_problem("sas"), "smoke")


class _PerturbedExact:
    """sas's exact transport of the active coordinates (identity on the auxiliaries), then a fixed random affine
    map of all coordinates per model: an imperfect conditional transport of the saturated space."""

    def __init__(self, problem, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.problem = problem
        self.a = torch.eye(2, dtype=torch.float64) + 0.2 * torch.randn(2, 2, 2, generator=g, dtype=torch.float64)
        self.b = 0.2 * torch.randn(2, 2, generator=g, dtype=torch.float64)
        self.log_det = torch.linalg.slogdet(self.a)[1]

    def to_reference(self, m, xi):
        z, log_det = self.problem.to_reference(m, xi)
        return torch.einsum("bij,bj->bi", self.a[m], z) + self.b[m], log_det + self.log_det[m]

    def from_reference(self, m, z):
        z0 = torch.linalg.solve(self.a[m], (z - self.b[m]).unsqueeze(-1)).squeeze(-1)
        xi, log_det = self.problem.from_reference(m, z0)
        return xi, log_det - self.log_det[m]


def test_saturated_jump_keeps_exact_draws_exact() -> None:
    """Invariance of the CTRJ kernel: exact sas draws with N(0, 1) auxiliaries, pushed through saturated jumps
    with an imperfect conditional transport, keep P(m=1) = 3/4 and the medians of theta_1."""
    problem = make_problem("sas")
    num = 40_000
    draws = problem.reference_draws(num, torch.Generator().manual_seed(1))
    transport = _PerturbedExact(problem, seed=2)
    generator = torch.Generator().manual_seed(3)
    state = ChainState(draws.model_index, draws.theta, problem.log_joint(draws.model_index, draws.theta))
    accepted = 0.0
    for _ in range(5):
        aux = torch.randn(state.theta.shape, generator=generator, dtype=torch.float64)
        state = state._replace(theta=torch.where(problem.mask(state.model_index), state.theta, aux))
        state, accept, _ = saturated_jump(
            problem, state, transport, 1 - state.model_index, torch.zeros(num, dtype=torch.float64), generator
        )
        accepted += float(accept.double().mean())
    assert accepted / 5 > 0.05  # the test moves chains between models
    freq = float((state.model_index == 1).double().mean())
    assert abs(freq - 0.75) < 4.5 * math.sqrt(0.75 * 0.25 / num)
    fresh = problem.reference_draws(num, torch.Generator().manual_seed(4))
    for model in (0, 1):
        a = state.theta[state.model_index == model][:, 0]
        b = fresh.theta[fresh.model_index == model][:, 0]
        se = 1.2533 * math.sqrt(a.var() / a.numel() + b.var() / b.numel())
        assert abs(float(a.median() - b.median())) < 5 * se


def test_least_squares_bridge_needs_no_reference_column() -> None:
    """Three models, jumps only between neighbours 0-1 and 1-2 with alpha = min(1, pi'/pi): eq. 10 has no pair
    (0, 2), the least-squares combination recovers pi exactly, and agrees with eq. 10 where both apply."""
    pi = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    frm = torch.tensor([0, 1, 1, 2] * 50)
    to = torch.tensor([1, 0, 2, 1] * 50)
    log_alpha = (pi[to].log() - pi[frm].log()).clamp_max(0.0)
    record = JumpRecord(frm, to, log_alpha, torch.zeros(len(frm), dtype=torch.float64))
    stats = PairStatistics.of(record, 3)
    probs, _, reached = stats.graph_model_probs()
    torch.testing.assert_close(probs, pi, rtol=0, atol=1e-12)
    assert bool(reached.all())
    with pytest.raises(ValueError, match="no proposals in both directions"):
        stats.model_probs(reference=0)
    torch.testing.assert_close(stats.model_probs(reference=1)[0], pi, rtol=0, atol=1e-12)


def test_unconnected_models_get_no_estimate() -> None:
    # Four proposals each way: a pair is a link only with at least one expected acceptance per direction.
    frm, to = torch.tensor([0, 1] * 4), torch.tensor([1, 0] * 4)
    record = JumpRecord(
        frm, to, torch.tensor([0.0, -math.log(2)] * 4, dtype=torch.float64), torch.zeros(8, dtype=torch.float64)
    )
    probs, _, reached = PairStatistics.of(record, 3).graph_model_probs()
    assert reached.tolist() == [True, True, False]
    torch.testing.assert_close(probs, torch.tensor([1 / 3, 2 / 3, 0.0], dtype=torch.float64))


def test_pairs_whose_acceptance_underflows_carry_no_information() -> None:
    """alpha ~ 1e-300 both ways: the pair's variance is infinite, so it must not join the least-squares graph."""
    frm, to = torch.tensor([0, 1, 0, 2] * 4), torch.tensor([1, 0, 2, 0] * 4)
    log_alpha = torch.tensor([-700.0, -700.0, 0.0, -math.log(3)] * 4, dtype=torch.float64)
    probs, _, reached = PairStatistics.of(
        JumpRecord(frm, to, log_alpha, torch.zeros(16, dtype=torch.float64)), 3
    ).graph_model_probs()
    assert reached.tolist() == [True, False, True]
    torch.testing.assert_close(probs, torch.tensor([0.25, 0.0, 0.75], dtype=torch.float64))
