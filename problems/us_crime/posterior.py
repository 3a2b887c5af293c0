"""Exact posterior of a linear regression under Zellner's g-prior with a flat intercept, batched over subsets.

Liang, Paulo, Molina, Clyde & Berger (2008, "Mixtures of g priors for Bayesian variable selection", JASA 103,
sec. 2.1): with a centred design X (n x p), response y and model gamma (k = |gamma| active columns X_gamma),

    y | alpha, beta, s2 ~ N(alpha 1 + X_gamma beta_gamma, s2 I),    p(alpha, s2) propto 1 / s2,
    beta_gamma | s2, g ~ N(0, g s2 (X_gamma^T X_gamma)^{-1}).

The reference prior on (alpha, s2) is improper but common to every model, so Bayes factors are well defined;
in the coordinates (alpha, u = log s2) it is the flat density 1. With S^2 = ||y - ybar||^2 and R^2_gamma the
coefficient of determination of the least-squares fit, integrating alpha, beta and s2 gives (with the
constant kept, so that it is the integral of exactly this unnormalised prior times the likelihood)

    log p(y | gamma, g) = lgamma((n-1)/2) - (n-1)/2 log(pi) - 1/2 log(n) - (n-1)/2 log(S^2)
                          + (n-1-k)/2 log(1+g) - (n-1)/2 log(1 + g (1 - R^2_gamma)),

and the posterior is s2 | y ~ IG((n-1)/2, S^2 (1 + g (1 - R^2)) / (2 (1 + g))), alpha | s2, y ~ N(ybar, s2 / n),
beta_gamma | s2, y ~ N(g/(1+g) beta_hat, g/(1+g) s2 (X_gamma^T X_gamma)^{-1}), beta_hat the least-squares fit.

Subsets are handled as saturated [B, p, p] matrices holding X_gamma^T X_gamma on the active block and the identity
elsewhere, so one batched Cholesky factorisation serves every subset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Design:
    """Sufficient statistics of the centred design: X^T X [p, p], X^T y [p], S^2 = ||y - ybar||^2, ybar and n."""

    gram: Tensor
    xty: Tensor
    sst: float
    ybar: float
    n: int

    @classmethod
    def of(cls, x: Tensor, y: Tensor) -> Design:
        """Statistics of the centred covariates ``x`` [n, p] and the response ``y`` [n] (float64)."""
        centred = y - y.mean()
        return cls(x.T @ x, x.T @ centred, float(centred @ centred), float(y.mean()), len(y))


@dataclass(frozen=True)
class SubsetFactors:
    """Per subset: Cholesky factor of saturated X_gamma^T X_gamma, 1/2 log|X_gamma^T X_gamma|, R^2, beta_hat, k."""

    chol: Tensor  # [B, p, p]
    half_log_det: Tensor  # [B]
    r2: Tensor  # [B]
    ols: Tensor  # [B, p], zero off gamma
    dims: Tensor  # [B] float64

    def take(self, rows: Tensor) -> SubsetFactors:
        """The factors of the given rows (int64 [K])."""
        return SubsetFactors(*(getattr(self, f)[rows] for f in ("chol", "half_log_det", "r2", "ols", "dims")))


def saturate(matrix: Tensor, masks: Tensor) -> Tensor:
    """[B, p, p]: ``matrix`` on each active block, the identity elsewhere."""
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    return torch.where(masks[:, :, None] & masks[:, None, :], matrix, eye)


def subset_factors(design: Design, masks: Tensor) -> SubsetFactors:
    """Least-squares factors of the subsets ``masks`` (bool [B, p])."""
    chol, info = torch.linalg.cholesky_ex(saturate(design.gram, masks))
    if bool((info > 0).any()):
        raise ValueError("X_gamma^T X_gamma is not positive definite (collinear covariates?)")
    rhs = torch.where(masks, design.xty, 0.0)
    z = torch.linalg.solve_triangular(chol, rhs[..., None], upper=False)
    ols = torch.linalg.solve_triangular(chol.transpose(-1, -2), z, upper=True)[..., 0]
    r2 = z[..., 0].square().sum(-1) / design.sst
    half_log_det = torch.diagonal(chol, dim1=-2, dim2=-1).log().sum(-1)
    return SubsetFactors(chol, half_log_det, r2, ols, masks.sum(-1).to(torch.float64))


def log_evidence_constant(design: Design) -> float:
    """lgamma((n-1)/2) - (n-1)/2 log(pi) - 1/2 log(n) - (n-1)/2 log(S^2): the model-free part of log p(y | gamma)."""
    half = 0.5 * (design.n - 1)
    return math.lgamma(half) - half * math.log(math.pi) - 0.5 * math.log(design.n) - half * math.log(design.sst)


def log_evidence_given_g(design: Design, fac: SubsetFactors, log_g: Tensor | float) -> Tensor:
    """log p(y | gamma, g); ``log_g`` broadcasts against the subsets' [B]."""
    half = 0.5 * (design.n - 1)
    log_g = torch.as_tensor(log_g, dtype=torch.float64)
    log1p_g = torch.nn.functional.softplus(log_g)  # log(1 + g) without overflow
    # log(1 + g (1 - R^2)) = softplus(log g + log(1 - R^2))
    shrunk = torch.nn.functional.softplus(log_g + torch.log1p(-fac.r2))
    return log_evidence_constant(design) + (half - 0.5 * fac.dims) * log1p_g - half * shrunk


def sigma2_rate(design: Design, fac: SubsetFactors, g: Tensor | float) -> Tensor:
    """b_n of s2 | y, gamma, g ~ IG((n-1)/2, b_n): S^2 (1 + g (1 - R^2)) / (2 (1 + g))."""
    g = torch.as_tensor(g, dtype=torch.float64)
    return 0.5 * design.sst * (1.0 + g * (1.0 - fac.r2)) / (1.0 + g)


def conditional_entropy(design: Design, fac: SubsetFactors, g: Tensor | float) -> Tensor:
    """H(alpha, beta_gamma, u = log s2 | gamma, g, y), [B] (or broadcast against a tensor ``g``).

    u: 1/s2 ~ Gamma(a_n, rate b_n) gives H(u) = lgamma(a_n) - a_n psi(a_n) + a_n, E[u] = log b_n - psi(a_n); given
    s2 the d = 1 + k coefficients are Gaussian with covariance s2 diag(1/n, g/(1+g) (X_gamma^T X_gamma)^{-1}).
    """
    a_n = 0.5 * (design.n - 1)
    digamma = float(torch.special.digamma(torch.tensor(a_n, dtype=torch.float64)))
    entropy_u = math.lgamma(a_n) - a_n * digamma + a_n
    mean_u = sigma2_rate(design, fac, g).log() - digamma
    d = 1.0 + fac.dims
    g = torch.as_tensor(g, dtype=torch.float64)
    log_shrink = -torch.nn.functional.softplus(-g.log())  # log(g / (1 + g))
    log_det_scaled = -math.log(design.n) + fac.dims * log_shrink - 2.0 * fac.half_log_det
    return entropy_u + 0.5 * d * (LOG_2PI + 1.0 + mean_u) + 0.5 * log_det_scaled


def sample_given_g(
    design: Design, fac: SubsetFactors, masks: Tensor, g: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """One exact draw per row given its g [B]: (alpha [B], beta [B, p] zero off gamma, log s2 [B])."""
    count = masks.shape[0]
    shape = torch.full((count,), 0.5 * (design.n - 1), dtype=torch.float64)
    precision = torch._standard_gamma(shape, generator=generator) / sigma2_rate(design, fac, g)
    log_s2 = -precision.log()
    sd = (0.5 * log_s2).exp()
    alpha = design.ybar + sd / math.sqrt(design.n) * torch.randn(count, generator=generator, dtype=torch.float64)
    shrink = g / (1.0 + g)
    z = torch.where(masks, torch.randn(masks.shape, generator=generator, dtype=torch.float64), 0.0)
    # L^{-T} z has covariance (L L^T)^{-1} = (X_gamma^T X_gamma)^{-1}.
    noise = torch.linalg.solve_triangular(fac.chol.transpose(-1, -2), z[..., None], upper=True)[..., 0]
    beta = shrink[:, None] * fac.ols + (sd * shrink.sqrt())[:, None] * noise
    return alpha, torch.where(masks, beta, 0.0), log_s2
