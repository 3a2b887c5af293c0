"""BGe marginal likelihood of linear-Gaussian DAGs as a [d, 2^d] table of local scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor


def _logdet_spd(matrix: Tensor) -> Tensor:
    """log det of symmetric positive-definite matrices ``[..., k, k]`` via Cholesky."""
    chol = torch.linalg.cholesky(matrix)
    return 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)


@dataclass(frozen=True)
class BGe:
    """BGe marginal likelihood of linear-Gaussian DAGs (Geiger & Heckerman 2002; Kuipers et al. 2014)."""

    data: Tensor  # [N, d] float64
    alpha_mu: float = 1.0
    alpha_w: float | None = None  # None: d + 2
    nu: Tensor | None = None  # None: zeros

    def __post_init__(self) -> None:
        data = self.data
        if not isinstance(data, Tensor) or data.dim() != 2 or not data.is_floating_point():
            raise ValueError("BGe: data must be a 2-D floating-point tensor [N, d] with N >= 1 and d >= 1")
        if data.shape[0] < 1 or data.shape[1] < 1:
            raise ValueError(f"BGe: data must have N >= 1 rows and d >= 1 columns, got shape {tuple(data.shape)}")
        if not bool(torch.isfinite(data).all()):
            raise ValueError("BGe: data must be finite (no NaN or inf)")
        d = data.shape[1]
        if not self.alpha_mu > 0:
            raise ValueError(f"BGe: alpha_mu must be > 0, got {self.alpha_mu}")
        alpha_w = float(d + 2) if self.alpha_w is None else float(self.alpha_w)
        if not alpha_w > d + 1:
            raise ValueError(f"BGe: alpha_w must be > d + 1 = {d + 1}, got {alpha_w}")
        nu = torch.zeros(d, dtype=torch.float64) if self.nu is None else torch.as_tensor(self.nu, dtype=torch.float64)
        if nu.shape != (d,):
            raise ValueError(f"BGe: nu must have length d = {d}, got shape {tuple(nu.shape)}")
        if not bool(torch.isfinite(nu).all()):
            raise ValueError("BGe: nu must be finite")
        object.__setattr__(self, "data", data.detach().to(device="cpu", dtype=torch.float64))
        object.__setattr__(self, "alpha_mu", float(self.alpha_mu))
        object.__setattr__(self, "alpha_w", alpha_w)
        object.__setattr__(self, "nu", nu.cpu())

    @property
    def num_nodes(self) -> int:
        """Number of variables d."""
        return self.data.shape[1]

    @cached_property
    def _t(self) -> float:
        d = self.num_nodes
        return self.alpha_mu * (self.alpha_w - d - 1) / (self.alpha_mu + 1)

    @cached_property
    def _r(self) -> Tensor:
        """Posterior scale matrix R = T + S_N + (N alpha_mu / (N + alpha_mu)) (xbar - nu)(xbar - nu)^T."""
        n, d = self.data.shape
        xbar = self.data.mean(0)
        centred = self.data - xbar
        s_n = centred.T @ centred
        diff = (xbar - self.nu).unsqueeze(-1)
        shrink = n * self.alpha_mu / (n + self.alpha_mu)
        r = self._t * torch.eye(d, dtype=torch.float64) + s_n + shrink * diff @ diff.T
        return 0.5 * (r + r.T)

    def _constant(self, num_parents: int) -> float:
        """The terms of the local score that depend on the parent count only."""
        n, d = self.data.shape
        a_w, a_mu, k = self.alpha_w, self.alpha_mu, num_parents
        return (
            0.5 * (math.log(a_mu) - math.log(n + a_mu))
            + math.lgamma(0.5 * (n + a_w - d + k + 1))
            - math.lgamma(0.5 * (a_w - d + k + 1))
            - 0.5 * n * math.log(math.pi)
            + 0.5 * (a_w - d + 2 * k + 1) * math.log(self._t)
        )

    def local_score(self, node: int, parents: Sequence[int]) -> float:
        """log p(D_j | D_Pa) of node ``node`` given the parent set ``parents``."""
        d = self.num_nodes
        pa = sorted(int(p) for p in parents)
        if not 0 <= node < d:
            raise ValueError(f"BGe: node must lie in [0, {d - 1}], got {node}")
        if len(set(pa)) != len(pa) or any(not 0 <= p < d or p == node for p in pa):
            raise ValueError(f"BGe: parents must be distinct nodes in [0, {d - 1}] other than {node}, got {parents}")
        n, k = self.data.shape[0], len(pa)
        r = self._r
        family = torch.tensor([*pa, node])
        score = self._constant(k)
        score -= 0.5 * (n + self.alpha_w - d + k + 1) * float(_logdet_spd(r[family][:, family]))
        if k > 0:
            idx = torch.tensor(pa)
            score += 0.5 * (n + self.alpha_w - d + k) * float(_logdet_spd(r[idx][:, idx]))
        return score

    @cached_property
    def _table(self) -> Tensor:
        d, n = self.num_nodes, self.data.shape[0]
        masks = torch.arange(2**d)
        members = (masks.unsqueeze(-1) >> torch.arange(d)) & 1 == 1  # [2^d, d]
        sizes = members.sum(-1)
        # log det R[S, S] for every subset S (0 for the empty set), one batched Cholesky per size.
        logdet = torch.zeros(2**d, dtype=torch.float64)
        for k in range(1, d + 1):
            sel = masks[sizes == k]
            idx = torch.stack([members[m].nonzero().squeeze(-1) for m in sel.tolist()])  # [m, k]
            logdet[sel] = _logdet_spd(self._r[idx.unsqueeze(-1), idx.unsqueeze(-2)])
        consts = torch.tensor([self._constant(k) for k in range(d + 1)], dtype=torch.float64)
        table = torch.full((d, 2**d), -math.inf, dtype=torch.float64)
        for j in range(d):
            free = masks[~members[:, j]]
            size = sizes[free].to(torch.float64)
            table[j, free] = (
                consts[sizes[free]]
                + 0.5 * (n + self.alpha_w - d + size) * logdet[free]
                - 0.5 * (n + self.alpha_w - d + size + 1) * logdet[free | (1 << j)]
            )
        return table

    def local_score_table(self) -> Tensor:
        """[d, 2^d] float64: log p(D_j | D_Pa) for every node j and parent-set bitmask (-inf where bit j is set)."""
        return self._table

    def log_marginal_likelihood(self, adjacency: Tensor) -> Tensor:
        """log p(D | G) for one [d, d] or a batch [n, d, d] of 0/1 adjacencies (a[i, j] = 1: i -> j), by lookup."""
        d = self.num_nodes
        if adjacency.dim() not in (2, 3) or adjacency.shape[-2:] != (d, d):
            shape = tuple(adjacency.shape)
            raise ValueError(f"BGe: adjacency must have shape [{d}, {d}] or [n, {d}, {d}], got {shape}")
        table = self._table.to(adjacency.device)
        weights = 1 << torch.arange(d, device=adjacency.device)
        masks = ((adjacency != 0).to(torch.int64) * weights.unsqueeze(-1)).sum(-2)  # [..., d]: parents of node j
        return table[torch.arange(d, device=adjacency.device), masks].sum(-1)
