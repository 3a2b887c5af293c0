"""BayesDAG's synthetic linear-Gaussian data (Sec. 6.1.1, App. D.2): ER or SF graphs, weights in [0.5, 1.5].

The paper states: graphs from Erdos-Renyi (ER) or scale-free (SF, Barabasi-Albert) families with ``d`` edges in
expectation for d = 5; weights drawn from the fixed range [0.5, 1.5] (the sign is not stated: positive by
default, a random sign as an option); per-node noise variances from InverseGamma(concentration 1.5, rate 1);
N = 500 training and 100 held-out rows. What it leaves open is chosen here and said where it is done.

The authors' generator (microsoft/Project-BayesDAG, ``data_generation/large_synthetic/data_utils.py``, read for
issue 33) builds the graphs differently from the paper's words, and their Fig. 2 was scored on those graphs:
ER with exactly ``d`` edges (igraph's ``Erdos_Renyi(n, m)``: ``ER_EDGES`` "exact") and SF by igraph's
``Barabasi(n, m=1, directed=True)``, whose edges point from each new node to the old one it attaches to, chosen
with probability proportional to in-degree + 1, so hubs are sinks (``SF_ORIENTATIONS`` "new_to_old").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from suite.graphs.dag import is_acyclic

GRAPH_KINDS = ("er", "sf")
#: ER edge counts: "exact" (the authors' igraph G(n, m), m = round(expected_edges)) or "expected" (each pair with
#: probability expected_edges / pairs, the paper's "d edges in expectation").
ER_EDGES = ("exact", "expected")
#: SF orientation: "new_to_old" (igraph's directed Barabasi, the authors' data: attachment by in-degree + 1) or
#: "old_to_new" (attachment by degree + 1, edges from the older node: every hub a source).
SF_ORIENTATIONS = ("new_to_old", "old_to_new")


@dataclass(frozen=True)
class LinearSCM:
    """Linear SCM ``x_j = sum_i weights[i, j] x_i + sqrt(noise_var[j]) eps_j`` on a DAG (adjacency[i, j]: i -> j)."""

    adjacency: Tensor  # [d, d] bool
    weights: Tensor  # [d, d] float64, zero off the edges
    noise_var: Tensor  # [d] float64

    def sample(self, num_rows: int, generator: torch.Generator) -> Tensor:
        """``num_rows`` independent rows ``[num_rows, d]`` (float64), nodes filled in a topological order."""
        d = self.adjacency.shape[0]
        noise = torch.randn(num_rows, d, generator=generator, dtype=torch.float64) * self.noise_var.sqrt()
        x = torch.zeros(num_rows, d, dtype=torch.float64)
        for node in topological_order(self.adjacency):
            x[:, node] = x @ self.weights[:, node] + noise[:, node]
        return x

    def covariance(self) -> Tensor:
        """The rows' exact covariance ``(I - W)^-T diag(noise_var) (I - W)^-1``."""
        d = self.adjacency.shape[0]
        inverse = torch.linalg.inv(torch.eye(d, dtype=torch.float64) - self.weights)
        return inverse.T @ torch.diag(self.noise_var) @ inverse


def topological_order(adjacency: Tensor) -> list[int]:
    """The nodes of a DAG, parents before children (ties by node number)."""
    remaining = adjacency.to(torch.bool).clone()
    order: list[int] = []
    left = list(range(adjacency.shape[0]))
    while left:
        roots = [node for node in left if not bool(remaining[left, node].any())]
        if not roots:
            raise ValueError("the graph has a directed cycle")
        order.extend(roots)
        left = [node for node in left if node not in roots]
    return order


def er_graph(num_nodes: int, expected_edges: float, generator: torch.Generator, edges: str = "expected") -> Tensor:
    """Erdos-Renyi DAG oriented by a random order: each of the d(d-1)/2 pairs an edge with one probability
    (``edges="expected"``), or ``round(expected_edges)`` pairs drawn uniformly without replacement (``"exact"``)."""
    pairs = num_nodes * (num_nodes - 1) / 2
    if not 0 <= expected_edges <= pairs:
        raise ValueError(f"expected_edges must be in [0, {pairs:g}] for {num_nodes} nodes, got {expected_edges}")
    if edges not in ER_EDGES:
        raise ValueError(f"unknown ER edges {edges!r}; valid: {', '.join(ER_EDGES)}")
    if edges == "expected":
        upper = torch.rand(num_nodes, num_nodes, generator=generator, dtype=torch.float64) < expected_edges / pairs
        return _relabel(torch.triu(upper, diagonal=1), generator)
    rows, cols = torch.triu_indices(num_nodes, num_nodes, offset=1)
    pick = torch.randperm(len(rows), generator=generator)[: round(expected_edges)]
    upper = torch.zeros(num_nodes, num_nodes, dtype=torch.bool)
    upper[rows[pick], cols[pick]] = True
    return _relabel(upper, generator)


def sf_graph(
    num_nodes: int, expected_edges: float, generator: torch.Generator, orientation: str = "old_to_new"
) -> Tensor:
    """Scale-free DAG by preferential attachment (Barabasi & Albert 1999).

    Each node after the first attaches to ``m = max(1, round(expected_edges / num_nodes))`` distinct earlier
    nodes (all of them while fewer exist), so the graph has ``m`` edges per added node (4 for d = 5, where the
    paper asks d = 5 in expectation: the nearest a tree of preferential attachment gets). ``"old_to_new"``: an
    earlier node is chosen with probability proportional to its degree + 1 and the edge points to the new node.
    ``"new_to_old"`` (igraph's directed ``Barabasi``, the authors' data): proportional to its in-degree + 1, and
    the edge points from the new node to the old one, so the hubs are sinks with v-structures. Labels are then
    shuffled, as for ER.
    """
    if expected_edges <= 0:
        raise ValueError(f"expected_edges must be positive for a scale-free graph, got {expected_edges}")
    if orientation not in SF_ORIENTATIONS:
        raise ValueError(f"unknown SF orientation {orientation!r}; valid: {', '.join(SF_ORIENTATIONS)}")
    per_node = max(1, round(expected_edges / num_nodes))
    adjacency = torch.zeros(num_nodes, num_nodes, dtype=torch.bool)
    appeal = torch.zeros(num_nodes, dtype=torch.float64)  # degree (old_to_new) or in-degree (new_to_old)
    for node in range(1, num_nodes):
        take = min(per_node, node)
        targets = torch.multinomial(appeal[:node] + 1.0, take, replacement=False, generator=generator)
        if orientation == "old_to_new":
            adjacency[targets, node] = True
            appeal[node] += take
        else:
            adjacency[node, targets] = True
        appeal[targets] += 1
    return _relabel(adjacency, generator)


def _relabel(adjacency: Tensor, generator: torch.Generator) -> Tensor:
    """The same graph with node labels in a random order (so node 0 is not always a root)."""
    order = torch.randperm(adjacency.shape[0], generator=generator)
    relabelled = torch.zeros_like(adjacency)
    relabelled[order[:, None], order[None, :]] = adjacency
    return relabelled


def random_scm(
    kind: str,
    num_nodes: int,
    expected_edges: float,
    generator: torch.Generator,
    random_sign: bool = False,
    er_edges: str = "expected",
    sf_orientation: str = "old_to_new",
) -> LinearSCM:
    """A graph of ``kind`` (``er`` or ``sf``, built as ``er_edges`` / ``sf_orientation`` say), weights uniform in
    [0.5, 1.5] (times a random sign if asked), and noise variances from InverseGamma(1.5, 1)."""
    if kind not in GRAPH_KINDS:
        raise ValueError(f"unknown graph kind {kind!r}; valid: {', '.join(GRAPH_KINDS)}")
    if kind == "er":
        adjacency = er_graph(num_nodes, expected_edges, generator, er_edges)
    else:
        adjacency = sf_graph(num_nodes, expected_edges, generator, sf_orientation)
    assert bool(is_acyclic(adjacency[None]).all())
    magnitude = 0.5 + torch.rand(num_nodes, num_nodes, generator=generator, dtype=torch.float64)
    sign = torch.where(torch.rand(num_nodes, num_nodes, generator=generator) < 0.5, -1.0, 1.0).double()
    weights = torch.where(adjacency, magnitude * (sign if random_sign else 1.0), 0.0)
    # Gamma(1.5, rate 1) draws from torch's sampler, which takes no generator: under a seed drawn from ``generator``.
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gamma = torch._standard_gamma(torch.full((num_nodes,), 1.5, dtype=torch.float64))
    return LinearSCM(adjacency, weights, 1.0 / gamma)
