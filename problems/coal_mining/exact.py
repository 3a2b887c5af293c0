"""Exact p(k | y) of the coal-mining change-point model by a forward recursion over a fine time grid.

Contract: for event times ``events`` on [0, L] (sorted), the model of :mod:`problems.coal_mining.problem` (k change
points; gap proportions ~ Dirichlet(2, ..., 2), i.e. the even order statistics of 2k + 1 uniforms, Green 1995
sec. 4; heights iid Gamma(alpha, beta)) has, with the heights integrated out (Gamma-Poisson conjugacy),

    p(y | k) = (2k+1)! int_{0 < s_1 < ... < s_k < L} prod_{j=0}^{k} (l_j / L) m(n_j, l_j) ds / L^k,
    m(n, l) = beta^alpha Gamma(alpha + n) / (Gamma(alpha) (beta + l)^(alpha + n)),

where segment j = [s_j, s_{j+1}) has length l_j and holds n_j events. The position prior and the marginal
likelihood factorise over segments, so the k-fold integral is a chain: a forward recursion over grid cells (the
segment factorisation of Fearnhead 2006). Every event time is a cell boundary and each change point sits at its
cell's midpoint, so the rule is second order: halving every cell shrinks the error about fourfold, which
:func:`refined_model_probs` uses for a Richardson extrapolation and an error estimate.

Everything is float64 on the CPU. A reference potential (the homogeneous Poisson log likelihood at the mean rate)
is taken out of every segment, and the largest entry out of the step matrix, whose entries then span about e^-36
to 1 on the default grids, so the recursion runs as plain matrix-vector products with one rescaling per step.
Details: docs/problems.md, "coal-mining: Green (1995)'s coal-mining disasters change points" ("Exact answer").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def segment_log_marginal(count: Tensor, length: Tensor, alpha: float, beta: float) -> Tensor:
    """log m(n, l) = log int h^n e^{-h l} Gamma(h; alpha, beta) dh (Gamma-Poisson conjugacy)."""
    return (
        alpha * math.log(beta)
        - math.lgamma(alpha)
        + torch.lgamma(alpha + count)
        - (alpha + count) * torch.log(beta + length)
    )


def make_grid(events: Tensor, length: float, num_cells: int, refine: int = 0) -> Tensor:
    """Cell boundaries [N + 1]: ``num_cells`` equal cells and every event time, each cell then split in 2^refine."""
    if num_cells < 1 or refine < 0:
        raise ValueError(f"need num_cells >= 1 and refine >= 0; got {num_cells}, {refine}")
    uniform = torch.linspace(0.0, length, num_cells + 1, dtype=torch.float64)
    inside = events[(events > 0) & (events < length)].to(torch.float64)
    base = torch.unique(torch.cat([uniform, inside]))  # sorted
    parts = 2**refine
    steps = torch.arange(parts, dtype=torch.float64) / parts
    fine = base[:-1, None] + (base[1:] - base[:-1])[:, None] * steps
    return torch.cat([fine.reshape(-1), base[-1:]])


@dataclass(frozen=True)
class GridRecursion:
    """Forward messages of the recursion on one grid, enough for p(k | y) and for exact-on-the-grid draws.

    Nodes are 0 (the start), the N cell midpoints, and L (the end). ``log_step[i, j]`` is the log weight of a
    segment from node i to node j (prior gap factor, marginal likelihood, cell width of j; -inf unless i < j);
    ``log_forward[k - 1, c]`` the log total weight of all placements of k change points whose last is in cell c.
    """

    boundaries: Tensor  # [N + 1]
    nodes: Tensor  # [N + 2]
    log_step: Tensor  # [N + 2, N + 2]
    log_forward: Tensor  # [k_max, N]
    log_evidence: Tensor  # [k_max + 1]: log p(y | k), k = 0..k_max

    @property
    def num_cells(self) -> int:
        """N, the number of cells."""
        return len(self.boundaries) - 1


def run_recursion(
    events: Tensor, length: float, alpha: float, beta: float, k_max: int, boundaries: Tensor
) -> GridRecursion:
    """The forward recursion on the cells ``boundaries`` (whose set must contain every event time in (0, L))."""
    events = events.to(torch.float64)
    mids = 0.5 * (boundaries[1:] + boundaries[:-1])
    widths = boundaries[1:] - boundaries[:-1]
    nodes = torch.cat([mids.new_zeros(1), mids, mids.new_full((1,), length)])
    cum = torch.searchsorted(events, nodes, right=False).to(torch.float64)  # events before each node
    cum[-1] = len(events)
    span = nodes[None, :] - nodes[:, None]
    count = cum[None, :] - cum[:, None]
    upper = span > 0
    safe_span = torch.where(upper, span, 1.0)
    safe_count = torch.where(upper, count, 0.0)
    rate = len(events) / length  # reference potential: homogeneous Poisson at the mean rate
    log_seg = (
        torch.log(safe_span / length)
        + segment_log_marginal(safe_count, safe_span, alpha, beta)
        - (safe_count * math.log(rate) - rate * safe_span)
    )
    log_cell = torch.cat([mids.new_zeros(1), torch.log(widths / length), mids.new_zeros(1)])
    log_step = torch.where(upper, log_seg + log_cell[None, :], -math.inf)
    inner = log_step[1:-1, 1:-1]
    inner_max = float(inner[torch.isfinite(inner)].max()) if inner.numel() > 1 else 0.0
    step = torch.exp(inner - inner_max)  # [N, N] strictly upper-triangular
    potential = len(events) * math.log(rate) - rate * length
    log_forward = torch.empty(k_max, len(mids), dtype=torch.float64)
    log_evidence = torch.empty(k_max + 1, dtype=torch.float64)
    log_evidence[0] = log_step[0, -1] + potential
    message = log_step[0, 1:-1]  # one change point, in each cell
    for k in range(1, k_max + 1):
        if k > 1:
            scale = float(log_forward[k - 2].max())
            message = torch.log(torch.exp(log_forward[k - 2] - scale) @ step) + scale + inner_max
        log_forward[k - 1] = message
        log_evidence[k] = torch.logsumexp(message + log_step[1:-1, -1], 0) + math.lgamma(2 * k + 2) + potential
    return GridRecursion(boundaries, nodes, log_step, log_forward, log_evidence)


def log_model_probs(log_evidence: Tensor, log_prior: Tensor) -> Tensor:
    """log p(k | y) from log p(y | k) and log p(k)."""
    joint = log_evidence + log_prior
    return joint - torch.logsumexp(joint, -1, keepdim=True)


@dataclass(frozen=True)
class Refinement:
    """p(k | y) on grids h, h/2, h/4, its Richardson extrapolation and the estimated error of that."""

    log_evidence: Tensor  # [3, k_max + 1]: log p(y | k) on the grids h, h/2, h/4
    probs: Tensor  # [3, k_max + 1]: p(k | y) on the same grids
    extrapolated: Tensor  # [k_max + 1]: P(h/4) + (P(h/4) - P(h/2)) / 3
    error: Tensor  # [k_max + 1]: |extrapolated - Richardson from (h, h/2)|, a conservative error bar
    observed_order: float  # log2 of the ratio of successive differences (2 for a second-order rule)
    finest: GridRecursion


def refined_model_probs(
    events: Tensor, length: float, alpha: float, beta: float, k_max: int, log_prior: Tensor, num_cells: int
) -> Refinement:
    """p(k | y) on three nested grids (every cell halved twice), Richardson-extrapolated, with an error estimate."""
    evidences, last = [], None
    for refine in range(3):
        last = run_recursion(events, length, alpha, beta, k_max, make_grid(events, length, num_cells, refine))
        evidences.append(last.log_evidence)
    log_evidence = torch.stack(evidences)
    p = log_model_probs(log_evidence, log_prior[None, :]).exp()
    coarse = p[1] + (p[1] - p[0]) / 3.0
    fine = p[2] + (p[2] - p[1]) / 3.0
    big = p[0] > 1e-4
    ratio = ((p[1] - p[0]).abs()[big].sum() / (p[2] - p[1]).abs()[big].sum().clamp_min(1e-300)).item()
    return Refinement(log_evidence, p, fine, (fine - coarse).abs(), math.log2(ratio), last)


def sample_change_cells(recursion: GridRecursion, num_changes: Tensor, generator: torch.Generator) -> Tensor:
    """Cells of the change points, drawn backward given k: int64 [D, k_max], -1 beyond each draw's k.

    Change point j lies in cell c with probability proportional to forward_j(c) step(c, next), ``next`` the cell
    of change point j + 1 (or L). Draws that share ``next`` share one table: the tables of the distinct ``next``
    are stacked with group g's CDF shifted to [g, g + 1], so one searchsorted of g + U(0, 1) serves every draw.
    """
    num_draws, k_max, cells_total = len(num_changes), recursion.log_forward.shape[0], recursion.num_cells
    cells = torch.full((num_draws, k_max), -1, dtype=torch.int64)
    nxt = torch.full((num_draws,), cells_total, dtype=torch.int64)  # the segment's end: a cell, or L
    incoming = recursion.log_step[1:-1, 1:].T.contiguous()  # [N + 1, N]: log step from cell c to node next
    for j in range(k_max, 0, -1):
        rows = torch.nonzero(num_changes >= j).flatten()
        if len(rows) == 0:
            continue
        distinct, group = torch.unique(nxt[rows], return_inverse=True)
        logits = recursion.log_forward[j - 1][None, :] + incoming.index_select(0, distinct)
        prob = torch.exp(logits - logits.max(-1, keepdim=True).values)
        cdf = torch.cumsum(prob / prob.sum(-1, keepdim=True), -1)
        cdf[:, -1] = 1.0
        offset = torch.arange(len(distinct), dtype=torch.float64)
        target = group.to(torch.float64) + torch.rand(len(rows), generator=generator, dtype=torch.float64)
        flat = torch.searchsorted((cdf + offset[:, None]).reshape(-1), target)
        picked = (flat - group * cells_total).clamp(0, cells_total - 1)
        cells[rows, j - 1] = picked
        nxt[rows] = picked
    return cells
