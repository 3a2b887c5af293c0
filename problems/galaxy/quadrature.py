"""The one-component evidence p(y | k = 1) of Richardson & Green's prior by quadrature, independent of the sampler.

With k = 1 the precision integrates out in closed form: given mu and beta, with S(mu) = sum_i (y_i - mu)^2,

    int Gamma(tau; alpha, beta) prod_i N(y_i; mu, 1/tau) dtau
        = beta^alpha Gamma(alpha + n/2) / (Gamma(alpha) (2 pi)^(n/2) (beta + S(mu)/2)^(alpha + n/2)),

which leaves a 2-D integral over mu ~ N(xi, 1/kappa) and beta ~ Gamma(g, h), done on a fine grid in (mu, log beta)
(trapezoid rule). It checks both the problem's density and the stored reference's k = 1 evidence.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from problems.galaxy.problem import ALPHA, G_SHAPE


def log_evidence_k1(y: np.ndarray, xi: float, kappa: float, h: float, num: int = 2001) -> float:
    """log p(y | k = 1) under RG's prior (mu ~ N(xi, 1/kappa), tau ~ Gamma(2, beta), beta ~ Gamma(0.2, h))."""
    n = len(y)
    centre, spread = y.mean(), y.std() / math.sqrt(n)
    mu = np.linspace(centre - 12 * spread, centre + 12 * spread, num)  # the posterior of mu: sd ~ spread
    log_beta = np.linspace(-40.0, 12.0, num)  # log beta's prior has a long left tail (e^(0.2 log beta))
    beta = np.exp(log_beta)[None, :]
    s = ((y[None, :] - mu[:, None]) ** 2).sum(-1)[:, None]
    a = ALPHA + 0.5 * n
    log_tau_integral = (
        ALPHA * np.log(beta) + special.gammaln(a) - special.gammaln(ALPHA) - 0.5 * n * math.log(2 * math.pi)
    ) - a * np.log(beta + 0.5 * s)
    log_f = (
        log_tau_integral
        + stats.norm.logpdf(mu, xi, 1 / math.sqrt(kappa))[:, None]
        + stats.gamma.logpdf(beta, G_SHAPE, scale=1 / h)
        + np.log(beta)  # d beta = beta d log beta
    )
    top = log_f.max()
    integral = np.trapezoid(np.trapezoid(np.exp(log_f - top), log_beta, axis=1), mu)
    return float(np.log(integral) + top)
