"""Tests for the BGe marginal likelihood: hand-computed scores, score equivalence, table lookup, bad input."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch

from problems.linear_dag_bge.bge import BGe
from suite.graphs.dag_space import codes_to_adjacency, enumerate_dags


def _scm_data(num: int, d: int, seed: int) -> torch.Tensor:
    """Samples of a linear SCM on a random upper-triangular DAG with unequal noise scales."""
    gen = torch.Generator().manual_seed(seed)
    weights = torch.triu(torch.empty(d, d).uniform_(0.5, 1.5, generator=gen), diagonal=1).to(torch.float64)
    weights *= (torch.rand(d, d, generator=gen) < 0.6).to(torch.float64)
    scales = torch.empty(d).uniform_(0.5, 2.0, generator=gen).to(torch.float64)
    x = torch.zeros(num, d, dtype=torch.float64)
    for j in range(d):
        x[:, j] = x @ weights[:, j] + scales[j] * torch.randn(num, generator=gen, dtype=torch.float64)
    return x


def _mec_key(adj: np.ndarray) -> tuple[frozenset, frozenset]:
    """(skeleton, v-structures) of a DAG: equal keys iff Markov equivalent."""
    d = adj.shape[0]
    skeleton = frozenset(frozenset((i, j)) for i in range(d) for j in range(d) if adj[i, j])
    v_structures = frozenset(
        (a, c, b)
        for c in range(d)
        for a, b in itertools.combinations(range(d), 2)
        if adj[a, c] and adj[b, c] and not adj[a, b] and not adj[b, a]
    )
    return skeleton, v_structures


def test_two_node_scores_match_formula_by_hand() -> None:
    rows = np.array([[0.3, -1.2], [1.5, 0.4], [-0.7, 2.1]])
    n, d = rows.shape
    alpha_mu, alpha_w = 1.0, d + 2.0
    t = alpha_mu * (alpha_w - d - 1) / (alpha_mu + 1)
    xbar = rows.mean(axis=0)
    s_n = (rows - xbar).T @ (rows - xbar)
    r = t * np.eye(d) + s_n + (n * alpha_mu / (n + alpha_mu)) * np.outer(xbar, xbar)

    def const(num_parents: int) -> float:
        return (
            0.5 * (math.log(alpha_mu) - math.log(n + alpha_mu))
            + math.lgamma(0.5 * (n + alpha_w - d + num_parents + 1))
            - math.lgamma(0.5 * (alpha_w - d + num_parents + 1))
            - 0.5 * n * math.log(math.pi)
            + 0.5 * (alpha_w - d + 2 * num_parents + 1) * math.log(t)
        )

    node0_empty = const(0) - 0.5 * (n + alpha_w - d + 1) * math.log(r[0, 0])
    node1_given0 = (
        const(1)
        + 0.5 * (n + alpha_w - d + 1) * math.log(r[0, 0])
        - 0.5 * (n + alpha_w - d + 2) * math.log(np.linalg.det(r))
    )
    bge = BGe(torch.tensor(rows))
    assert bge.local_score(0, []) == pytest.approx(node0_empty, abs=1e-10)
    assert bge.local_score(1, [0]) == pytest.approx(node1_given0, abs=1e-10)
    table = bge.local_score_table()
    assert table[0, 0].item() == pytest.approx(node0_empty, abs=1e-10)
    assert table[1, 0b01].item() == pytest.approx(node1_given0, abs=1e-10)


def test_two_node_equivalence_and_empty_graph() -> None:
    bge = BGe(_scm_data(30, 2, seed=1))
    forward = bge.log_marginal_likelihood(torch.tensor([[0, 1], [0, 0]]))
    backward = bge.log_marginal_likelihood(torch.tensor([[0, 0], [1, 0]]))
    empty = bge.log_marginal_likelihood(torch.zeros(2, 2))
    assert forward.item() == pytest.approx(backward.item(), abs=1e-9)
    assert empty.item() == pytest.approx(bge.local_score(0, []) + bge.local_score(1, []), abs=1e-9)


def test_score_equivalence_over_all_dags_on_four_nodes() -> None:
    bge = BGe(_scm_data(50, 4, seed=0), alpha_mu=2.0, alpha_w=7.5, nu=torch.tensor([0.1, -0.2, 0.3, 0.0]))
    adjacency = codes_to_adjacency(enumerate_dags(4), 4)
    assert adjacency.shape[0] == 543
    scores = bge.log_marginal_likelihood(adjacency)
    groups: dict[tuple[frozenset, frozenset], list[float]] = {}
    for adj, score in zip(adjacency.numpy(), scores.tolist(), strict=True):
        groups.setdefault(_mec_key(adj), []).append(score)
    assert len(groups) == 185  # Markov equivalence classes on 4 labelled nodes
    spreads = [max(v) - min(v) for v in groups.values()]
    assert max(spreads) < 1e-9
    # Non-equivalent classes do differ (the check above is not vacuous).
    assert len({round(v[0], 6) for v in groups.values()}) > 100


def test_table_matches_direct_local_scores() -> None:
    d = 4
    bge = BGe(_scm_data(40, d, seed=2), alpha_mu=0.5)
    table = bge.local_score_table()
    assert table.shape == (d, 2**d) and table.dtype == torch.float64
    for j in range(d):
        for mask in range(2**d):
            parents = [i for i in range(d) if mask >> i & 1]
            if j in parents:
                assert table[j, mask].item() == -math.inf
            else:
                assert table[j, mask].item() == pytest.approx(bge.local_score(j, parents), abs=1e-10)


def test_single_adjacency_equals_sum_of_local_scores() -> None:
    bge = BGe(_scm_data(25, 3, seed=3))
    adj = torch.tensor([[0, 1, 1], [0, 0, 1], [0, 0, 0]])
    expected = bge.local_score(0, []) + bge.local_score(1, [0]) + bge.local_score(2, [0, 1])
    assert bge.log_marginal_likelihood(adj).item() == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha_w": 4.0},  # d + 1 for d = 3
        {"alpha_w": 2.0},
        {"alpha_mu": 0.0},
        {"alpha_mu": -1.0},
        {"nu": torch.zeros(2)},
    ],
)
def test_bad_hyper_parameters_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="BGe"):
        BGe(_scm_data(10, 3, seed=4), **kwargs)


@pytest.mark.parametrize(
    "data",
    [torch.zeros(5), torch.zeros(0, 3, dtype=torch.float64), torch.ones(4, 2, dtype=torch.int64)],
)
def test_bad_data_raises(data: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="BGe"):
        BGe(data)


def test_nonfinite_data_raises() -> None:
    data = _scm_data(10, 3, seed=5)
    data[2, 1] = math.nan
    with pytest.raises(ValueError, match="finite"):
        BGe(data)


def test_posterior_over_all_dags_on_five_nodes_normalises() -> None:
    bge = BGe(_scm_data(100, 5, seed=6))
    adjacency = codes_to_adjacency(enumerate_dags(5), 5)
    assert adjacency.shape[0] == 29281
    bge.local_score_table()
    start = time.perf_counter()
    scores = bge.log_marginal_likelihood(adjacency)
    print(f"scored {adjacency.shape[0]} DAGs in {time.perf_counter() - start:.4f} s")
    assert scores.shape == (29281,) and bool(torch.isfinite(scores).all())
    log_evidence = torch.logsumexp(scores, 0)
    assert bool(torch.isfinite(log_evidence))
    posterior = torch.exp(scores - log_evidence)
    assert posterior.sum().item() == pytest.approx(1.0, abs=1e-12)
