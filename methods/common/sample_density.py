"""A density q(m, theta_m) fitted to transdimensional draws, for methods that only sample.

q(m) is the method's own model-probability estimate and q(theta_m | m) a
Gaussian with the per-model moments of the draws (variances shrunk towards the
pooled per-coordinate variances and correlations towards zero when a model has
few draws). It lets the suite score sample-only methods by cross-entropy; it
is a density *of the draws*, so its quality reflects both the sampler and the Gaussian shape assumption.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from methods.common.moments import grouped_moments, ridged_cholesky, shrunk_covariances
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.types import Draws, ModelProbs

EVAL_CHUNK = 8192


def lookup_log_probs(model_probs: ModelProbs, model_index: Tensor, dtype: torch.dtype) -> Tensor:
    """log q(m) for each entry of ``model_index`` (``-inf`` for models not listed or with zero mass)."""
    sorted_index, order = model_probs.index.to(model_index.device).sort()
    prob = model_probs.prob.to(model_index.device, dtype)[order]
    pos = torch.searchsorted(sorted_index, model_index).clamp_max(sorted_index.numel() - 1)
    p = torch.where(sorted_index[pos] == model_index, prob[pos], torch.zeros_like(prob[pos]))
    return torch.where(p > 0, p.log(), torch.full_like(p, -math.inf))


class GaussianPerModelDensity:
    """log q(m, theta_m) = log q(m) + log N(theta_m; mean_m, L_m L_m^T), callable as a ``LogDensityFn``.

    Models with draws have their own fitted Gaussian. A model that q gives mass but that has no draws (a sampler
    visited it between the kept iterations) gets the diagonal Gaussian of all draws' moments on its active
    coordinates, so that the density is positive wherever q(m) is. ``num_ridged`` counts the fitted
    covariances that needed a ridge to be positive definite.
    """

    def __init__(
        self,
        fitted: tuple[Tensor, Tensor, Tensor, Tensor],
        model_probs: ModelProbs,
        mask: Callable[[Tensor], Tensor],
        fallback: tuple[Tensor, Tensor],
        num_ridged: int,
    ) -> None:
        self.visited, self.active, self.mean, self.chol = fitted
        self.model_probs, self.mask = model_probs, mask
        self.fallback_mean, self.fallback_var = fallback
        self.half_log_det = torch.log(torch.diagonal(self.chol, dim1=-2, dim2=-1)).sum(-1)
        self.dims = self.active.sum(-1).to(self.mean.dtype)
        self.num_ridged = num_ridged

    def __call__(self, model_index: Tensor, x: Tensor) -> Tensor:
        """log q(m, theta_m) of each row, ``-inf`` for models with zero mass."""
        out = []
        for s in range(0, x.shape[0], EVAL_CHUNK):
            m, xs = model_index[s : s + EVAL_CHUNK], x[s : s + EVAL_CHUNK].to(self.mean.dtype)
            slot = torch.searchsorted(self.visited, m).clamp_max(self.visited.numel() - 1)
            known = self.visited[slot] == m
            centred = torch.where(self.active[slot], xs - self.mean[slot], torch.zeros_like(xs))
            white = torch.linalg.solve_triangular(self.chol[slot], centred.unsqueeze(-1), upper=False).squeeze(-1)
            fitted = -0.5 * (white * white).sum(-1) - self.half_log_det[slot] - self.dims[slot] * LOG_SQRT_2PI
            if not bool(known.all()):
                fitted = torch.where(known, fitted, self._fallback_log_prob(m, xs))
            out.append(lookup_log_probs(self.model_probs, m, self.mean.dtype) + fitted)
        return torch.cat(out)

    def _fallback_log_prob(self, model_index: Tensor, x: Tensor) -> Tensor:
        """log N(theta_m; pooled mean, diag(pooled variance)) on each row's active coordinates."""
        active = self.mask(model_index)
        z = (x - self.fallback_mean) / self.fallback_var.sqrt()
        terms = -0.5 * z * z - 0.5 * self.fallback_var.log() - LOG_SQRT_2PI
        return torch.where(active, terms, torch.zeros_like(terms)).sum(-1)


def fit_gaussian_per_model(problem: Problem, draws: Draws, model_probs: ModelProbs) -> GaussianPerModelDensity:
    """Fit q(theta_m | m) = N(mean_m, cov_m) per visited model and return log q(m, theta_m).

    Each model's covariance of its active block is shrunk as in :func:`shrunk_covariances` (positive
    definite by construction); ``num_ridged`` on the result counts any that still needed a ridge.
    Models with zero probability get ``-inf``; models with probability but no draws get a pooled diagonal
    Gaussian (see :class:`GaussianPerModelDensity`).
    """
    theta = draws.theta
    dim = theta.shape[-1]
    visited, group = torch.unique(draws.model_index, return_inverse=True)
    draw_mask = problem.mask(draws.model_index)
    count, mean, cov = grouped_moments(group, theta, draw_mask, visited.numel())
    cov = shrunk_covariances(count, cov, prior_weight=float(dim + 2))
    # Decouple inactive coordinates (identity there) so that the Cholesky factor's
    # active block is the factor of the active covariance, whatever the coordinate order.
    active = problem.mask(visited)
    pair = active[:, :, None] & active[:, None, :]
    eye = torch.eye(dim, dtype=theta.dtype, device=theta.device)
    chol, ridge = ridged_cholesky(torch.where(pair, cov, eye), active)
    everything = torch.zeros(len(draws), dtype=torch.int64, device=theta.device)
    _, pooled_mean, pooled_cov = grouped_moments(everything, theta, draw_mask, 1)
    pooled_var = torch.diagonal(pooled_cov[0])
    pooled_var = torch.where(pooled_var > 0, pooled_var, torch.ones_like(pooled_var))
    return GaussianPerModelDensity(
        (visited, active, mean, chol), model_probs, problem.mask, (pooled_mean[0], pooled_var), int((ridge > 0).sum())
    )
