"""CPDAGs (essential graphs) of DAGs and the expected CPDAG structural Hamming distance (E-CPDAG-SHD)."""

from __future__ import annotations

import torch
from torch import Tensor

from suite.graphs.dag import is_acyclic


def _check_dags(adjacency: Tensor) -> Tensor:
    """Validated 0/1 acyclic adjacencies ``[B, d, d]`` as bool (ValueError on anything else)."""
    if adjacency.dim() != 3 or adjacency.shape[1] != adjacency.shape[2]:
        raise ValueError(f"adjacency must be a square [d, d] matrix, got shape {tuple(adjacency.shape[1:])}")
    values = adjacency.detach().cpu()
    if not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("adjacency entries must be 0 or 1")
    dags = values == 1
    if bool(dags.diagonal(dim1=1, dim2=2).any()):
        raise ValueError("adjacency has a self-loop (non-zero diagonal); a DAG must have a zero diagonal")
    if len(dags) and not bool(is_acyclic(dags).all()):
        raise ValueError("adjacency contains a directed cycle; a DAG is required")
    return dags


def _any_path(first: Tensor, second: Tensor) -> Tensor:
    """``[B, d, d]`` bool: some k with first[i, k] and second[k, j] (a boolean matrix product)."""
    return (first.to(torch.float32) @ second.to(torch.float32)) > 0


def cpdags(adjacency: Tensor) -> Tensor:
    """CPDAGs of a batch of DAGs ``[B, d, d]`` (0/1, a[i, j] = 1: i -> j), int64 ``[B, d, d]``.

    c[i, j] = 1, c[j, i] = 0: compelled i -> j; both 1: reversible (undirected). The edges of v-structures are
    compelled, then Meek's rules R1-R3 orient more until nothing changes (R4 is never needed when starting from a
    DAG's v-structures). Each round applies every rule to every edge of every graph at once; the rules are sound,
    so the simultaneous rounds reach the same unique closure as one edge at a time.
    """
    dag = _check_dags(adjacency)
    d = dag.shape[-1]
    off_diagonal = ~torch.eye(d, dtype=torch.bool)
    adjacent = dag | dag.transpose(1, 2)
    non_adjacent = ~adjacent & off_diagonal  # distinct, non-adjacent pairs
    # a -> c is in a v-structure iff c has another parent b not adjacent to a.
    directed = dag & _any_path(non_adjacent, dag)
    for _ in range(d * d):
        undirected = adjacent & ~directed & ~directed.transpose(1, 2)
        # R1: k -> i - j with k, j non-adjacent  =>  i -> j.
        r1 = _any_path(directed.transpose(1, 2), non_adjacent)
        # R2: i -> k -> j with i - j  =>  i -> j.
        r2 = _any_path(directed, directed)
        # R3: i - k -> j and i - l -> j with k, l non-adjacent  =>  i -> j.
        kite = (undirected[:, :, None, :] & directed.transpose(1, 2)[:, None, :, :]).to(torch.float32)  # [B, i, j, k]
        r3 = torch.einsum("bijk,bkl,bijl->bij", kite, non_adjacent.to(torch.float32), kite) > 0
        new = undirected & (r1 | r2 | r3)
        if not bool(new.any()):
            break
        directed = directed | new
    return (adjacent & ~directed.transpose(1, 2)).to(torch.int64)


def cpdag(adjacency: Tensor) -> Tensor:
    """The CPDAG of one DAG ([d, d] 0/1, a[i, j] = 1: i -> j): c[i,j]=1, c[j,i]=0 compelled; both 1 reversible."""
    if adjacency.dim() != 2:
        raise ValueError(f"adjacency must be a square [d, d] matrix, got shape {tuple(adjacency.shape)}")
    return cpdags(adjacency[None])[0]


def cpdag_shd(a: Tensor, b: Tensor) -> int:
    """SHD between two CPDAGs: node pairs whose edge (absent, i -> j, j -> i or undirected) differs, counted once."""
    if a.shape != b.shape or a.dim() != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"CPDAGs must be square and of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.detach().cpu() != 0, b.detach().cpu() != 0
    differs = (a != b) | (a.T != b.T)
    return int(differs.triu(diagonal=1).sum())


def cpdag_shd_to_truth(graphs: Tensor, truth: Tensor) -> Tensor:
    """float64 ``[B]``: cpdag_shd(cpdag(G_b), cpdag(truth)) for DAGs ``[B, d, d]``, all graphs at once."""
    reference = cpdag(truth) != 0
    classes = cpdags(graphs) != 0
    differs = (classes != reference) | (classes.transpose(1, 2) != reference.T)
    return differs.triu(diagonal=1).sum((1, 2)).to(torch.float64)


def expected_cpdag_shd(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """E-CPDAG-SHD: weighted mean over graphs [n, d, d] of cpdag_shd(cpdag(G_i), cpdag(truth)); default uniform."""
    if graphs.dim() != 3 or graphs.shape[1:] != truth.shape:
        raise ValueError(f"graphs must be [n, d, d] matching truth {tuple(truth.shape)}, got {tuple(graphs.shape)}")
    n = graphs.shape[0]
    if n == 0:
        raise ValueError("graphs must hold at least one graph")
    if weights is None:
        weights = torch.full((n,), 1.0 / n, dtype=torch.float64)
    weights = weights.detach().cpu().to(torch.float64)
    if weights.shape != (n,) or bool((weights < 0).any()) or abs(float(weights.sum()) - 1.0) > 1e-6:
        raise ValueError(f"weights must be [{n}] non-negative and sum to 1, got shape {tuple(weights.shape)}")
    distinct, inverse = torch.unique(graphs.detach().cpu().to(torch.int64), dim=0, return_inverse=True)
    distances = cpdag_shd_to_truth(distinct, truth)
    return float((weights * distances[inverse]).sum())
