"""Across-model proposals per second of ``trj`` at 1024 chains on factor analysis (pytest -m benchmark).

The authors' implementation advances one chain at a time in Python: on a 2-core CPU about 2 across-model
proposals per second with RQ transports and 18-28 with the Lopes & West proposal, after about 3 minutes of
flow training. The target is at least 100 times those rates summed over chains. ``between_proposals_per_s``
counts whole iterations (the jump plus one within-model random-walk move and the bookkeeping), so it
understates the jump alone; ``test_jump_alone`` times one batched jump.
"""

import pytest
import torch

from methods.common.chains import ChainState
from methods.trj.kernels import transport_jump
from methods.trj.method import TRJ
from methods.trj.sampler import JumpChooser
from suite.core.context import RunContext
from suite.core.registry import make_problem
from suite.run.runner import resolve_and_run

CHAINS = 1024
PROBLEM = "factor-analysis-k23"


def _problem():
    problem = make_problem(PROBLEM)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


@pytest.mark.parametrize("transport", ["rq", "affine", "lopes-west"])
def test_sampling_phase(benchmark, transport: str) -> None:
    """The method's post-burn-in loop; flow training is timed separately (``train`` phase)."""
    problem = _problem()
    method = TRJ(
        transport=transport,
        num_chains=CHAINS,
        burn_in=10,
        num_iterations=100,
        thin=10,
        flow_layers=3,
        flow_hidden=256,
        num_training_draws=5000,
        flow_iterations=1000,
    )
    context = RunContext(seed=0, profile="quick")
    result = benchmark.pedantic(lambda: resolve_and_run(method, problem, context), rounds=1)
    rate = result.diagnostics["between_proposals_per_s"]
    train_s = context.timer.timings.get("train")
    benchmark.extra_info.update(between_proposals_per_s=rate, train_s=train_s)
    print(
        f"\ntrj {transport} on {PROBLEM}, {CHAINS} chains: {rate:.3g} across-model proposals/s, "
        f"transport fit {train_s or 0:.1f} s, P(k=2) = {float(result.model_probs.prob[0]):.4f}"
    )


def test_jump_alone(benchmark) -> None:
    """One batched RQ-transport jump of 1024 chains (forward flow of the current model, inverse of the other)."""
    from methods.trj.flows import SplineTransport

    problem = _problem()
    train = problem.training_draws(5000, torch.Generator().manual_seed(0))
    transport = SplineTransport.fit(
        problem, train.model_index, train.theta, iterations=200, generator=torch.Generator().manual_seed(0)
    )
    start = problem.reference_draws(CHAINS, torch.Generator().manual_seed(1))
    state = ChainState(start.model_index, start.theta, problem.log_joint(start.model_index, start.theta))
    chooser = JumpChooser(problem, "uniform")
    generator = torch.Generator().manual_seed(2)

    def jump():
        with torch.no_grad():
            model_to, log_ratio = chooser(state.model_index, generator)
            return transport_jump(problem, state, transport, model_to, log_ratio, generator)

    benchmark.pedantic(jump, rounds=20, warmup_rounds=2)
    if benchmark.stats is None:  # --benchmark-disable: the jump ran once, untimed
        return
    rate = CHAINS / benchmark.stats.stats.mean
    benchmark.extra_info["proposals_per_s"] = rate
    print(f"\none RQ-transport jump of {CHAINS} chains on {PROBLEM}: {rate:.3g} proposals/s")
