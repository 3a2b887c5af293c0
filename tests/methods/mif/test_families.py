"""Variational families: sampling and density agree, densities are normalised, model rows are independent."""

import math

import pytest
import torch

from methods.mif.families import GaussianVIP, ModelInformedFlow, _std_normal_log_prob
from methods.mif.method import _prior_function
from suite.core.registry import make_problem


def _families(problem_name: str, hidden: int = 6):
    problem = make_problem(problem_name)
    models = problem.model_space.all_indices()
    order = torch.arange(problem.dim_max)
    active = problem.mask(models)
    prior = _prior_function(problem, models, order, order) if problem.has_prior_location_scale else None
    gen = torch.Generator().manual_seed(0)
    common = {"dtype": torch.float64, "generator": gen}
    return [
        GaussianVIP(active, None, full_rank=False, vip=False, **common),
        GaussianVIP(active, prior, full_rank=True, vip=True, **common),
        ModelInformedFlow(
            active, prior, hidden=hidden, translation=True, prior_inputs=True, conditioning="z", **common
        ),
        ModelInformedFlow(active, prior, hidden=0, translation=True, prior_inputs=True, conditioning="eps", **common),
        ModelInformedFlow(
            active, None, hidden=hidden, translation=False, prior_inputs=False, conditioning="eps", **common
        ),
    ]


@pytest.mark.parametrize("problem_name", ["funnel", "eight-schools", "sas", "block-vs"])
def test_density_matches_the_sampler_and_model_rows(problem_name: str) -> None:
    gen = torch.Generator().manual_seed(1)
    for family in _families(problem_name):
        with torch.no_grad():
            z, log_q = family.sample(64, gen)
            assert torch.allclose(family.log_prob(z), log_q, atol=1e-9), type(family).__name__
            last = torch.tensor([family.num_models - 1])
            alone = family.log_prob(z[-1:], last)
            assert torch.allclose(alone, log_q[-1:], atol=1e-9)
            # Inactive coordinates are exactly zero.
            assert bool((z[~family.active[:, None, :].expand_as(z)] == 0).all())


@pytest.mark.parametrize("problem_name", ["eight-schools", "funnel", "sas"])
@pytest.mark.parametrize("index", range(5))
def test_log_density_is_base_density_minus_the_log_jacobian(problem_name: str, index: int) -> None:
    """log q(T(eps)) = log N(eps; 0, I) - log |det dT/deps| on the active block, T's Jacobian by autograd."""
    family = _families(problem_name)[index]
    row = family.num_models - 1
    active = family.active[row]
    gen = torch.Generator().manual_seed(3)
    models = torch.tensor([row])
    for _ in range(3):
        eps = torch.randn(1, 1, family.dim, generator=gen, dtype=torch.float64)

        def push(e: torch.Tensor, eps: torch.Tensor = eps) -> torch.Tensor:
            full = eps.clone()
            full[0, 0, active] = e
            return family.forward_map(full, models)[0][0, 0, active]

        e0 = eps[0, 0, active]
        jacobian = torch.autograd.functional.jacobian(push, e0)
        _, log_q = family.forward_map(eps, models)
        base = float((-0.5 * e0 * e0 - 0.5 * math.log(2 * math.pi)).sum())
        assert float(log_q) == pytest.approx(base - float(torch.linalg.slogdet(jacobian)[1]), abs=1e-8)


def test_an_overflowing_inversion_gives_minus_infinity_not_nan() -> None:
    """Far out, the IAF's sequential inversion overflows (eps_i -> inf, then inf - inf): log q is -inf there, as it
    is below float64's range, never NaN (which made iaf's cross-entropy NaN on funnel in the default run)."""
    problem = make_problem("funnel")
    active = problem.mask(problem.model_space.all_indices())
    flow = ModelInformedFlow.inverse_autoregressive(
        active, hidden=6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        for p in flow.parameters():
            p.mul_(40.0)  # steep conditioners, as a trained flow has in the neck of the funnel
        z = torch.zeros(1, 3, problem.dim_max, dtype=torch.float64)
        z[0, 1, 0], z[0, 2, :] = -15.0, 1e300  # with log s clamped, overflow needs a z this far out
        _, eps, log_s = flow._run(None, z, None)
        unguarded = _std_normal_log_prob(eps, flow.active) - log_s
        log_q = flow.log_prob(z)
    assert torch.isnan(unguarded[0, 2])  # the case the fix is for does arise here
    assert not torch.isnan(log_q).any() and log_q[0, 2] == -math.inf
