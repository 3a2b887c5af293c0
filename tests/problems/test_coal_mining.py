"""coal-mining (Green 1995, sec. 4): the grid recursion against brute-force integrals, refinement, log_joint, draws.

Everything runs in float64. The brute-force evidences integrate over the change points piecewise between events
(where the integrand is smooth) with Gauss-Legendre rules, the heights integrated analytically: independent of the
grid recursion except for the closed-form segment marginal, which the k = 0 check pins to its definition.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from problems.coal_mining import exact
from problems.coal_mining.problem import CoalMining
from suite.core.registry import make_problem


@pytest.fixture(scope="module")
def problem() -> CoalMining:
    made = make_problem("coal-mining")
    if made.unavailable_reason():
        pytest.skip(made.unavailable_reason())
    return made


def _log_marginal(n: torch.Tensor, length: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """log int_0^inf h^n e^{-h l} beta^alpha h^(alpha-1) e^{-beta h} / Gamma(alpha) dh, written out again."""
    return (
        alpha * math.log(beta) - math.lgamma(alpha) + torch.lgamma(alpha + n) - (alpha + n) * torch.log(beta + length)
    )


def _gauss(q: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = np.polynomial.legendre.leggauss(q)
    return torch.tensor((x + 1) / 2), torch.tensor(w / 2)


def _intervals(problem: CoalMining) -> tuple[torch.Tensor, torch.Tensor]:
    """Ends of the N + 1 intervals between 0, the sorted events and L: s in interval i has i events before it."""
    edges = torch.cat(
        [torch.zeros(1, dtype=torch.float64), problem.events, torch.tensor([problem.length], dtype=torch.float64)]
    )
    return edges[:-1], edges[1:]


def _brute_k1(problem: CoalMining, q: int = 16) -> tuple[float, float]:
    """log p(y | k=1) = log 3!/L^3 int s (L - s) m(n(s), s) m(N - n(s), L - s) ds, and E[s_1 | k = 1, y]."""
    lo, hi = _intervals(problem)
    x, w = _gauss(q)
    big_l, total, a, b = problem.length, len(problem.events), problem.alpha, problem.beta
    s = lo[:, None] + (hi - lo)[:, None] * x
    weight = (hi - lo)[:, None] * w
    n = torch.arange(total + 1, dtype=torch.float64)[:, None]
    log_f = (
        torch.log(s * (big_l - s) / big_l**3) + _log_marginal(n, s, a, b) + _log_marginal(total - n, big_l - s, a, b)
    )
    keep = weight > 0
    log_terms = log_f[keep] + torch.log(weight[keep])
    log_z = torch.logsumexp(log_terms, 0) + math.log(6.0)
    mean = float((torch.softmax(log_terms, 0) * s[keep]).sum())
    return float(log_z), mean


def _brute_k2(problem: CoalMining, q: int = 10) -> float:
    """log p(y | k=2) = log 5!/L^5 int_{s1<s2} s1 (s2 - s1) (L - s2) prod m(.) ds; a triangle rule on shared cells."""
    lo, hi = _intervals(problem)
    x, w = _gauss(q)
    big_l, total, a, b = problem.length, len(problem.events), problem.alpha, problem.beta
    first, second = torch.triu_indices(total + 1, total + 1)
    parts = []
    for chunk in torch.split(torch.arange(len(first)), 4096):
        i, j = first[chunk, None, None], second[chunk, None, None]
        same = i == j
        s1 = lo[i] + (hi - lo)[i] * x[:, None]
        # Distinct intervals: a product rule; one interval: s2 = s1 + (hi - s1) y over the triangle s1 < s2.
        s2 = torch.where(same, s1 + (hi[j] - s1) * x[None, :], lo[j] + (hi - lo)[j] * x[None, :])
        weight = (hi - lo)[i] * w[:, None] * w[None, :] * torch.where(same, hi[j] - s1, (hi - lo)[j])
        gap = s2 - s1
        keep = (weight > 0) & (gap > 0)
        n1, n2 = i.double(), (j - i).double()
        log_f = (
            torch.log(s1 * gap.clamp_min(1e-300) * (big_l - s2) / big_l**5)
            + _log_marginal(n1, s1, a, b)
            + _log_marginal(n2, gap.clamp_min(1e-300), a, b)
            + _log_marginal(total - n1 - n2, big_l - s2, a, b)
            + torch.log(weight.clamp_min(1e-300))
        )
        parts.append(torch.logsumexp(log_f[keep], 0))
    return float(torch.logsumexp(torch.stack(parts), 0)) + math.log(120.0)


def _richardson(log_fine: torch.Tensor, log_coarse: torch.Tensor) -> torch.Tensor:
    """log of Z_fine + (Z_fine - Z_coarse) / 3 (second-order rule, step halved)."""
    return log_fine + torch.log1p((1.0 - torch.exp(log_coarse - log_fine)) / 3.0)


def test_data_are_greens_days(problem: CoalMining) -> None:
    # Jarrett's first and last dates, 15 March 1851 and 22 March 1962, as day numbers (1 January 1851 = 1).
    assert len(problem.events) == 191
    assert problem.events[0] == 74 and problem.events[-1] == 40_623
    assert problem.length == 40_907 and problem.dim_max == 61


def test_k0_evidence_is_closed_form(problem: CoalMining) -> None:
    # No change point: nothing is discretised, so the recursion must equal m(191, L) to rounding.
    expected = _log_marginal(
        torch.tensor(191.0, dtype=torch.float64),
        torch.tensor(problem.length, dtype=torch.float64),
        problem.alpha,
        problem.beta,
    )
    assert torch.allclose(problem.exact_solution().log_evidence[:, 0], expected, rtol=0, atol=1e-9)


def test_k1_and_k2_evidences_match_brute_force_integrals(problem: CoalMining) -> None:
    solution = problem.exact_solution()
    log_z = solution.log_evidence
    brute = torch.tensor([_brute_k1(problem)[0], _brute_k2(problem)], dtype=torch.float64)
    # The Gauss rules are converged: 16 vs 24 nodes (k = 1) and 6 vs 10 (k = 2) agree to 1e-9 (checked when written).
    extrapolated = _richardson(log_z[2], log_z[1])[1:3]
    error_estimate = (extrapolated - _richardson(log_z[1], log_z[0])[1:3]).abs()
    # The finest grid is off by its O(h^2) error (0.0027 in log Z here); the extrapolation by far less (2.7e-5),
    # and within its own error estimate (4e-4): the estimate is conservative.
    assert ((log_z[2, 1:3] - brute).abs() > 10 * (extrapolated - brute).abs()).all()
    assert ((extrapolated - brute).abs() <= error_estimate).all()
    # The k = 1 : k = 2 odds, the quantity p(k | y) is built from, agree to 1e-5 relative.
    assert abs((extrapolated[0] - extrapolated[1]) - (brute[0] - brute[1])) < 1e-5


def test_refinement_is_second_order(problem: CoalMining) -> None:
    solution = problem.exact_solution()
    # Successive differences of p(k | y) shrink fourfold per halving (observed 3.9: order 1.96).
    assert 1.8 < solution.observed_order < 2.2
    steps = (solution.probs[1:] - solution.probs[:-1]).abs().sum(-1)
    assert 3.0 < float(steps[0] / steps[1]) < 5.0
    assert float(solution.error.max()) < 1e-4


def test_reference_model_probs(problem: CoalMining) -> None:
    truth = problem.reference_model_probs()
    assert truth.total() == pytest.approx(1.0, abs=1e-12)
    dense = truth.dense(31)
    # The extrapolated p(k | y) to 3e-5 (its estimated discretisation error is below 2e-5).
    expected = torch.tensor([0.0, 0.05675, 0.245346, 0.290185, 0.229064, 0.115679, 0.044102, 0.01389, 0.003797])
    assert torch.allclose(dense[:9], expected.double(), atol=3e-5)
    assert truth.se is not None and float(truth.se.max()) < 1e-4


def test_log_joint_equals_greens_density_with_the_jacobian(problem: CoalMining) -> None:
    """log_joint = log p(k) + log prior(s, h) + log-likelihood, in Green's coordinates, + log |d(s, h)/d(z, u)|."""
    gen = torch.Generator().manual_seed(5)
    big_l, a, b, k_max = problem.length, problem.alpha, problem.beta, problem.k_max
    for k in (0, 1, 3, 7):
        theta = 0.7 * torch.randn(problem.dim_max, dtype=torch.float64, generator=gen)  # u near the data's rate
        model = torch.tensor([k])
        got = float(problem.log_joint(model, theta[None, :])[0])

        def to_green(active: torch.Tensor, k: int = k, template: torch.Tensor = theta) -> torch.Tensor:
            full = template.clone()
            full[problem.mask(torch.tensor([k]))[0]] = active
            s = problem.change_points(torch.tensor([k]), full[None, :])[0, :k]
            return torch.cat([s, full[k_max : k_max + k + 1].exp() * a / b])

        active = theta[problem.mask(model)[0]]
        jacobian = torch.autograd.functional.jacobian(to_green, active)
        log_det = float(torch.linalg.slogdet(jacobian)[1])
        green = to_green(active)
        s, h = green[:k], green[k:]
        edges = torch.cat([torch.zeros(1, dtype=torch.float64), s, torch.tensor([big_l], dtype=torch.float64)])
        lengths = edges[1:] - edges[:-1]
        # Green (1995) sec. 4: positions (2k+1)!/L^(2k+1) prod l_j; heights iid Gamma(a, b); likelihood per event.
        log_prior = math.lgamma(2 * k + 2) - (2 * k + 1) * math.log(big_l) + float(torch.log(lengths).sum())
        log_prior += float((a * math.log(b) - math.lgamma(a) + (a - 1) * torch.log(h) - b * h).sum())
        segment = [int((s <= t).sum()) for t in problem.events.tolist()]
        log_lik = sum(math.log(float(h[j])) for j in segment) - float((h * lengths).sum())
        expected = float(problem.log_model_prior(model)[0]) + log_prior + log_lik + log_det
        assert got == pytest.approx(expected, abs=1e-8), k


def test_k0_log_joint_integrates_to_the_evidence(problem: CoalMining) -> None:
    # k = 0: int exp(log_joint) du_0 = p(k = 0) p(y | 0); a 4000-point trapezoid over u in [-4, 2] (the integrand
    # is a smooth bump of width ~0.07 around log(200 * 192 / 41107) = -0.07, negligible at the ends), error << 1e-8.
    u = torch.linspace(-4.0, 2.0, 4001, dtype=torch.float64)
    theta = torch.zeros(len(u), problem.dim_max, dtype=torch.float64)
    theta[:, problem.k_max] = u
    log_joint = problem.log_joint(torch.zeros(len(u), dtype=torch.int64), theta)
    log_integral = float(torch.logsumexp(log_joint, 0) + math.log(float(u[1] - u[0])))
    expected = float(problem.log_model_prior(torch.tensor([0]))[0] + problem.exact_solution().log_evidence[2, 0])
    assert log_integral == pytest.approx(expected, abs=1e-8)


def test_reference_draws(problem: CoalMining) -> None:
    draws = problem.reference_draws(10_000, torch.Generator().manual_seed(11))
    assert draws.theta.dtype == torch.float64
    assert bool((draws.theta[~problem.mask(draws.model_index)] == 0).all())
    assert bool(torch.isfinite(problem.log_joint(draws.model_index, draws.theta)).all())
    # k = 1 draws: the change point's mean against the brute-force posterior mean (1890.85 in years). Tolerance:
    # 4 Monte Carlo standard errors (sd ~850 days over ~570 draws: ~36 days) plus the grid (cells <= 52 days).
    one = draws.model_index == 1
    s1 = problem.change_points(draws.model_index[one], draws.theta[one])[:, 0]
    _, mean = _brute_k1(problem)
    assert abs(float(s1.mean()) - mean) < 4 * float(s1.std()) / math.sqrt(int(one.sum())) + 10.0
    # Training draws come from another stream than the scoring draws.
    training = problem.training_draws(100, torch.Generator().manual_seed(11))
    assert not torch.equal(training.theta, draws.theta[:100])


def test_posterior_mean_rate_drops_around_1890(problem: CoalMining) -> None:
    days = torch.tensor([5.0, 30.0, 60.0, 100.0]) * 365.25
    rate, se = problem.posterior_mean_rate(days, num_draws=2000)
    per_year = rate * 365.25
    # Before 1890 about 3 disasters a year, after about 1 (Green 1995, sec. 4; Raftery & Akman 1986).
    assert 2.5 < float(per_year[0]) < 3.6 and 0.5 < float(per_year[2]) < 1.3
    assert bool((se < 0.05 * rate).all())


def test_bad_arguments_name_the_valid_range() -> None:
    with pytest.raises(ValueError, match="k_max"):
        CoalMining(k_max=0)
    with pytest.raises(ValueError, match="beta"):
        CoalMining(beta=-1.0)


def test_make_grid_contains_every_event() -> None:
    events = torch.tensor([1.5, 2.25, 7.0], dtype=torch.float64)
    grid = exact.make_grid(events, 10.0, 4, refine=1)
    assert set(events.tolist()) <= set(grid.tolist())
    assert grid[0] == 0.0 and grid[-1] == 10.0 and bool((grid[1:] > grid[:-1]).all())
    with pytest.raises(ValueError, match="num_cells"):
        exact.make_grid(events, 10.0, 0)


def test_missing_data_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("problems.coal_mining.problem.unavailable_reason", lambda name: f"{name} is missing")
    missing = CoalMining()
    assert missing.unavailable_reason() == "coal.csv is missing"
    assert missing.reference_model_probs() is None
    assert missing.reference_draws(10, torch.Generator().manual_seed(0)) is None
