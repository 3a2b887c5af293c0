"""CPDAGs (essential graphs) of DAGs and the expected CPDAG structural Hamming distance (E-CPDAG-SHD)."""

from __future__ import annotations

import torch
from torch import Tensor


def _edges(adjacency: Tensor) -> list[list[bool]]:
    """A validated square 0/1 acyclic adjacency as nested Python bools."""
    if adjacency.dim() != 2 or adjacency.shape[0] != adjacency.shape[1]:
        raise ValueError(f"adjacency must be a square [d, d] matrix, got shape {tuple(adjacency.shape)}")
    values = adjacency.detach().to("cpu", torch.float64)
    if not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("adjacency entries must be 0 or 1")
    if bool(values.diagonal().any()):
        raise ValueError("adjacency has a self-loop (non-zero diagonal); a DAG must have a zero diagonal")
    edges = (values == 1).tolist()
    # Kahn's algorithm: a graph is acyclic iff every node can be peeled off with in-degree zero.
    d = len(edges)
    indegree = [sum(edges[i][j] for i in range(d)) for j in range(d)]
    ready = [j for j in range(d) if indegree[j] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in range(d):
            if edges[i][j]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    ready.append(j)
    if seen != d:
        raise ValueError("adjacency contains a directed cycle; a DAG is required")
    return edges


def cpdag(adjacency: Tensor) -> Tensor:
    """The CPDAG of a DAG ([d, d] 0/1, a[i, j] = 1: i -> j): c[i,j]=1, c[j,i]=0 compelled; both 1 reversible."""
    dag = _edges(adjacency)
    d = len(dag)
    adjacent = [[dag[i][j] or dag[j][i] for j in range(d)] for i in range(d)]
    directed = [[False] * d for _ in range(d)]
    # Edges of v-structures a -> c <- b with a, b non-adjacent are compelled.
    for c in range(d):
        parents = [p for p in range(d) if dag[p][c]]
        for x, a in enumerate(parents):
            for b in parents[x + 1 :]:
                if not adjacent[a][b]:
                    directed[a][c] = directed[b][c] = True

    def undirected(i: int, j: int) -> bool:
        return adjacent[i][j] and not directed[i][j] and not directed[j][i]

    # Meek rules R1-R3 to closure (R4 is never needed when starting from a DAG's v-structures).
    changed = True
    while changed:
        changed = False
        for i in range(d):
            for j in range(d):
                if not undirected(i, j):
                    continue
                others = [k for k in range(d) if k not in (i, j)]
                # R1: k -> i - j with k, j non-adjacent  =>  i -> j.
                r1 = any(directed[k][i] and not adjacent[k][j] for k in others)
                # R2: i -> k -> j with i - j  =>  i -> j.
                r2 = any(directed[i][k] and directed[k][j] for k in others)
                # R3: i - k -> j and i - l -> j with k, l non-adjacent  =>  i -> j.
                kites = [k for k in others if undirected(i, k) and directed[k][j]]
                r3 = any(not adjacent[k][m] for x, k in enumerate(kites) for m in kites[x + 1 :])
                if r1 or r2 or r3:
                    directed[i][j] = True
                    changed = True
    result = [[adjacent[i][j] and not directed[j][i] for j in range(d)] for i in range(d)]
    return torch.tensor(result, dtype=torch.int64).reshape(d, d)


def cpdag_shd(a: Tensor, b: Tensor) -> int:
    """SHD between two CPDAGs: node pairs whose edge (absent, i -> j, j -> i or undirected) differs, counted once."""
    if a.shape != b.shape or a.dim() != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"CPDAGs must be square and of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.detach().cpu() != 0, b.detach().cpu() != 0
    differs = (a != b) | (a.T != b.T)
    return int(differs.triu(diagonal=1).sum())


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
    reference = cpdag(truth)
    distinct, inverse = torch.unique(graphs.detach().cpu().to(torch.int64), dim=0, return_inverse=True)
    distances = torch.tensor([cpdag_shd(cpdag(g), reference) for g in distinct], dtype=torch.float64)
    return float((weights * distances[inverse]).sum())
