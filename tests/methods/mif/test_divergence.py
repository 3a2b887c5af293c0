"""MIF's guards against a diverging fit (galaxy, issue 52): bounded log scales and undone divergent steps."""

import math

import torch

from methods.mif.families import LOG_SCALE_BOUND, ModelInformedFlow, _std_normal_log_prob
from methods.mif.method import _StepGuard
from suite.core.registry import make_method, make_problem

F64 = torch.float64


def _flow(hidden: int = 0, translation: bool = True) -> ModelInformedFlow:
    active = make_problem("sas").mask(torch.arange(2))  # model 0: one coordinate, model 1: two
    return ModelInformedFlow(
        active,
        None,
        hidden=hidden,
        translation=translation,
        prior_inputs=False,
        conditioning="z",
        dtype=F64,
        generator=torch.Generator().manual_seed(0),
    )


def test_log_scales_are_clamped_to_the_bound() -> None:
    """A conditioner asking for log s = +-50 gets +-LOG_SCALE_BOUND: known draws and log q, both directions agree."""
    flow = _flow(translation=False)
    with torch.no_grad():
        flow.weight.zero_()
        flow.bias.zero_()
        flow.bias[0, 1] = 50.0
        flow.bias[1, 1] = -50.0
    eps = torch.randn(2, 5, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    z, log_q = flow.forward_map(eps)
    on = flow.active[:, None, :]
    scale = torch.tensor([math.exp(LOG_SCALE_BOUND), math.exp(-LOG_SCALE_BOUND)], dtype=F64).view(2, 1, 1)
    torch.testing.assert_close(z, torch.where(on, scale * eps, 0.0), rtol=1e-15, atol=0)
    active_count = flow.active.sum(-1).to(F64)
    expected = _std_normal_log_prob(eps, flow.active) - torch.tensor([1.0, -1.0], dtype=F64)[:, None] * (
        LOG_SCALE_BOUND * active_count[:, None]
    )
    torch.testing.assert_close(log_q, expected, rtol=1e-14, atol=1e-12)
    torch.testing.assert_close(flow.log_prob(z), log_q, rtol=1e-14, atol=1e-12)


def test_a_divergent_step_is_undone_at_half_the_rate() -> None:
    """After a step that sends one model's negative ELBO from 100 to 5e4 (more than 10 x 1000 above), the guard
    restores the parameters and Adam's moments exactly as they were before it and halves the learning rate."""
    flow = _flow(hidden=3)
    optimiser = torch.optim.Adam(flow.parameters(), lr=0.01)

    def step() -> None:
        z, log_q = flow.sample(4, torch.Generator().manual_seed(2))
        optimiser.zero_grad()
        (z.square().sum() + log_q.sum()).backward()
        optimiser.step()

    guard = _StepGuard(flow, optimiser)
    step()  # Adam has moments to restore
    guard.keep(torch.tensor([-100.0, -50.0], dtype=F64))
    before = [p.detach().clone() for p in flow.parameters()]
    moments = [optimiser.state[p]["exp_avg_sq"].clone() for p in flow.parameters()]
    step()
    assert not guard.diverged(torch.tensor([-10_000.0, -9_000.0], dtype=F64))  # within 10 x max(|lowest|, 1000)
    assert guard.diverged(torch.tensor([-100.0, -50_000.0], dtype=F64))
    guard.undo()
    for p, old, second in zip(flow.parameters(), before, moments, strict=True):
        assert torch.equal(p.detach(), old) and torch.equal(optimiser.state[p]["exp_avg_sq"], second)
    assert optimiser.param_groups[0]["lr"] == 0.005 and guard.lr_factor == 0.5 and guard.undone == 1


def test_presets_guard_smoke_and_quick_but_not_the_papers_adam() -> None:
    """The guard is part of the suite's smoke and quick presets; the paper profile keeps plain Adam."""
    problem = make_problem("sas")
    for profile, expected in (("smoke", True), ("quick", True), ("paper", False)):
        assert make_method("mif").resolve(problem, profile).undo_divergent_steps is expected
