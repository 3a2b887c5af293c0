"""BayesDAG's synthetic linear SCMs: graph families, weights, noise and the rows they generate."""

import pytest
import torch

from problems.linear_dag_bge.data import er_graph, random_scm, sf_graph, topological_order
from suite.graphs.dag import is_acyclic


def test_er_graphs_are_dags_with_the_expected_number_of_edges() -> None:
    generator = torch.Generator().manual_seed(0)
    graphs = torch.stack([er_graph(5, 5.0, generator) for _ in range(2000)])
    assert bool(is_acyclic(graphs).all())
    edges = graphs.sum((1, 2)).double()
    # Binomial(10, 0.5) edges: standard error of the mean sqrt(2.5 / 2000) = 0.035; allow 4 of them.
    assert float(edges.mean()) == pytest.approx(5.0, abs=0.14)
    assert not bool(graphs[:, 0].any(-1).all())  # labels are shuffled: node 0 is not always a root's parent


def test_sf_graphs_are_connected_trees_for_five_nodes() -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(200):
        graph = sf_graph(5, 5.0, generator)
        assert bool(is_acyclic(graph[None]).all()) and int(graph.sum()) == 4
        skeleton = graph | graph.T
        reached = {0}
        for _ in range(5):
            reached |= {j for i in reached for j in range(5) if skeleton[i, j]}
        assert reached == set(range(5))


def test_weights_and_noise_follow_the_paper() -> None:
    generator = torch.Generator().manual_seed(2)
    scms = [random_scm("er", 5, 5.0, generator) for _ in range(300)]
    weights = torch.cat([scm.weights[scm.adjacency] for scm in scms])
    assert bool(((weights >= 0.5) & (weights <= 1.5)).all())
    assert all(bool((scm.weights[~scm.adjacency] == 0).all()) for scm in scms)
    noise = torch.cat([scm.noise_var for scm in scms])
    # InverseGamma(1.5, 1): median 1 / Gamma(1.5).median = 1 / 1.1830 = 0.845; 1,500 draws pin it to about 5%.
    assert float(noise.median()) == pytest.approx(0.845, rel=0.1)
    signed = random_scm("sf", 5, 5.0, torch.Generator().manual_seed(2), random_sign=True)
    plain = random_scm("sf", 5, 5.0, torch.Generator().manual_seed(2))
    assert torch.equal(signed.adjacency, plain.adjacency) and torch.equal(signed.weights.abs(), plain.weights)


def test_rows_have_the_scm_s_covariance() -> None:
    scm = random_scm("er", 5, 5.0, torch.Generator().manual_seed(3))
    rows = scm.sample(200_000, torch.Generator().manual_seed(4))
    exact = scm.covariance()
    sample = torch.cov(rows.T)
    # Standard error of a sample covariance: sqrt((s_ii s_jj + s_ij^2) / n); allow 5 of them per entry.
    se = ((exact.diagonal()[:, None] * exact.diagonal()[None, :] + exact**2) / rows.shape[0]).sqrt()
    assert bool(((sample - exact).abs() <= 5 * se).all())


def test_topological_order_puts_parents_first_and_refuses_cycles() -> None:
    scm = random_scm("sf", 5, 5.0, torch.Generator().manual_seed(5))
    position = {node: k for k, node in enumerate(topological_order(scm.adjacency))}
    assert all(position[int(i)] < position[int(j)] for i, j in scm.adjacency.nonzero())
    cycle = torch.tensor([[0, 1], [1, 0]], dtype=torch.bool)
    with pytest.raises(ValueError, match="cycle"):
        topological_order(cycle)


def test_bad_input_names_the_valid_choices() -> None:
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="valid: er, sf"):
        random_scm("ba", 5, 5.0, generator)
    with pytest.raises(ValueError, match=r"expected_edges must be in \[0, 10\]"):
        er_graph(5, 11.0, generator)
