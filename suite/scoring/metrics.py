"""Accuracy metrics against ground truth.

Model-probability errors compare an estimate q(m) with the truth pi(m) over
the union of the models either lists (missing entries are zero):

- total variation ``TV = 1/2 sum_m |pi(m) - q(m)|``;
- ``KL(pi || q) = sum_m pi(m) log(pi(m) / q(m))``, infinite when q misses a
  model that pi supports (reported as such, never clipped);
- the largest absolute error ``max_m |pi(m) - q(m)|``.

Cross-entropy ``H(pi, q) = -E_pi[log q(m, theta_m)]`` is estimated over
gold-standard draws with its Monte Carlo standard error (VTI paper, sec. 5).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from suite.core.types import Estimate, ModelProbs


def _positions(truth: ModelProbs, estimate: ModelProbs) -> tuple[int, Tensor, Tensor]:
    """Size of the union of both lists of models, and where each entry of truth and estimate sits in it."""
    both = torch.cat([truth.index, estimate.index])
    # One-word indices take the fast path of unique; multi-word rows need dim=0 (much slower on large lists).
    union, position = torch.unique(both, dim=None if both.ndim == 1 else 0, return_inverse=True)
    k = truth.index.shape[0]
    return union.shape[0], position[:k], position[k:]


def _scatter(size: int, position: Tensor, values: Tensor) -> Tensor:
    out = torch.zeros(size, dtype=torch.float64)
    out[position] = values.to(torch.float64)
    return out


def _aligned(truth: ModelProbs, estimate: ModelProbs) -> tuple[Tensor, Tensor]:
    size, truth_position, estimate_position = _positions(truth, estimate)
    return _scatter(size, truth_position, truth.prob), _scatter(size, estimate_position, estimate.prob)


def _tv(p: Tensor, q: Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def _kl(p: Tensor, q: Tensor) -> float:
    support = p > 0
    if bool((q[support] <= 0).any()):
        return math.inf
    return float((p[support] * (p[support].log() - q[support].log())).sum())


def _missed(p: Tensor, q: Tensor) -> float:
    return float(p[q <= 0].sum())


def _max_abs(p: Tensor, q: Tensor) -> float:
    return float((p - q).abs().max())


def total_variation(truth: ModelProbs, estimate: ModelProbs) -> float:
    """Total variation distance between two model-probability vectors."""
    return _tv(*_aligned(truth, estimate))


def kl_divergence(truth: ModelProbs, estimate: ModelProbs) -> float:
    """KL(truth || estimate); ``inf`` if the estimate misses a model the truth supports."""
    return _kl(*_aligned(truth, estimate))


def missed_mass(truth: ModelProbs, estimate: ModelProbs) -> float:
    """Probability under the truth of the models the estimate gives zero: why its KL and cross-entropy are ``inf``."""
    return _missed(*_aligned(truth, estimate))


def max_abs_error(truth: ModelProbs, estimate: ModelProbs) -> float:
    """Largest absolute difference of any model's probability."""
    return _max_abs(*_aligned(truth, estimate))


#: The model-probability metrics, as functions of the aligned vectors (truth, estimate).
_PROB_METRICS = {
    "model_prob_tv": _tv,
    "model_prob_kl": _kl,
    "model_prob_max_abs": _max_abs,
    "model_prob_missed": _missed,
}
#: Replicates of the parametric bootstrap that carries a reference's error into the metrics.
REFERENCE_BOOTSTRAP = 200


def _reference_perturbations(truth: ModelProbs, replicates: int, seed: int = 0) -> Tensor:
    """Plausible truths given the reference's standard errors: p + N(0, se^2), clipped at 0, renormalised."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(replicates, truth.prob.numel(), generator=gen, dtype=torch.float64)
    perturbed = (truth.prob.to(torch.float64) + noise * truth.se.to(torch.float64)).clamp_min(0.0)
    return perturbed / perturbed.sum(-1, keepdim=True) * truth.prob.sum()


def model_prob_metrics_point(truth: ModelProbs, estimate: ModelProbs) -> dict[str, float]:
    """TV, KL, largest absolute error and missed mass of ``estimate`` against ``truth``, without standard errors."""
    p, q = _aligned(truth, estimate)
    return {name: fn(p, q) for name, fn in _PROB_METRICS.items()}


def model_prob_metrics(truth: ModelProbs, estimate: ModelProbs) -> dict[str, Estimate]:
    """TV, KL, largest absolute error and missed mass of ``estimate`` against ``truth``.

    When the truth is itself an estimate (``truth.se`` given), each metric's
    ``se`` is the standard deviation of the metric over a parametric
    bootstrap of the truth within its Monte Carlo error: how much of the
    value may be the reference's error rather than the method's.
    """
    size, truth_position, estimate_position = _positions(truth, estimate)
    p, q = _scatter(size, truth_position, truth.prob), _scatter(size, estimate_position, estimate.prob)
    values = {name: fn(p, q) for name, fn in _PROB_METRICS.items()}
    if truth.se is None or not bool((truth.se > 0).any()):
        return {name: Estimate(value) for name, value in values.items()}
    replicas = [_scatter(size, truth_position, row) for row in _reference_perturbations(truth, REFERENCE_BOOTSTRAP)]
    out = {}
    for name, fn in _PROB_METRICS.items():
        spread = torch.tensor([fn(r, q) for r in replicas], dtype=torch.float64)
        finite = bool(torch.isfinite(spread).all()) and math.isfinite(values[name])
        out[name] = Estimate(values[name], float(spread.std()) if finite else None)
    return out


def cross_entropy(log_q: Tensor) -> Estimate:
    """H(pi, q) = -mean(log q) over draws from pi, with standard error sd / sqrt(n).

    ``log_q`` holds log q(m_i, theta_i) at independent gold-standard draws. If
    any value is ``-inf`` (q puts no mass where pi does) the cross-entropy is
    ``inf`` and its standard error undefined.
    """
    return mean_estimate(-log_q.detach())


def mean_estimate(values: Tensor) -> Estimate:
    """Mean of independent draws with standard error sd / sqrt(n); ``inf`` (no SE) if any value is infinite.

    Used for the cross-entropy (``-log q`` at gold-standard draws) and the negative ELBO
    (``log q - log pi~`` at fresh draws of q): a draw where a density underflows to zero makes the
    estimate infinite, never silently dropped. Any non-finite value that is not NaN gives ``inf``.
    """
    values = values.detach().to(torch.float64).flatten()
    n = values.numel()
    if n < 2:
        raise ValueError("a mean estimate needs at least two draws")
    if bool(torch.isnan(values).any()):
        return Estimate(math.nan, None)
    if not bool(torch.isfinite(values).all()):
        return Estimate(math.inf, None)
    return Estimate(float(values.mean()), float(values.std(unbiased=True) / math.sqrt(n)))
