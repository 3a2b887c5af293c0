"""The prior-corrected q(G): exact order posterior in, exact DAG posterior out."""

from __future__ import annotations

import math

import pytest
import torch

from methods.order_mcmc.estimator import DAGPosteriorFromOrders
from methods.order_mcmc.orders import all_orders, order_log_score, subset_logsumexp
from problems.linear_dag import LinearDAG


@pytest.fixture(scope="module")
def problem() -> LinearDAG:
    return LinearDAG(num_nodes=4, num_samples=30, edge_penalty=0.5, data_seed=2)


def parent_sets(problem: LinearDAG) -> torch.Tensor:
    adjacency = problem.adjacency(problem.model_space.all_indices())
    return (adjacency.long() << torch.arange(problem.num_nodes)[:, None]).sum(1)


def test_exact_order_weights_give_the_exact_dag_posterior(problem):
    scores = problem.local_log_scores()
    posterior = DAGPosteriorFromOrders(scores, parent_sets(problem))
    # Counts proportional to the exact order posterior (scaled so they are large, as after a long run).
    pi_orders = torch.softmax(order_log_score(subset_logsumexp(scores), all_orders(problem.num_nodes)), 0)
    q = posterior.probs(pi_orders * 1e9)
    exact = problem.reference_model_probs().prob
    assert torch.allclose(q, exact, rtol=0, atol=1e-12)


def test_without_the_correction_sparse_graphs_are_overweighted(problem):
    """The uncorrected order-MCMC marginal exp(score) n(G) differs: the correction is not a no-op."""
    scores = problem.local_log_scores()
    posterior = DAGPosteriorFromOrders(scores, parent_sets(problem))
    pi_orders = torch.softmax(posterior.order_log_score, 0)
    uncorrected = torch.softmax(torch.logsumexp(pi_orders.log()[:, None] + posterior.log_given_order, 0), 0)
    exact = problem.reference_model_probs().prob
    assert float(0.5 * (uncorrected - exact).abs().sum()) > 0.05
    empty = problem.model_space.index("empty")
    assert math.isclose(float(posterior.log_num_orders[empty]), math.log(24))  # the empty graph fits all 4! orders


def test_no_visits_is_an_error(problem):
    posterior = DAGPosteriorFromOrders(problem.local_log_scores(), parent_sets(problem))
    with pytest.raises(ValueError, match="no order"):
        posterior.probs(torch.zeros(24))
