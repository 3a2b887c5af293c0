"""Problems whose models are directed acyclic graphs: the ``DAGProblem`` protocol and graph helpers.

Structure-learning methods that return graphs rather than model indices (e.g.
the ``dagma`` optimiser) and the DAG metrics (F1, SHD, ...) need more than the
``Problem`` contract: the graph of each model, the model of each graph, the
observed data and, when known, the true graph. A problem provides them by
having the members of :class:`DAGProblem`; no base class is needed.
"""

from __future__ import annotations

import math
import weakref
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from suite import dag_metrics
from suite.cpdag import cpdag_shd_to_truth, expected_cpdag_shd
from suite.metrics import Estimate
from suite.types import Draws, ModelProbs

#: ``Method.supports`` reason for a problem whose models are not DAGs.
NOT_DAG_REASON = "the models are not DAGs (no suite.dag.DAGProblem interface)"


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


#: Enumerated spaces up to this size get every model's CPDAG SHD to the truth tabulated once (a running
#: estimate is scored many times; the 29,281 DAGs on 5 nodes take about half a second).
MAX_TABLED_MODELS = 100_000
_CPDAG_SHD_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cpdag_shd_table(problem: DAGProblem) -> Tensor | None:
    """CPDAG SHD to the true graph of every model ``[K]`` (cached per problem), or None for large spaces."""
    num_models = getattr(problem, "num_models", None)
    if num_models is None or num_models > MAX_TABLED_MODELS or problem.true_adjacency is None:
        return None
    if not bool(is_acyclic(problem.true_adjacency.cpu()[None])[0]):
        return None
    if problem not in _CPDAG_SHD_TABLES:
        graphs = problem.adjacency(torch.arange(num_models)).cpu()
        _CPDAG_SHD_TABLES[problem] = cpdag_shd_to_truth(graphs, problem.true_adjacency.cpu())
    return _CPDAG_SHD_TABLES[problem]


def graph_task_metrics(
    problem: DAGProblem,
    model_probs: ModelProbs | None,
    draws: Draws | None,
    exact: ModelProbs | None = None,
) -> dict[str, Estimate]:
    """DAG metrics of a result against the true graph (and its MMD to the exact posterior over graphs, if given).

    The graphs are those of ``model_probs`` weighted by their probabilities (exact q over listed models) when
    given, else those of the draws with equal weights; nothing is returned when the true graph is unknown.
    """
    if problem.true_adjacency is None or (model_probs is None and draws is None):
        return {}
    if model_probs is not None:
        keep = model_probs.prob > 0
        index, weights = model_probs.index[keep], model_probs.prob[keep].to(torch.float64)
    else:
        index, weights = draws.model_index.cpu(), None
    graphs = problem.adjacency(index).cpu()
    values = dag_metrics.dag_metrics(graphs, problem.true_adjacency.cpu(), weights)
    # SHD between Markov equivalence classes (BayesDAG's E-CPDAG-SHD): data identify a linear-Gaussian DAG no
    # further than its class, so an orientation the data cannot decide costs nothing here.
    normalised = torch.full((len(index),), 1.0 / len(index), dtype=torch.float64) if weights is None else weights
    normalised = normalised / normalised.sum()
    table = _cpdag_shd_table(problem)
    if not bool(is_acyclic(problem.true_adjacency.cpu()[None])[0]):
        pass  # a cyclic "true graph" (Sachs's consensus network) has no CPDAG: the metric is left out
    elif table is not None:
        values["expected_cpdag_shd"] = float((normalised * table[index.long()]).sum())
    else:
        values["expected_cpdag_shd"] = expected_cpdag_shd(graphs, problem.true_adjacency.cpu(), normalised)
    if exact is not None:
        truth_graphs = problem.adjacency(exact.index).cpu()
        mmd2 = dag_metrics.mmd_hamming(graphs, truth_graphs, weights, exact.prob.to(torch.float64))
        # BayesDAG reports MMD itself (its code returns the square root); MMD^2 stays beside it.
        values["mmd_hamming"], values["mmd"] = mmd2, math.sqrt(max(mmd2, 0.0))
    return {name: Estimate(value) for name, value in values.items()}
