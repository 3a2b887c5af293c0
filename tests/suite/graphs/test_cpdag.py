"""suite.graphs.cpdag: CPDAGs of hand-made DAGs, CPDAG SHD, E-CPDAG-SHD and Markov-equivalence class counts."""

from __future__ import annotations

import pytest
import torch

from suite.graphs.cpdag import cpdag, cpdag_shd, expected_cpdag_shd
from suite.graphs.cpdag import cpdags as batch_cpdags
from suite.graphs.dag_space import codes_to_adjacency, enumerate_dags


def graph(d: int, edges: list[tuple[int, int]]) -> torch.Tensor:
    """A [d, d] 0/1 adjacency with the given directed edges."""
    a = torch.zeros(d, d, dtype=torch.int64)
    for i, j in edges:
        a[i, j] = 1
    return a


def skeleton_and_vstructures(a: torch.Tensor) -> tuple[frozenset, frozenset]:
    """Verma-Pearl invariants: the skeleton and the set of v-structures (p, c, q) with p < q."""
    e = a.tolist()
    d = len(e)
    skeleton = frozenset((i, j) for i in range(d) for j in range(i + 1, d) if e[i][j] or e[j][i])
    vs = frozenset(
        (p, c, q)
        for c in range(d)
        for p in range(d)
        for q in range(p + 1, d)
        if e[p][c] and e[q][c] and not (e[p][q] or e[q][p])
    )
    return skeleton, vs


UNDIRECTED_CHAIN = graph(3, [(0, 1), (1, 0), (1, 2), (2, 1)])


@pytest.mark.parametrize(
    "edges", [[(0, 1), (1, 2)], [(2, 1), (1, 0)], [(1, 0), (1, 2)]], ids=["chain", "reversed", "fork"]
)
def test_chain_class_is_all_undirected(edges):
    assert torch.equal(cpdag(graph(3, edges)), UNDIRECTED_CHAIN)


def test_collider_stays_directed():
    collider = graph(3, [(0, 2), (1, 2)])
    assert torch.equal(cpdag(collider), collider)


def test_meek_r1_compels_edge_out_of_collider():
    dag = graph(4, [(0, 2), (1, 2), (2, 3)])
    assert torch.equal(cpdag(dag), dag)


def test_diamond():
    dag = graph(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    expected = graph(4, [(0, 1), (1, 0), (0, 2), (2, 0), (1, 3), (2, 3)])
    assert torch.equal(cpdag(dag), expected)


def test_empty_graph():
    assert torch.equal(cpdag(torch.zeros(3, 3)), torch.zeros(3, 3, dtype=torch.int64))


def test_cpdag_shd():
    chain = cpdag(graph(3, [(0, 2), (2, 1)]))
    collider = cpdag(graph(3, [(0, 2), (1, 2)]))
    assert cpdag_shd(chain, chain) == 0
    assert cpdag_shd(chain, collider) == 2
    assert cpdag_shd(collider, graph(3, [(0, 2)])) == 1
    assert cpdag_shd(collider, graph(3, [(0, 2), (2, 1)])) == 1


def test_expected_cpdag_shd_weighted_and_uniform():
    truth = graph(3, [(0, 2), (1, 2)])
    graphs = torch.stack([truth, graph(3, [(0, 2), (2, 1)]), graph(3, [(0, 2)]), truth])
    # Distances to the collider's CPDAG by hand: 0; 2 (both edges undirected); 2 (0-2 undirected, 1-2 missing); 0.
    weights = torch.tensor([0.1, 0.5, 0.3, 0.1], dtype=torch.float64)
    assert expected_cpdag_shd(graphs, truth, weights) == pytest.approx(0.5 * 2 + 0.3 * 2)
    assert expected_cpdag_shd(graphs, truth) == pytest.approx((0 + 2 + 2 + 0) / 4)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (torch.zeros(2, 3), "square"),
        (torch.full((2, 2), 0.5), "0 or 1"),
        (torch.eye(2), "self-loop"),
        (graph(3, [(0, 1), (1, 2), (2, 0)]), "cycle"),
    ],
)
def test_invalid_adjacency(bad, message):
    with pytest.raises(ValueError, match=message):
        cpdag(bad)


def test_invalid_weights():
    truth = graph(2, [(0, 1)])
    with pytest.raises(ValueError, match="sum to 1"):
        expected_cpdag_shd(truth.unsqueeze(0), truth, torch.tensor([0.5]))


@pytest.mark.parametrize(
    ("num_nodes", "num_dags", "num_classes"), [(3, 25, 11), (4, 543, 185), (5, 29281, 8782)]
)  # OEIS A003024 (DAGs) and A007984 (Markov equivalence classes)
@pytest.mark.slow
def test_markov_equivalence_classes(num_nodes, num_dags, num_classes):
    dags = codes_to_adjacency(enumerate_dags(num_nodes), num_nodes).to(torch.int64)
    assert len(dags) == num_dags
    cpdags = [tuple(c) for c in batch_cpdags(dags).flatten(1).tolist()]
    invariants = [skeleton_and_vstructures(a) for a in dags]
    assert len(set(cpdags)) == num_classes
    # Verma-Pearl: equal CPDAGs iff equal skeleton and v-structures, i.e. the two partitions coincide.
    assert len(set(zip(cpdags, invariants, strict=True))) == len(set(invariants)) == num_classes
    # Every CPDAG keeps the skeleton, and its directed edges include every v-structure.
    for a, flat, (_, vstructures) in zip(dags, cpdags, invariants, strict=True):
        c = torch.tensor(flat).reshape(num_nodes, num_nodes)
        assert torch.equal((c + c.T) > 0, (a + a.T) > 0)
        for p, m, q in vstructures:
            assert c[p, m] == 1 and c[m, p] == 0 and c[q, m] == 1 and c[m, q] == 0


def test_batch_matches_single_graphs():
    dags = codes_to_adjacency(enumerate_dags(4), 4).to(torch.int64)[::7]
    assert torch.equal(batch_cpdags(dags), torch.stack([cpdag(a) for a in dags]))
