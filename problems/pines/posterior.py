"""Exact normal-gamma posterior of a straight-line regression on a centred covariate (Friel & Wyse 2012, pines).

For y_i = alpha + beta c_i + e_i, e_i ~ N(0, 1/tau), c centred, design X = [1, c] and the conjugate prior

    (alpha, beta) | tau ~ N(mu0, (tau Q0)^{-1}),  Q0 = diag(r0, s0),    tau ~ Gamma(a0, rate b0),

the posterior is (alpha, beta) | tau, y ~ N(nu, (tau M)^{-1}) with M = X^T X + Q0, nu = M^{-1}(X^T y + Q0 mu0), and
tau | y ~ Gamma(a_n, rate b_n), a_n = a0 + n/2, b_n = b0 + (y^T y + mu0^T Q0 mu0 - nu^T M nu) / 2. The evidence is

    log p(y) = -n/2 log(2 pi) + 1/2 log|Q0| - 1/2 log|M| + a0 log b0 - lgamma(a0) + lgamma(a_n) - a_n log b_n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class NormalGammaPrior:
    """mu0 = (alpha, beta) prior means, precision factors r0 (alpha) and s0 (beta), tau ~ Gamma(a0, rate b0)."""

    mu0: tuple[float, float]
    r0: float
    s0: float
    a0: float
    b0: float


@dataclass(frozen=True)
class NormalGammaPosterior:
    """nu [2], M [2, 2] with its Cholesky factor, a_n, b_n and the log evidence of one model."""

    nu: Tensor
    precision: Tensor
    chol: Tensor
    a_n: float
    b_n: float
    log_evidence: float

    def entropy(self) -> float:
        """H(alpha, beta, u = log tau | y) = H(u) + log(2 pi e) - E[u] - 1/2 log|M|.

        u = log tau with tau ~ Gamma(a_n, rate b_n) has H(u) = lgamma(a_n) - a_n psi(a_n) + a_n and
        E[u] = psi(a_n) - log b_n; given tau, (alpha, beta) ~ N(nu, (tau M)^{-1}).
        """
        digamma = float(torch.special.digamma(torch.tensor(self.a_n, dtype=torch.float64)))
        entropy_u = math.lgamma(self.a_n) - self.a_n * digamma + self.a_n
        mean_u = digamma - math.log(self.b_n)
        half_log_det = float(torch.diagonal(self.chol).log().sum())
        return entropy_u + LOG_2PI + 1.0 - mean_u - half_log_det

    def sample(self, num: int, generator: torch.Generator) -> Tensor:
        """``num`` exact draws of (alpha, beta, log tau), float64 [num, 3]."""
        shape = torch.full((num,), self.a_n, dtype=torch.float64)
        tau = torch._standard_gamma(shape, generator=generator) / self.b_n
        z = torch.randn(num, 2, generator=generator, dtype=torch.float64)
        # (L^{-T} z) has covariance (L L^T)^{-1} = M^{-1}; scaled by tau^{-1/2}: (tau M)^{-1}.
        noise = torch.linalg.solve_triangular(self.chol.T, z.T, upper=True).T
        coefficients = self.nu + noise / tau.sqrt()[:, None]
        return torch.cat([coefficients, tau.log()[:, None]], dim=1)


def fit(covariate: Tensor, y: Tensor, prior: NormalGammaPrior) -> NormalGammaPosterior:
    """Exact posterior and log evidence of y on the centred ``covariate`` (float64)."""
    n = len(y)
    x = torch.stack([torch.ones(n, dtype=torch.float64), covariate.to(torch.float64)], dim=1)
    mu0 = torch.tensor(prior.mu0, dtype=torch.float64)
    q0 = torch.diag(torch.tensor([prior.r0, prior.s0], dtype=torch.float64))
    precision = x.T @ x + q0
    chol = torch.linalg.cholesky(precision)
    nu = torch.cholesky_solve((x.T @ y + q0 @ mu0)[:, None], chol)[:, 0]
    a_n = prior.a0 + 0.5 * n
    b_n = prior.b0 + 0.5 * float(y @ y + mu0 @ q0 @ mu0 - nu @ precision @ nu)
    log_evidence = (
        -0.5 * n * LOG_2PI
        + 0.5 * math.log(prior.r0 * prior.s0)
        - float(torch.diagonal(chol).log().sum())
        + prior.a0 * math.log(prior.b0)
        - math.lgamma(prior.a0)
        + math.lgamma(a_n)
        - a_n * math.log(b_n)
    )
    return NormalGammaPosterior(nu, precision, chol, a_n, b_n, log_evidence)
