"""Problems whose models are directed acyclic graphs: the ``DAGProblem`` protocol and graph helpers.

Structure-learning methods that return graphs rather than model indices (e.g.
the ``dagma`` optimiser) and the DAG metrics (F1, SHD, ...; :mod:`suite.scoring.graphs`) need more than the
``Problem`` contract: the graph of each model, the model of each graph, the
observed data and, when known, the true graph. A problem provides them by
having the members of :class:`DAGProblem`; no base class is needed.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

#: ``Method.supports`` reason for a problem whose models are not DAGs.
NOT_DAG_REASON = "the models are not DAGs (no suite.graphs.dag.DAGProblem interface)"


@runtime_checkable
class DAGProblem(Protocol):
    """A problem whose models are DAGs on ``num_nodes`` labelled nodes (adjacency ``A[i, j]``: edge i -> j)."""

    #: Number of nodes d.
    num_nodes: int
    #: The graph that generated the data, bool ``[d, d]``; None when unknown.
    true_adjacency: Tensor | None

    def adjacency(self, model_index: Tensor) -> Tensor:
        """Bool adjacency matrices ``[B, d, d]`` of the models."""
        ...

    def model_index_of(self, adjacency: Tensor) -> Tensor:
        """int64 ``[B]`` (``[B, W]`` for multi-word model spaces): a model whose graph is each adjacency ``[B, d, d]``.

        Raises ValueError naming the offending rows if any graph is cyclic or
        not a model of this problem.
        """
        ...

    def observations(self) -> Tensor:
        """The data, float64 ``[n, d]``, columns in the problem's node order, as the likelihood sees them."""
        ...


@runtime_checkable
class DecomposableScore(Protocol):
    """A DAG problem whose log p(G) + log p(D | G) is a sum of closed-form per-node terms (order MCMC needs it)."""

    num_nodes: int

    def local_log_scores(self) -> Tensor:
        """float64 ``[d, 2^d]``: node j's term for each parent-set bitmask (-inf where the set holds j).

        ``log p(G) + log p(D | G) = sum_j scores[j, parents_j(G)] + const``.
        """
        ...


@runtime_checkable
class LinearEdgeWeights(Protocol):
    """A DAG problem whose theta starts with one weight per possible edge (BayesDAG's linear variant reads them)."""

    def edge_weight_positions(self) -> Tensor | None:
        """int64 ``[S]``: flat position ``i * d + j`` of edge i -> j for each of theta's first S entries, then come
        the d log noise variances; None when this instance's theta has another layout."""
        ...


def graph_type(problem: object) -> str | None:
    """The problem's ``graph_type`` configuration (``"er"``, ``"sf"``), or None where it has none."""
    config = problem.config() if hasattr(problem, "config") else {}
    return config.get("graph_type")


def transitive_closure(adjacency: Tensor) -> Tensor:
    """Bool ``[B, d, d]``: ``R[b, i, j]`` is True iff graph b has a directed path of length >= 1 from i to j.

    Repeated squaring, ``ceil(log2 d)`` batched matrix products (no loop over the batch).

    Example:
        >>> chain = torch.tensor([[[False, True, False], [False, False, True], [False, False, False]]])
        >>> transitive_closure(chain)[0, 0].tolist()
        [False, True, True]
    """
    if adjacency.ndim != 3 or adjacency.shape[-1] != adjacency.shape[-2]:
        raise ValueError(f"adjacency must have shape [B, d, d], got {tuple(adjacency.shape)}")
    reach = adjacency.to(torch.bool)
    d = reach.shape[-1]
    # After k squarings ``reach`` holds every path of length 1..2^k; cycles are at most d long.
    for _ in range(math.ceil(math.log2(d)) if d > 1 else 0):
        step = reach.to(torch.float32) @ reach.to(torch.float32)
        reach = reach | (step > 0)
    return reach


def is_acyclic(adjacency: Tensor) -> Tensor:
    """Bool ``[B]``: whether each adjacency ``[B, d, d]`` has no directed cycle (self-loops count as cycles).

    Example:
        >>> cycle = torch.tensor([[False, True], [True, False]])
        >>> is_acyclic(torch.stack([cycle, torch.triu(cycle)])).tolist()
        [False, True]
    """
    return ~transitive_closure(adjacency).diagonal(dim1=-2, dim2=-1).any(-1)
