"""Per-group masked means and covariances, computed in one vectorised pass over rows."""

from __future__ import annotations

import torch
from torch import Tensor

ROW_CHUNK = 8192


def grouped_moments(group: Tensor, x: Tensor, mask: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Masked first and second moments of ``x`` per group.

    Coordinate ``i`` of row ``n`` counts only where ``mask[n, i]``; the
    covariance of ``(i, j)`` uses rows where both are active.

    Args:
        group: int64 ``[N]`` group of each row, in ``[0, num_groups)``.
        x: float ``[N, D]`` values.
        mask: bool ``[N, D]`` active coordinates.
        num_groups: number of groups G.

    Returns:
        ``pair_count [G, D, D]`` (rows where i and j are both active),
        ``mean [G, D]`` and ``cov [G, D, D]`` (population covariance; zero where
        a pair was never active together).
    """
    dim = x.shape[-1]
    a = mask.to(x.dtype)
    xa = torch.where(mask, x, torch.zeros_like(x))
    count = torch.zeros(num_groups, dim, dim, dtype=x.dtype, device=x.device)
    total = torch.zeros(num_groups, dim, dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[0], ROW_CHUNK):
        sl = slice(s, s + ROW_CHUNK)
        count.index_add_(0, group[sl], a[sl, :, None] * a[sl, None, :])
        total.index_add_(0, group[sl], xa[sl])
    diag = torch.diagonal(count, dim1=-2, dim2=-1)
    mean = total / diag.clamp_min(1)
    second = torch.zeros(num_groups, dim, dim, dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[0], ROW_CHUNK):
        sl = slice(s, s + ROW_CHUNK)
        centred = torch.where(mask[sl], x[sl] - mean[group[sl]], torch.zeros_like(x[sl]))
        second.index_add_(0, group[sl], centred[:, :, None] * centred[:, None, :])
    cov = second / count.clamp_min(1)
    return count, mean, cov


def shrunk_covariances(count: Tensor, cov: Tensor, prior_weight: float) -> Tensor:
    """Per-group covariances shrunk towards the pooled covariance, made positive definite.

    Each group's covariance is ``(n cov_g + w cov_pooled) / (n + w)`` with ``n``
    its pair counts and ``w = prior_weight``; coordinates a group never saw get
    the pooled variance (or 1 if nobody saw them). A small ridge keeps every
    matrix positive definite.
    """
    dim = cov.shape[-1]
    eye = torch.eye(dim, dtype=cov.dtype, device=cov.device)
    pooled_count = count.sum(0)
    pooled = (count * cov).sum(0) / pooled_count.clamp_min(1)
    # Pair (i, j) never seen together anywhere: no information, use independence.
    unseen_var = torch.diagonal(pooled_count) == 0
    pooled = torch.where(pooled_count > 0, pooled, torch.zeros_like(pooled))
    pooled = pooled + torch.diag(unseen_var.to(cov.dtype))
    out = (count * cov + prior_weight * pooled) / (count + prior_weight)
    scale = torch.diagonal(out, dim1=-2, dim2=-1).mean(-1).clamp_min(1e-12)
    return out + 1e-9 * scale[:, None, None] * eye


def safe_cholesky(cov: Tensor) -> Tensor:
    """Cholesky factors of a batch of covariances, adding ridge where a matrix is not positive definite."""
    chol, info = torch.linalg.cholesky_ex(cov)
    if bool((info > 0).any()):
        eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
        scale = torch.diagonal(cov, dim1=-2, dim2=-1).abs().mean(-1).clamp_min(1e-12)
        for ridge in (1e-8, 1e-6, 1e-4, 1e-2, 1.0):
            chol, info = torch.linalg.cholesky_ex(cov + ridge * scale[:, None, None] * eye)
            if not bool((info > 0).any()):
                break
    return chol


def grouped_diagonal_moments(group: Tensor, x: Tensor, mask: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group masked counts, means and variances of each coordinate, ``[G, D]`` each (O(G D) memory)."""
    a = mask.to(x.dtype)
    xa = torch.where(mask, x, torch.zeros_like(x))
    zeros = torch.zeros(num_groups, x.shape[-1], dtype=x.dtype, device=x.device)
    count = zeros.index_add(0, group, a)
    mean = zeros.index_add(0, group, xa) / count.clamp_min(1)
    centred = torch.where(mask, x - mean.index_select(0, group), torch.zeros_like(x))
    var = zeros.index_add(0, group, centred * centred) / count.clamp_min(1)
    return count, mean, var


def shrink_to_pooled(count: Tensor, value: Tensor, prior_weight: float, default: float) -> Tensor:
    """Per-group values ``[G, D]`` shrunk towards their count-weighted pooled value: ``(n v_g + w v) / (n + w)``.

    Coordinates that no group saw take ``default``.
    """
    total = count.sum(0)
    pooled = torch.where(total > 0, (count * value).sum(0) / total.clamp_min(1), torch.full_like(total, default))
    return (count * value + prior_weight * pooled) / (count + prior_weight)
