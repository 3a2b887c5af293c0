"""Exact conjugate posterior of Gaussian linear regression on a subset of columns, batched over subsets.

For the active columns A of the design (d = |A|), given sigma^2 = s2,

    beta_A | s2 ~ N(0, s2 Lambda0_A^{-1}),    y | beta, s2 ~ N(X_A beta_A, s2 I_n),

with Lambda0_A = (s2 / tau^2) I ("independent", known s2: beta_j ~ N(0, tau^2)), (1 / tau^2) I
("independent", inverse-gamma s2: beta_j ~ N(0, s2 tau^2)) or X_A^T X_A / g (Zellner's g-prior).
Then beta_A | y, s2 ~ N(mu_A, s2 P_A^{-1}) with P_A = X_A^T X_A + Lambda0_A, mu_A = P_A^{-1} X_A^T y, and

    known s2:       log p(y | A) = -n/2 log(2 pi s2) + 1/2 log|Lambda0_A| - 1/2 log|P_A| - (y^T y - q_A) / (2 s2),
    s2 ~ IG(a0, b0): log p(y | A) = -n/2 log(2 pi) + 1/2 log|Lambda0_A| - 1/2 log|P_A|
                                   + a0 log b0 - lgamma(a0) + lgamma(a_n) - a_n log b_n,

q_A = mu_A^T P_A mu_A, a_n = a0 + n/2, b_n = b0 + (y^T y - q_A)/2, and s2 | y, A ~ IG(a_n, b_n). For the
g-prior 1/2 log|Lambda0_A| - 1/2 log|P_A| = -d/2 log(1 + g). Subsets are handled as saturated
[B, D, D] matrices that hold P_A on the active block and the identity elsewhere, so one batched
Cholesky factorisation serves every subset and inactive coordinates stay exactly zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

NOISES = ("known", "inverse-gamma")
PRIORS = ("independent", "g")
LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class ConjugatePrior:
    """Hyperparameters: the noise model, the coefficient prior and their constants."""

    noise: str  # "known" or "inverse-gamma"
    prior: str  # "independent" or "g"
    prior_scale: float  # tau of the independent prior
    g: float  # g of the g-prior
    noise_variance: float  # the known sigma^2
    a0: float  # IG shape
    b0: float  # IG scale

    @property
    def ridge(self) -> float:
        """Lambda0 = ridge * I for the independent prior (in units of s2)."""
        scale = self.noise_variance if self.noise == "known" else 1.0
        return scale / self.prior_scale**2


@dataclass(frozen=True)
class Sufficient:
    """Sufficient statistics of the data: X^T X [D, D], X^T y [D], y^T y and n."""

    gram: Tensor
    xty: Tensor
    yty: float
    n: int

    @classmethod
    def of(cls, x: Tensor, y: Tensor) -> Sufficient:
        """Statistics of design ``x`` [n, D] and response ``y`` [n] in float64."""
        x, y = x.to(torch.float64), y.to(torch.float64)
        return cls(gram=x.T @ x, xty=x.T @ y, yty=float(y @ y), n=int(x.shape[0]))


@dataclass(frozen=True)
class Factors:
    """Per subset: Cholesky factor of saturated P_A, log|P_A|, q_A, b_n (IG) and the log evidence."""

    chol: Tensor  # [B, D, D]
    log_det: Tensor  # [B]
    quad: Tensor  # [B]
    b_n: Tensor  # [B] (meaningful for the inverse-gamma noise)
    log_evidence: Tensor  # [B]
    mean: Tensor  # [B, D] posterior mean mu_A, zero off A

    def take(self, rows: Tensor) -> Factors:
        """The factors of the given rows (int64 [K])."""
        return Factors(*(getattr(self, f)[rows] for f in ("chol", "log_det", "quad", "b_n", "log_evidence", "mean")))


def saturate(matrix: Tensor, masks: Tensor) -> Tensor:
    """[B, D, D]: ``matrix`` on each active block, the identity elsewhere."""
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    outer = masks[:, :, None] & masks[:, None, :]
    return torch.where(outer, matrix, eye)


def precision_matrix(stats: Sufficient, prior: ConjugatePrior) -> Tensor:
    """P = X^T X + Lambda0 on all columns (restricted to A by :func:`saturate`), in units of 1 / s2."""
    if prior.prior == "g":
        return stats.gram * (1.0 + 1.0 / prior.g)
    return stats.gram + prior.ridge * torch.eye(stats.gram.shape[0], dtype=stats.gram.dtype)


def factors(stats: Sufficient, prior: ConjugatePrior, masks: Tensor, precision: Tensor | None = None) -> Factors:
    """Exact posterior factors and log evidence of the subsets ``masks`` (bool [B, D]) in float64."""
    precision = precision_matrix(stats, prior) if precision is None else precision
    chol, info = torch.linalg.cholesky_ex(saturate(precision, masks))
    if bool((info > 0).any()):
        raise ValueError("a posterior precision is not positive definite (collinear design?)")
    rhs = torch.where(masks, stats.xty, 0.0)
    z = torch.linalg.solve_triangular(chol, rhs[..., None], upper=False)
    mean = torch.linalg.solve_triangular(chol.transpose(-1, -2), z, upper=True)[..., 0]
    quad = z[..., 0].square().sum(-1)
    log_det = 2.0 * torch.diagonal(chol, dim1=-2, dim2=-1).log().sum(-1)
    d = masks.sum(-1).to(torch.float64)
    if prior.prior == "g":
        half_log_ratio = -0.5 * d * math.log1p(prior.g)  # 1/2 log|Lambda0_A| - 1/2 log|P_A|
    else:
        half_log_ratio = 0.5 * d * math.log(prior.ridge) - 0.5 * log_det
    residual = stats.yty - quad
    if prior.noise == "known":
        s2 = prior.noise_variance
        log_evidence = -0.5 * stats.n * (LOG_2PI + math.log(s2)) + half_log_ratio - 0.5 * residual / s2
        b_n = torch.full_like(quad, math.nan)
    else:
        a_n = prior.a0 + 0.5 * stats.n
        b_n = prior.b0 + 0.5 * residual
        constant = -0.5 * stats.n * LOG_2PI + prior.a0 * math.log(prior.b0) - math.lgamma(prior.a0) + math.lgamma(a_n)
        log_evidence = constant + half_log_ratio - a_n * b_n.log()
    return Factors(chol=chol, log_det=log_det, quad=quad, b_n=b_n, log_evidence=log_evidence, mean=mean)


def conditional_entropy(prior: ConjugatePrior, n: int, masks: Tensor, fac: Factors) -> Tensor:
    """H(theta | A) of the exact posterior in the unconstrained coordinates (beta_A, and log s2 for IG noise).

    Known s2: beta_A ~ N(mu, s2 P^{-1}), H = d/2 log(2 pi e s2) - 1/2 log|P|. IG: u = log s2 with
    1/s2 ~ Gamma(a_n, rate b_n) has H(u) = lgamma(a_n) - a_n psi(a_n) + a_n and E[u] = log b_n - psi(a_n);
    H(u, beta) = H(u) + d/2 log(2 pi e) + d/2 E[u] - 1/2 log|P|.
    """
    d = masks.sum(-1).to(torch.float64)
    if prior.noise == "known":
        return 0.5 * d * (LOG_2PI + 1.0 + math.log(prior.noise_variance)) - 0.5 * fac.log_det
    a_n = prior.a0 + 0.5 * n
    digamma = float(torch.special.digamma(torch.tensor(a_n, dtype=torch.float64)))
    entropy_u = math.lgamma(a_n) - a_n * digamma + a_n
    mean_u = fac.b_n.log() - digamma
    return entropy_u + 0.5 * d * (LOG_2PI + 1.0) + 0.5 * d * mean_u - 0.5 * fac.log_det


def sample(
    prior: ConjugatePrior, n: int, masks: Tensor, fac: Factors, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One exact draw per row: (beta [B, D] zero off A, log s2 [B]) from the posterior given each subset."""
    count = masks.shape[0]
    if prior.noise == "known":
        log_s2 = torch.full((count,), math.log(prior.noise_variance), dtype=torch.float64)
    else:
        a_n = torch.full((count,), prior.a0 + 0.5 * n, dtype=torch.float64)
        precision = torch._standard_gamma(a_n, generator=generator) / fac.b_n  # 1 / s2 ~ Gamma(a_n, rate b_n)
        log_s2 = -precision.log()
    z = torch.randn(masks.shape, generator=generator, dtype=torch.float64)
    z = torch.where(masks, z, 0.0)
    # beta = mu + sqrt(s2) L^{-T} z has covariance s2 (L L^T)^{-1} = s2 P^{-1}.
    noise = torch.linalg.solve_triangular(fac.chol.transpose(-1, -2), z[..., None], upper=True)[..., 0]
    beta = fac.mean + (0.5 * log_s2).exp()[:, None] * noise
    return torch.where(masks, beta, 0.0), log_s2
