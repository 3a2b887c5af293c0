"""ELBO-gradient steps per second of MIF on eight schools at 256 draws (pytest tests/benchmarks -m benchmark).

One step: 256 reparameterised draws through the flow (sequential over the 10 coordinates), the log joint,
the backward pass and an Adam update. Reported for affine conditioners (h = 0, the paper's Table 2) and
h = 16 (the quick profile) and 1024 (the paper's Table 3).
"""

import pytest
import torch

from methods.mif.families import ModelInformedFlow
from methods.mif.method import _prior_function, _Target
from suite.registry import make_problem

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
    benchmark.extra_info["steps_per_s"] = 1.0 / benchmark.stats.stats.mean
    print(f"\nMIF h={hidden}, {DRAWS} draws, eight-schools: {1.0 / benchmark.stats.stats.mean:.1f} steps/s")
