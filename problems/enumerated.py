"""Exact answers of a problem whose models are enumerated with closed-form evidences and conditional entropies."""

from __future__ import annotations

import torch
from torch import Tensor

from suite.core.types import ModelProbs


def exact_answers(log_evidence: Tensor, log_model_prior: Tensor, conditional_entropy: Tensor) -> dict[str, Tensor]:
    """log p(y | m), log p(m | y), log Z and H(theta | m, y) of every model, from the evidences and model prior."""
    log_joint_models = log_evidence + log_model_prior
    log_z = torch.logsumexp(log_joint_models, 0)
    return {
        "log_evidence": log_evidence,
        "log_posterior": log_joint_models - log_z,
        "log_z": log_z,
        "conditional_entropy": conditional_entropy,
    }


def exact_model_probs(exact: dict[str, Tensor]) -> ModelProbs:
    """Exact p(m | y) of every model (standard errors zero)."""
    prob = exact["log_posterior"].exp()
    return ModelProbs.from_dense(prob, torch.zeros_like(prob))


def exact_joint_entropy(exact: dict[str, Tensor]) -> float:
    """H(m, theta) = H(m) + sum_m p(m | y) H(theta | m, y)."""
    prob = exact["log_posterior"].exp()
    return -float(torch.xlogy(prob, prob).sum()) + float((prob * exact["conditional_entropy"]).sum())
