"""Metrics of posterior DAG samples (or an enumerated, weighted posterior) against a true graph.

Graphs are 0/1 adjacency tensors ``[S, d, d]`` with ``A[s, i, j] = 1`` for an edge ``i -> j``; optional
non-negative weights ``[S]`` are normalised inside, so equally weighted samples and an exact posterior over
enumerated DAGs (probabilities as weights) go through the same code. All entries of the d x d matrix count,
diagonal included (it is zero for DAGs).

Sources and the conventions they fix:

- [VTI] Amortized variational transdimensional inference, App. F.2 and Table 1; its code
  (avti ``vti/utils/dag_helpers.py``, see ``specs/problems.md`` (f) "Metrics"): F1 with 1e-8 epsilons, SHD as the
  full-matrix mismatch count (cdt ``SHD(double_for_anticausal=True)``: a reversed edge counts 2), Brier as a SUM
  over the d^2 entries of the squared error of the edge frequencies, and AUROC as sklearn ``roc_auc_score`` of each
  binary sample against the truth, averaged over samples. Every metric is a (weighted) mean over samples.
- [BayesDAG] Annadani et al. 2023, App. D.2 (code: microsoft/Project-BayesDAG ``src/causica/utils/nri_utils.py``):
  E-SHD counts "edges that are to be added, removed or reversed" (a reversal counts 1; the code's ``_shd`` is
  E + M + R), and the MMD to the true posterior uses the Hamming kernel ``k(G, G') = 1 - H(G, G') / d^2`` with H
  the Hamming distance over all d^2 entries (the code uses sklearn's ``hamming`` metric on flattened d*d vectors).
"""

from __future__ import annotations

import torch
from torch import Tensor

_EPS = 1e-8  # [VTI] code's epsilon in precision, recall and F1
_TIE_TOL = 1e-12  # edge probabilities closer than this are tied in edge_probability_auroc

HIGHER_IS_BETTER = frozenset({"edge_f1", "auroc", "edge_auroc"})


def _is_binary(x: Tensor) -> bool:
    return bool(((x == 0) | (x == 1)).all())


def _graphs(graphs: Tensor, name: str = "graphs") -> Tensor:
    g = torch.as_tensor(graphs)
    if g.dim() != 3 or g.shape[1] != g.shape[2]:
        raise ValueError(f"{name} must have shape [S, d, d] (square adjacency matrices), got {tuple(g.shape)}")
    if g.shape[0] == 0:
        raise ValueError(f"{name} is empty (S = 0)")
    if not _is_binary(g):
        raise ValueError(f"{name} must be 0/1 adjacency matrices")
    return g.to(torch.float64)


def _weights(weights: Tensor | None, n: int, device: torch.device, name: str = "weights") -> Tensor:
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=torch.float64, device=device)
    w = torch.as_tensor(weights).to(device=device, dtype=torch.float64)
    if w.shape != (n,):
        raise ValueError(f"{name} must have shape [{n}] (one per graph), got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError(f"{name} must be finite and non-negative")
    total = w.sum()
    if float(total) <= 0:
        raise ValueError(f"{name} are all zero")
    return w / total


def _inputs(graphs: Tensor, truth: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    g = _graphs(graphs)
    t = torch.as_tensor(truth)
    if t.shape != g.shape[1:]:
        raise ValueError(f"truth must have shape {tuple(g.shape[1:])} to match graphs, got {tuple(t.shape)}")
    if not _is_binary(t):
        raise ValueError("truth must be a 0/1 adjacency matrix")
    return g, t.to(device=g.device, dtype=torch.float64), _weights(weights, g.shape[0], g.device)


def _edge_probs(g: Tensor, w: Tensor) -> Tensor:
    return torch.einsum("s,sij->ij", w, g)


def edge_f1(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """Weighted mean over graphs of the directed-edge F1 over all d^2 entries ([VTI] code, 1e-8 epsilons).

    For DAGs this is also [BayesDAG]'s "orientation F1" (an unordered pair counts as correct when its edge type
    none / i->j / j->i matches), up to the epsilons; an empty true graph gives F1 = 0.
    """
    g, t, w = _inputs(graphs, truth, weights)
    tp = (g * t).sum((1, 2))
    fp = (g * (1 - t)).sum((1, 2))
    fn = ((1 - g) * t).sum((1, 2))
    precision = tp / (tp + fp + _EPS)
    recall = tp / (tp + fn + _EPS)
    f1 = 2 * precision * recall / (precision + recall + _EPS)
    return float(w @ f1)


def shd(graphs: Tensor, truth: Tensor, weights: Tensor | None = None, reversed_counts: int = 2) -> float:
    """Weighted mean structural Hamming distance to the truth; a reversed edge counts ``reversed_counts`` (1 or 2).

    ``reversed_counts=2`` is the [VTI] code (number of mismatched entries of the d x d matrix, cdt ``SHD`` with
    ``double_for_anticausal=True``). ``reversed_counts=1`` subtracts one for each true edge i -> j that the graph
    has as j -> i only, which for a true DAG equals [BayesDAG]'s E + M + R (extra, missing, reversed; the diagonal
    is counted in both conventions but is zero for DAGs).

    >>> truth = torch.tensor([[0, 1], [0, 0]])
    >>> graphs = truth.T.unsqueeze(0)  # the one edge reversed
    >>> shd(graphs, truth), shd(graphs, truth, reversed_counts=1)
    (2.0, 1.0)
    """
    if reversed_counts not in (1, 2):
        raise ValueError(f"reversed_counts must be 1 or 2, got {reversed_counts}")
    g, t, w = _inputs(graphs, truth, weights)
    dist = (g - t).abs().sum((1, 2))
    if reversed_counts == 1:
        true_one_way = t * (1 - t.T)  # i -> j in the truth and not j -> i
        dist = dist - (true_one_way * (1 - g) * g.transpose(1, 2)).sum((1, 2))
    return float(w @ dist)


def expected_shd(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """[BayesDAG] E-SHD: posterior mean SHD with a reversed edge counted once (``shd(..., reversed_counts=1)``).

    [BayesDAG]'s d = 5 study reports E-CPDAG SHD, the same count between CPDAGs; convert graphs and truth to
    CPDAGs first for that (not done here).
    """
    return shd(graphs, truth, weights, reversed_counts=1)


def brier(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """Sum over the d^2 entries of (P_hat - A*)^2, P_hat the weighted edge frequencies ([VTI]: a sum, not a mean)."""
    g, t, w = _inputs(graphs, truth, weights)
    return float(((_edge_probs(g, w) - t) ** 2).sum())


def _class_counts(t: Tensor) -> tuple[float, float]:
    n_pos = float(t.sum())
    n_neg = t.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUROC is undefined: the true graph has a single class (no edges, or every entry an edge)")
    return n_pos, n_neg


def auroc(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """Weighted mean over graphs of the ROC AUC of each binary graph against the truth ([VTI] code).

    Each graph is its own 0/1 score over all d^2 entries (diagonal included), as sklearn ``roc_auc_score(truth,
    graph)``; for a binary score the ROC curve is (0,0), (FPR, TPR), (1,1), so AUC = (1 + TPR - FPR) / 2 (balanced
    accuracy; a constant graph scores 0.5). Compare ``edge_probability_auroc``. Raises ValueError for a
    single-class truth (the [VTI] code skips that case).
    """
    g, t, w = _inputs(graphs, truth, weights)
    n_pos, n_neg = _class_counts(t)
    tpr = (g * t).sum((1, 2)) / n_pos
    fpr = (g * (1 - t)).sum((1, 2)) / n_neg
    return float(w @ (0.5 * (1 + tpr - fpr)))


def edge_probability_auroc(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> float:
    """ROC AUC of the edge probabilities P_hat as a score for the true edges (Mann-Whitney, ties count 1/2).

    This is the common definition for posteriors over graphs (e.g. the threshold metrics of the BayesDAG and DiBS
    code): one ROC curve from the marginal edge probabilities, which count as tied when within 1e-12. It differs
    from ``auroc``, which averages the AUROCs of the individual binary graphs (the [VTI] Table 1 number); the two
    agree for a single graph.
    """
    g, t, w = _inputs(graphs, truth, weights)
    n_pos, n_neg = _class_counts(t)
    score, order = torch.sort(_edge_probs(g, w).flatten())
    # Probabilities equal up to the rounding of weighted sums (e.g. i->j and j->i within one MEC) are ties.
    new_group = torch.cat([score.new_ones(1, dtype=torch.bool), score.diff() > _TIE_TOL])
    group = torch.cumsum(new_group, 0) - 1
    counts = torch.bincount(group).to(torch.float64)
    mid_rank = torch.cumsum(counts, 0) - (counts - 1) / 2  # average 1-based rank of each tied group
    rank_sum = (mid_rank[group] * t.flatten()[order]).sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mmd_hamming(
    graphs_p: Tensor,
    graphs_q: Tensor,
    weights_p: Tensor | None = None,
    weights_q: Tensor | None = None,
    squared: bool = True,
) -> float:
    """MMD^2 between two weighted distributions over graphs with [BayesDAG]'s Hamming kernel 1 - H(G, G') / d^2.

    It is the exact weighted V-statistic (built from sums w_i w_j k(G_i, G_j)), zero for equal distributions.
    With k(a, b) = (1/d^2) sum_e [a_e b_e + (1 - a_e)(1 - b_e)], a linear kernel on the features (a, 1 - a), the
    mean embeddings are the edge probabilities and MMD^2 = (2/d^2) sum_e (P_e - Q_e)^2 exactly: computed that way
    in O(S d^2), with no pairwise matrix. Hence this kernel sees only the edge marginals (two posteriors with the
    same marginals have MMD 0). H runs over all d^2 entries as in the paper and its code (the diagonal is zero for
    DAGs). ``squared=False`` returns MMD, the scale the BayesDAG code reports (its ``mmd_true_posterior`` returns the
    square root of a U-statistic over S draws from the exact posterior, not this exact value).
    """
    p = _graphs(graphs_p, "graphs_p")
    q = _graphs(graphs_q, "graphs_q").to(p.device)
    if p.shape[1:] != q.shape[1:]:
        raise ValueError(f"graphs_p and graphs_q must have the same d, got {tuple(p.shape)} and {tuple(q.shape)}")
    d = p.shape[-1]
    wp = _weights(weights_p, p.shape[0], p.device, "weights_p")
    wq = _weights(weights_q, q.shape[0], p.device, "weights_q")
    mmd2 = float(2.0 / d**2 * ((_edge_probs(p, wp) - _edge_probs(q, wq)) ** 2).sum())
    return mmd2 if squared else mmd2**0.5


def dag_metrics(graphs: Tensor, truth: Tensor, weights: Tensor | None = None) -> dict[str, float]:
    """All metrics against the truth in one call: edge_f1, shd, expected_shd, brier, auroc, edge_auroc."""
    return {
        "edge_f1": edge_f1(graphs, truth, weights),
        "shd": shd(graphs, truth, weights),
        "expected_shd": expected_shd(graphs, truth, weights),
        "brier": brier(graphs, truth, weights),
        "auroc": auroc(graphs, truth, weights),
        "edge_auroc": edge_probability_auroc(graphs, truth, weights),
    }
