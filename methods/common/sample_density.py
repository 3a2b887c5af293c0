"""A density q(m, theta_m) fitted to transdimensional draws, for methods that only sample.

q(m) is the method's own model-probability estimate and q(theta_m | m) a
Gaussian with the per-model moments of the draws (shrunk towards the pooled
moments when a model has few draws). It lets the suite score sample-only
methods by cross-entropy; it is a density *of the draws*, so its quality
reflects both the sampler and the Gaussian shape assumption.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from methods.common.moments import grouped_moments, safe_cholesky, shrunk_covariances
from suite.method import LogDensityFn
from suite.problem import LOG_SQRT_2PI, Problem
from suite.types import Draws, ModelProbs

EVAL_CHUNK = 8192


def lookup_log_probs(model_probs: ModelProbs, model_index: Tensor, dtype: torch.dtype) -> Tensor:
    """log q(m) for each entry of ``model_index`` (``-inf`` for models not listed or with zero mass)."""
    sorted_index, order = model_probs.index.to(model_index.device).sort()
    prob = model_probs.prob.to(model_index.device, dtype)[order]
    pos = torch.searchsorted(sorted_index, model_index).clamp_max(sorted_index.numel() - 1)
    p = torch.where(sorted_index[pos] == model_index, prob[pos], torch.zeros_like(prob[pos]))
    return torch.where(p > 0, p.log(), torch.full_like(p, -math.inf))


def fit_gaussian_per_model(problem: Problem, draws: Draws, model_probs: ModelProbs) -> LogDensityFn:
    """Fit q(theta_m | m) = N(mean_m, cov_m) per visited model and return log q(m, theta_m).

    Models never visited (or with probability zero) get ``-inf``.
    """
    theta = draws.theta
    dim = theta.shape[-1]
    visited, group = torch.unique(draws.model_index, return_inverse=True)
    count, mean, cov = grouped_moments(group, theta, problem.mask(draws.model_index), visited.numel())
    cov = shrunk_covariances(count, cov, prior_weight=float(dim + 2))
    # Decouple inactive coordinates (identity there) so that the Cholesky factor's
    # active block is the factor of the active covariance, whatever the coordinate order.
    active = problem.mask(visited)
    pair = active[:, :, None] & active[:, None, :]
    eye = torch.eye(dim, dtype=theta.dtype, device=theta.device)
    chol = safe_cholesky(torch.where(pair, cov, eye))
    half_log_det = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    log_prob = lookup_log_probs(model_probs, visited, theta.dtype)
    dims = active.sum(-1).to(theta.dtype)

    def log_density(model_index: Tensor, x: Tensor) -> Tensor:
        out = []
        for s in range(0, x.shape[0], EVAL_CHUNK):
            m, xs = model_index[s : s + EVAL_CHUNK], x[s : s + EVAL_CHUNK].to(theta.dtype)
            slot = torch.searchsorted(visited, m).clamp_max(visited.numel() - 1)
            known = visited[slot] == m
            centred = torch.where(active[slot], xs - mean[slot], torch.zeros_like(xs))
            white = torch.linalg.solve_triangular(chol[slot], centred.unsqueeze(-1), upper=False).squeeze(-1)
            log_q = log_prob[slot] - 0.5 * (white * white).sum(-1) - half_log_det[slot] - dims[slot] * LOG_SQRT_2PI
            out.append(torch.where(known, log_q, torch.full_like(log_q, -math.inf)))
        return torch.cat(out)

    return log_density
