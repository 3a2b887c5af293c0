"""Per-group masked means and covariances: one matrix product per group where groups are few, else one vectorised
pass over rows."""

from __future__ import annotations

import math

import torch
from torch import Tensor

ROW_CHUNK = 8192
#: Up to this many groups the moments are one matrix product per group (rows sorted by group); beyond, the rows'
#: outer products are summed into the groups in chunks, which materialises [chunk, D, D] and is far slower per row.
MAX_MATMUL_GROUPS = 256


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
    if num_groups <= MAX_MATMUL_GROUPS:
        return _moments_by_matmul(group, x, mask, num_groups)
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


def _moments_by_matmul(group: Tensor, x: Tensor, mask: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`grouped_moments` with the rows sorted by group and each group's sums as matrix products."""
    dim = x.shape[-1]
    order = torch.argsort(group, stable=True)
    sizes = torch.bincount(group, minlength=num_groups).tolist()
    a = mask.index_select(0, order).to(x.dtype)
    xa = torch.where(mask, x, torch.zeros_like(x)).index_select(0, order)
    count = x.new_zeros(num_groups, dim, dim)
    mean = x.new_zeros(num_groups, dim)
    second = x.new_zeros(num_groups, dim, dim)
    start = 0
    for g, size in enumerate(sizes):
        if size:
            rows = slice(start, start + size)
            a_g, x_g = a[rows], xa[rows]
            count[g] = a_g.T @ a_g
            mean[g] = x_g.sum(0) / torch.diagonal(count[g]).clamp_min(1)
            centred = (x_g - mean[g]) * a_g
            second[g] = centred.T @ centred
        start += size
    return count, mean, second / count.clamp_min(1)


def shrunk_covariances(count: Tensor, cov: Tensor, prior_weight: float) -> Tensor:
    """Per-group covariances with variances shrunk towards pooled ones and correlations towards zero.

    With ``n`` a group's pair counts and ``w = prior_weight``: variance ``(n var_g + w v) / (n + w)``, ``v``
    the count-weighted pooled within-group variance of the coordinate (the others' mean, or 1, where no
    group saw it or it never moved); correlation ``n / (n + w)`` times the group's own. Shrinking the
    scales and the correlations separately keeps a well-sampled group's small conditional variances
    (strong correlations at a scale far below the pooled one) instead of inflating them. When a group's
    rows share one active set (groups are models), its own correlation matrix is PSD, so the result
    ``D (n/(n+w) R + w/(n+w) I) D`` is positive definite by construction; groups mixing active sets may
    still need :func:`ridged_cholesky`.
    """
    variance = torch.diagonal(cov, dim1=-2, dim2=-1)
    seen = torch.diagonal(count, dim1=-2, dim2=-1)
    total = seen.sum(0)
    pooled = (seen * variance).sum(0) / total.clamp_min(1)
    usable = (total > 0) & (pooled > 0)
    fallback = pooled[usable].mean() if bool(usable.any()) else torch.ones((), dtype=cov.dtype, device=cov.device)
    pooled = torch.where(usable, pooled, fallback)
    scale = ((seen * variance + prior_weight * pooled) / (seen + prior_weight)).sqrt()
    own_sd = variance.clamp_min(0).sqrt()
    denom = own_sd[..., :, None] * own_sd[..., None, :]
    # A coordinate with no spread has zero covariance with every other: it contributes no correlation.
    corr = torch.where(denom > 0, cov / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(cov))
    corr = count / (count + prior_weight) * corr.clamp(-1.0, 1.0)
    eye = torch.eye(cov.shape[-1], dtype=torch.bool, device=cov.device)
    corr = torch.where(eye, torch.ones_like(corr), corr)
    return scale[..., :, None] * corr * scale[..., None, :]


RIDGES = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4)


def ridged_cholesky(cov: Tensor, active: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Cholesky factors of a batch ``[..., D, D]``, ridging only the matrices that are not positive definite.

    A failing matrix gets ``r * diag(d)`` added, ``d`` its own diagonal on its ``active [..., D]`` coordinates
    (all when None; inactive ones get no ridge), with ``r`` escalating per matrix through :data:`RIDGES`.
    A matrix that still fails is replaced by ``diag(d)``. Returns the factors and the ``r`` each matrix
    needed (0 where none; ``inf`` where it fell back to the diagonal).
    """
    chol, info = torch.linalg.cholesky_ex(cov)
    ridge = torch.zeros(cov.shape[:-2], dtype=cov.dtype, device=cov.device)
    failed = info > 0
    if not bool(failed.any()):
        return chol, ridge
    dim = cov.shape[-1]
    diag = torch.diagonal(cov, dim1=-2, dim2=-1)
    act = torch.ones_like(diag, dtype=torch.bool) if active is None else active.to(cov.device).expand_as(diag)
    positive = act & (diag > 0)
    mean = torch.where(positive, diag, torch.zeros_like(diag)).sum(-1) / positive.sum(-1).clamp_min(1)
    mean = torch.where(mean > 0, mean, torch.ones_like(mean))
    # Never scale by a non-positive variance: floor it at machine precision of the matrix's own scale.
    scale = torch.maximum(diag, torch.finfo(cov.dtype).eps * mean[..., None])
    scale = torch.where(act, scale, torch.zeros_like(scale))
    chol, ridge, failed = chol.reshape(-1, dim, dim).clone(), ridge.reshape(-1), failed.reshape(-1)
    flat_cov, flat_scale = cov.reshape(-1, dim, dim), scale.reshape(-1, dim)
    for r in RIDGES:
        idx = failed.nonzero().flatten()
        if idx.numel() == 0:
            break
        attempt, info = torch.linalg.cholesky_ex(flat_cov[idx] + torch.diag_embed(r * flat_scale[idx]))
        ok = info == 0
        chol[idx[ok]] = attempt[ok]
        ridge[idx[ok]] = r
        failed[idx[ok]] = False
    idx = failed.nonzero().flatten()
    if idx.numel() > 0:
        # Inactive coordinates keep their unit diagonal here so the factor stays invertible.
        fallback = torch.where(flat_scale[idx] > 0, flat_scale[idx], torch.ones_like(flat_scale[idx]))
        chol[idx] = torch.diag_embed(fallback.sqrt())
        ridge[idx] = math.inf
    return chol.reshape(cov.shape), ridge.reshape(cov.shape[:-2])


def safe_cholesky(cov: Tensor, active: Tensor | None = None) -> Tensor:
    """Cholesky factors of a batch of covariances, ridging only those that fail (see :func:`ridged_cholesky`)."""
    return ridged_cholesky(cov, active)[0]


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
