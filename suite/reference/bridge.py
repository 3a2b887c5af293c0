"""Per-model log evidence by optimal bridge sampling with a Gaussian-mixture proposal.

For one model with unnormalised posterior p(x) = p(D, x, m) on its active, unconstrained coordinates x in R^d, and
posterior draws arranged as chains ``[C, S, d]`` (NUTS chains, or SMC runs):

1. A Gaussian mixture q (K components, full covariances with a ridge of ``ridge`` times each coordinate's variance
   on the diagonal) is fitted by EM to the first half of every chain.
2. The iterative optimal bridge of Meng & Wong (1996), in log space,

       r <- [mean_j l2_j / (s1 l2_j + s2 r)] / [mean_i 1 / (s1 l1_i + s2 r)],

   with l = p / q at the second halves of the chains (i) and at N2 draws from q (j), converges to Z = p(D, m). As
   in Gronau et al. (2017), s1 uses the effective number of posterior draws.
3. Its relative mean squared error is Frühwirth-Schnatter's (2004), with the autocorrelation of the MCMC draws
   entering through an effective sample size along the chains. The standard error of log Z is the relative error
   (delta method).

Details: docs/problems.md, "Ground truth" ("`suite/reference/bridge.py`").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import logsumexp

from suite.core.backend import jax_backend

LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class BridgeSettings:
    """Settings of the bridge-sampling evidence estimate of each model."""

    #: Mixture components of the proposal (fewer when there are too few fitting draws).
    num_components: int = 16
    #: Draws from the proposal (N2).
    num_proposal: int = 50_000
    #: Posterior draws wanted per model (NUTS runs enough rounds of chains to reach this).
    min_draws: int = 16_000
    em_iters: int = 200
    #: EM stops when the mean log likelihood per draw improves by less than this.
    em_tol: float = 1e-5
    #: Covariance ridge, as a fraction of each coordinate's variance.
    ridge: float = 1e-4
    max_iters: int = 1000
    tol: float = 1e-10
    #: Largest standard error of log Z for the estimate's diagnostics to count as OK.
    max_log_z_se: float = 0.1

    def as_dict(self) -> dict[str, Any]:
        """Settings as a JSON-able dict."""
        return dict(self.__dict__)


@dataclass
class GaussianMixture:
    """Mixture of full-covariance Gaussians: weights ``[K]``, means ``[K, d]``, lower Cholesky factors ``[K, d, d]``."""

    weights: np.ndarray
    means: np.ndarray
    chols: np.ndarray

    def component_log_prob(self, x: np.ndarray) -> np.ndarray:
        """log w_k + log N(x; mu_k, Sigma_k) for rows of ``x`` ``[N, d]``: ``[N, K]``."""
        n, d = x.shape
        log_det = np.log(np.diagonal(self.chols, axis1=1, axis2=2)).sum(1)
        out = np.empty((n, len(self.weights)))
        for k in range(len(self.weights)):
            z = solve_triangular(self.chols[k], (x - self.means[k]).T, lower=True, check_finite=False)
            out[:, k] = -0.5 * (z * z).sum(0) - log_det[k] - 0.5 * d * LOG_2PI
        with np.errstate(divide="ignore"):
            return out + np.log(self.weights)

    def log_prob(self, x: np.ndarray) -> np.ndarray:
        """Mixture log density at rows of ``x`` ``[N, d]``."""
        return logsumexp(self.component_log_prob(x), axis=1)

    def sample(self, num: int, rng: np.random.Generator) -> np.ndarray:
        """``num`` draws ``[num, d]``."""
        component = rng.choice(len(self.weights), size=num, p=self.weights / self.weights.sum())
        z = rng.standard_normal((num, self.means.shape[1]))
        x = np.empty_like(z)
        for k in range(len(self.weights)):
            pick = component == k
            x[pick] = self.means[k] + z[pick] @ self.chols[k].T
        return x


def fit_gaussian_mixture(
    x: np.ndarray,
    num_components: int,
    rng: np.random.Generator,
    iters: int = 200,
    tol: float = 1e-5,
    ridge: float = 1e-4,
) -> tuple[GaussianMixture, dict[str, Any]]:
    """EM fit of a full-covariance Gaussian mixture to rows of ``x`` ``[N, d]`` (k-means++ start); fit diagnostics."""
    n, d = x.shape
    num_components = max(1, min(num_components, n // (2 * (d + 1))))
    scale = x.var(0) + 1e-12
    centres = [x[rng.integers(n)]]
    for _ in range(1, num_components):
        dist = np.min([((x - c) ** 2 / scale).sum(1) for c in centres], axis=0)
        centres.append(x[rng.choice(n, p=dist / dist.sum())])
    mix = GaussianMixture(
        np.full(num_components, 1.0 / num_components),
        np.array(centres),
        np.broadcast_to(np.diag(np.sqrt(0.25 * scale)), (num_components, d, d)).copy(),
    )
    previous, it = -np.inf, 0
    for it in range(1, iters + 1):  # noqa: B007 (it is reported)
        log_resp = mix.component_log_prob(x)
        log_norm = logsumexp(log_resp, axis=1)
        resp = np.exp(log_resp - log_norm[:, None])
        mass = resp.sum(0) + 1e-12
        means = (resp.T @ x) / mass[:, None]
        cov = np.empty((len(mass), d, d))
        for k in range(len(mass)):
            centred = x - means[k]
            cov[k] = (resp[:, k, None] * centred).T @ centred / mass[k] + ridge * np.diag(scale)
        mix = GaussianMixture(mass / n, means, np.linalg.cholesky(cov))
        current = float(log_norm.mean())
        if current - previous < tol:
            break
        previous = current
    return mix, {"components": num_components, "em_iterations": it, "fit_mean_log_lik": current}


def effective_sample_size(values: np.ndarray) -> float:
    """ESS of a scalar function's values ``[C, S]`` along chains (NumPyro's estimator), at most C * S."""
    from numpyro.diagnostics import effective_sample_size as ess

    if values.shape[1] < 4:
        return float(values.size)
    if np.ptp(values) == 0:
        return float(values.size)
    return float(min(values.size, float(ess(values[..., None])[0])))


def optimal_bridge(
    l1: np.ndarray, l2: np.ndarray, ess1: float, max_iters: int = 1000, tol: float = 1e-10
) -> tuple[float, float, int, bool]:
    """Meng-Wong iterative bridge from log p/q at posterior draws ``l1`` and proposal draws ``l2``.

    Returns (log Z, relative standard error of Z, iterations, converged); ``ess1`` is the posterior
    draws' effective number used for s1 and the error.
    """
    n1, n2 = len(l1), len(l2)
    shift = float(np.median(l1))
    a1, a2 = l1 - shift, l2 - shift
    log_s1, log_s2 = math.log(ess1 / (ess1 + n2)), math.log(n2 / (ess1 + n2))
    log_r, converged, it = 0.0, False, 0
    for it in range(1, max_iters + 1):  # noqa: B007 (it is reported)
        numerator = logsumexp(a2 - np.logaddexp(log_s1 + a2, log_s2 + log_r)) - math.log(n2)
        denominator = logsumexp(-np.logaddexp(log_s1 + a1, log_s2 + log_r)) - math.log(n1)
        new = float(numerator - denominator)
        if abs(new - log_r) < tol:
            log_r, converged = new, True
            break
        log_r = new
    f1 = np.exp(-np.logaddexp(log_s1 + a1 - log_r, log_s2))
    f2 = np.exp(a2 - log_r - np.logaddexp(log_s1 + a2 - log_r, log_s2))
    re2 = f2.var() / (n2 * f2.mean() ** 2) + f1.var() / (ess1 * f1.mean() ** 2)
    return log_r + shift, math.sqrt(re2), it, converged


@dataclass
class BridgeResult:
    """A bridge estimate of log Z with its standard error and diagnostics."""

    log_z: float
    log_z_se: float
    diagnostics: dict[str, Any]

    def ok(self, max_se: float) -> bool:
        """Whether the iteration converged to a finite value with standard error at most ``max_se``."""
        return bool(self.diagnostics["converged"] and math.isfinite(self.log_z) and self.log_z_se <= max_se)


def bridge_log_evidence(
    log_density: Callable[[np.ndarray], np.ndarray],
    draws: np.ndarray,
    settings: BridgeSettings | None = None,
    seed: int = 0,
    max_ess: float | None = None,
) -> BridgeResult:
    """log of the integral of exp(``log_density``) from posterior draws ``[C, S, d]`` (chains), by bridge sampling.

    The first half of each chain fits the proposal, the second half enters the
    bridge; ``max_ess`` caps the bridge draws' effective number (e.g. for
    resampled SMC particles, whose duplicates autocorrelation cannot see).
    """
    settings = settings or BridgeSettings()
    rng = np.random.default_rng(seed)
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim == 2:
        draws = draws[None]
    c, s, d = draws.shape
    if d == 0:  # nothing to integrate: the density at the empty vector is the evidence
        return BridgeResult(float(log_density(np.zeros((1, 0)))[0]), 0.0, {"converged": True, "exact": True})
    half = s // 2
    fit, post = draws[:, :half].reshape(-1, d), draws[:, half:]
    mix, fit_info = fit_gaussian_mixture(
        fit, settings.num_components, rng, settings.em_iters, settings.em_tol, settings.ridge
    )
    proposal = mix.sample(settings.num_proposal, rng)
    post_flat = post.reshape(-1, d)
    l1 = np.nan_to_num(log_density(post_flat), nan=-np.inf) - mix.log_prob(post_flat)
    l2 = np.nan_to_num(log_density(proposal), nan=-np.inf) - mix.log_prob(proposal)
    if not np.isfinite(l1).all():
        raise ValueError("the log density is not finite at some posterior draws")
    # ESS of f1 along the chains, from a first pass with all draws counted as independent.
    log_z0, _, _, _ = optimal_bridge(l1, l2, float(len(l1)), settings.max_iters, settings.tol)
    n2 = settings.num_proposal
    f1 = np.exp(-np.logaddexp(math.log(len(l1) / (len(l1) + n2)) + l1 - log_z0, math.log(n2 / (len(l1) + n2))))
    ess1 = effective_sample_size(f1.reshape(c, s - half))
    if max_ess is not None:
        ess1 = min(ess1, max_ess)
    log_z, rel_se, iterations, converged = optimal_bridge(l1, l2, ess1, settings.max_iters, settings.tol)
    finite = l2[np.isfinite(l2)]
    diagnostics = {
        **fit_info,
        "num_fit": len(fit),
        "num_posterior": len(l1),
        "num_proposal": n2,
        "ess_posterior": ess1,
        "autocorrelation": "ESS of f1 along chains (NumPyro)" + (", capped" if max_ess is not None else ""),
        "iterations": iterations,
        "converged": converged,
        # Overlap: importance sampling and reciprocal importance sampling from the same draws.
        "log_z_is": float(logsumexp(finite) - math.log(n2)) if len(finite) else -math.inf,
        "log_z_reciprocal_is": float(-(logsumexp(-l1) - math.log(len(l1)))),
        "kl_posterior_proposal": float(l1.mean() - log_z),
    }
    return BridgeResult(float(log_z), float(rel_se), diagnostics)


def batched_log_joint(target: Any) -> Callable[[Any, Any], Any]:
    """The saturated log joint of a JaxTarget, jitted and vectorised over rows: f(m, theta ``[N, D]``) -> ``[N]``."""
    import jax

    return jax.jit(jax.vmap(target.log_joint, in_axes=(None, 0)))


def model_log_density(
    target: Any, model: int, batched: Callable[[Any, Any], Any] | None = None, chunk: int = 20_000
) -> Callable[[np.ndarray], np.ndarray]:
    """log p(D, x, m) of one model of a JaxTarget as a numpy function of its active coordinates ``[N, d]``."""
    jnp = jax_backend().jnp
    batched = batched or batched_log_joint(target)
    active = np.asarray(target.masks[model])
    m = jnp.asarray(model, dtype=jnp.int64)
    # The saturated log joint adds log N(0; 0, 1) per inactive coordinate (set to 0 here): remove it.
    correction = float((~active).sum()) * 0.5 * LOG_2PI

    def log_density(x: np.ndarray) -> np.ndarray:
        full = np.zeros((len(x), target.dim))
        full[:, active] = x
        parts = [np.asarray(batched(m, jnp.asarray(full[i : i + chunk]))) for i in range(0, len(x), chunk)]
        return np.concatenate(parts) + correction

    return log_density
