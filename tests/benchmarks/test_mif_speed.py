"""ELBO-gradient steps per second of MIF on eight schools at 256 draws (pytest tests/benchmarks -m benchmark).

One step: 256 reparameterised draws through the flow (sequential over the 10 coordinates), the log joint,
the backward pass and an Adam update. Reported for affine conditioners (h = 0, the paper's Table 2) and
h = 16 (the quick profile) and 1024 (the paper's Table 3).

Also the running estimates' overhead: the seconds spent in snapshots over the method's compute seconds of a
time-budgeted run on robust-vs (issue 19: under 5%), with the number of snapshots.
"""

import pytest
import torch

from methods.mif.families import ModelInformedFlow
from methods.mif.method import _prior_function, _Target
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

pytestmark = pytest.mark.benchmark
DRAWS = 256


@pytest.mark.parametrize("hidden", [0, 16, 1024])
def test_mif_gradient_steps(benchmark, hidden: int) -> None:
    problem = make_problem("eight-schools")
    models = problem.model_space.all_indices()
    order = torch.arange(problem.dim_max)
    gen = torch.Generator().manual_seed(0)
    family = ModelInformedFlow(
        problem.mask(models),
        _prior_function(problem, models, order, order),
        hidden=hidden,
        translation=True,
        prior_inputs=True,
        conditioning="z",
        dtype=torch.float64,
        generator=gen,
        zero_z_weights=True,
    )
    target = _Target(problem, models, order)
    optimiser = torch.optim.Adam(family.parameters(), lr=1e-3)

    def step() -> None:
        z, log_q = family.sample(DRAWS, gen)
        loss = -(target(z) - log_q).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    benchmark.pedantic(step, rounds=30 if hidden == 1024 else 200, warmup_rounds=3)
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    benchmark.extra_info["steps_per_s"] = 1.0 / benchmark.stats.stats.mean
    print(f"\nMIF h={hidden}, {DRAWS} draws, eight-schools: {1.0 / benchmark.stats.stats.mean:.1f} steps/s")


@pytest.mark.parametrize("name", ["mif", "fr"])
def test_snapshot_overhead_on_robust_vs(name: str) -> None:
    """Snapshot seconds / method seconds of a 20 s quick-profile run on robust-vs (128 models)."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # the first Adam imports torch._dynamo: not timed
    context = RunContext(seed=0, profile="quick", num_draws=4096, time_budget_s=20.0)
    result = resolve_and_run(make_method(name), make_problem("robust-vs"), context)
    assert result.status == "ok"
    overhead = context.clock.paused_s / context.clock.elapsed()
    print(
        f"\n{name} on robust-vs, 20 s: {len(context.snapshots)} snapshots, overhead {overhead:.2%}, "
        f"{sum(result.diagnostics['training_steps'])} steps, {context.clock.elapsed():.1f} s"
    )
    assert overhead < 0.05
