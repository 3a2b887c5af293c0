"""dibs: the library's BGe is the problem's, q(G) from acyclic particles, DiBS+ weights, options, budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.dibs import method as dibs_method
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

pytest.importorskip("dibs.inference")
jax = pytest.importorskip("jax")


@pytest.fixture(scope="module")
def problem():
    return make_problem("linear-dag-bge-er", data_seed=0)


@pytest.mark.slow
def test_library_bge_matches_the_problem(problem) -> None:
    """dibs.models.BGe and the problem's score table (minus its graph prior) differ by one constant on all DAGs.

    The library computes in float32: its log marginal likelihoods (about -3,000 nats) carry rounding errors of a
    few 1e-4, so the spread of the difference is bounded at 1e-2 nats, far below any posterior ratio that matters.
    """
    import jax.numpy as jnp
    from dibs.models import BGe

    everything = problem.model_space.all_indices(torch.device("cpu"))
    adjacency = problem.adjacency(everything)
    parents = (adjacency.long() << torch.arange(problem.num_nodes)[:, None]).sum(1)
    ours = problem.local_log_scores()[torch.arange(problem.num_nodes), parents].sum(-1)
    ours = ours - problem.log_model_prior(everything)
    data = jnp.asarray(problem.observations().numpy(), dtype=jnp.float32)
    likelihood = BGe(n_vars=problem.num_nodes)
    score = jax.jit(
        jax.vmap(lambda g: likelihood.interventional_log_marginal_prob(g, None, data, jnp.zeros_like(data), None))
    )
    theirs = torch.as_tensor(np.array(score(jnp.asarray(adjacency.numpy(), dtype=jnp.float32))), dtype=torch.float64)
    difference = ours - theirs
    assert float(difference.max() - difference.min()) < 1e-2


@pytest.mark.slow
def test_a_short_run_returns_q_over_acyclic_particles_and_counts_the_cyclic_ones(problem) -> None:
    context = RunContext(seed=0, profile="smoke")
    result = resolve_and_run(make_method("dibs", num_steps=100, chunk_steps=50, alpha_linear=0.02), problem, context)
    assert result.status == "ok", result.reason
    diagnostics = result.diagnostics
    assert diagnostics["steps"] == 100 and diagnostics["particles"] == 8
    assert 0 <= diagnostics["cyclic_particles"] < 8
    probs = result.model_probs.prob
    assert abs(float(probs.sum()) - 1) < 1e-12
    # Empirical weights are counts over the acyclic particles.
    counts = probs * (8 - diagnostics["cyclic_particles"])
    assert torch.allclose(counts, counts.round(), atol=1e-9)


def test_mixture_weights_are_the_exact_posterior_renormalised_over_the_particles_graphs(problem) -> None:
    """DiBS+: over the particles' distinct acyclic graphs, q is the exact posterior renormalised (float64 table
    against the float32 one: 1e-3 in log ratio); a cyclic particle is dropped and counted."""
    import jax.numpy as jnp

    method = make_method("dibs", weighting="mixture").resolve(problem, "smoke")
    data = jnp.asarray(problem.observations().numpy(), dtype=jnp.float32)
    _, _, log_joint = method._model(problem, data)
    chosen = problem.adjacency(torch.tensor([0, 5, 17, 17, 400, 9000])).to(torch.int64)
    cycle = torch.zeros(1, 5, 5, dtype=torch.int64)
    cycle[0, 0, 1] = cycle[0, 1, 0] = 1
    q, cyclic = method._model_probs(problem, torch.cat([chosen, cycle]).numpy(), log_joint, None)
    assert cyclic == 1
    parents = (problem.adjacency(q.index).long() << torch.arange(5)[:, None]).sum(1)
    exact_log = problem.local_log_scores()[torch.arange(5), parents].sum(-1)
    assert sorted(q.index.tolist()) == [0, 5, 17, 400, 9000]
    assert torch.allclose(q.prob.log(), torch.log_softmax(exact_log, 0), atol=1e-3)


@pytest.mark.slow
def test_a_time_budget_ends_the_run_at_a_chunk(problem) -> None:
    context = RunContext(seed=0, profile="quick", time_budget_s=3.0)
    result = resolve_and_run(make_method("dibs", chunk_steps=20, num_particles=4), problem, context)
    # A few hundred steps may leave every particle cyclic: that run fails with the reason, its steps counted.
    assert result.status == "ok" or "cyclic" in result.reason, result.reason
    steps = result.diagnostics["steps"]
    assert steps > 0 and steps % 20 == 0 and context.counts["stop"] == steps


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target": "exact"}, "unknown target 'exact'; valid: problem, library"),
        ({"weighting": "top"}, "unknown weighting 'top'; valid: empirical, mixture"),
        ({"num_particles": 1}, "at least 2"),
        ({"tau": 0}, "tau must be a positive number"),
    ],
)
def test_bad_options_are_refused_naming_the_valid_choices(problem, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_method("dibs", **options).resolve(problem, "smoke")


def test_the_kernel_bandwidth_follows_the_graph_family(problem) -> None:
    """BayesDAG Table 4: h = 5 on ER, 15 on SF; a given value wins."""
    assert make_method("dibs").resolve(problem, "paper").kernel_h == 5.0
    assert make_method("dibs").resolve(make_problem("linear-dag-bge-sf"), "paper").kernel_h == 15.0
    assert make_method("dibs", kernel_h=2.0).resolve(problem, "paper").kernel_h == 2.0


def test_without_the_library_the_method_says_how_to_install_it(problem, monkeypatch) -> None:
    monkeypatch.setattr(dibs_method, "library_version", lambda: None)
    assert "pip install --no-deps dibs-lib" in make_method("dibs").supports(problem)
    assert "DAG" in make_method("dibs").supports(make_problem("funnel"))
