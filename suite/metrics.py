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
from dataclasses import dataclass

import torch
from torch import Tensor

from suite.types import ModelProbs


@dataclass(frozen=True)
class Estimate:
    """A number with its Monte Carlo standard error (None when not defined)."""

    value: float
    se: float | None = None


def _aligned(truth: ModelProbs, estimate: ModelProbs) -> tuple[Tensor, Tensor]:
    union = torch.unique(torch.cat([truth.index, estimate.index]))
    p = torch.zeros(union.numel(), dtype=torch.float64)
    q = torch.zeros(union.numel(), dtype=torch.float64)
    p[torch.searchsorted(union, truth.index)] = truth.prob.to(torch.float64)
    q[torch.searchsorted(union, estimate.index)] = estimate.prob.to(torch.float64)
    return p, q


def total_variation(truth: ModelProbs, estimate: ModelProbs) -> float:
    """Total variation distance between two model-probability vectors."""
    p, q = _aligned(truth, estimate)
    return 0.5 * float((p - q).abs().sum())


def kl_divergence(truth: ModelProbs, estimate: ModelProbs) -> float:
    """KL(truth || estimate); ``inf`` if the estimate misses a model the truth supports."""
    p, q = _aligned(truth, estimate)
    support = p > 0
    if bool((q[support] <= 0).any()):
        return math.inf
    return float((p[support] * (p[support].log() - q[support].log())).sum())


def max_abs_error(truth: ModelProbs, estimate: ModelProbs) -> float:
    """Largest absolute difference of any model's probability."""
    p, q = _aligned(truth, estimate)
    return float((p - q).abs().max())


def model_prob_metrics(truth: ModelProbs, estimate: ModelProbs) -> dict[str, Estimate]:
    """TV, KL and largest absolute error of ``estimate`` against ``truth``."""
    return {
        "model_prob_tv": Estimate(total_variation(truth, estimate)),
        "model_prob_kl": Estimate(kl_divergence(truth, estimate)),
        "model_prob_max_abs": Estimate(max_abs_error(truth, estimate)),
    }


def cross_entropy(log_q: Tensor) -> Estimate:
    """H(pi, q) = -mean(log q) over draws from pi, with standard error sd / sqrt(n).

    ``log_q`` holds log q(m_i, theta_i) at independent gold-standard draws. If
    any value is ``-inf`` (q puts no mass where pi does) the cross-entropy is
    ``inf`` and its standard error undefined.
    """
    log_q = log_q.detach().to(torch.float64).flatten()
    n = log_q.numel()
    if n < 2:
        raise ValueError("cross-entropy needs at least two draws")
    if bool(torch.isnan(log_q).any()):
        return Estimate(math.nan, None)
    if not bool(torch.isfinite(log_q).all()):
        return Estimate(math.inf, None)
    return Estimate(float(-log_q.mean()), float(log_q.std(unbiased=True) / math.sqrt(n)))
