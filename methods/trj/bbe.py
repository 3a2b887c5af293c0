"""The Bartolucci bridge estimator of model probabilities (TRJ paper, eqs. 9-10; Bartolucci et al. 2006).

Detailed balance of a reversible jump between models i and j gives

    pi(i) j_i(j) E_i[alpha(i -> j)] = pi(j) j_j(i) E_j[alpha(j -> i)],

so from proposals made at draws of each model,

    log pi(i) / pi(j) = log mean alpha(j -> i) - log mean alpha(i -> j) + log j_j(i) - log j_i(j).

The last term is each proposal's log jump ratio. It vanishes for symmetric jumps, and the TRJ paper's eq. 9
and the authors' code omit it. With the jump probabilities j_k(k') = pi(k') of Proposition 1 it is what
makes the estimate right, so it is included here (with every alpha equal to 1, the code's formula would
return uniform probabilities). Eq. 10 then gives pi_hat(j) = 1 / sum_i B[i, j] for each reference model j.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from methods.trj.kernels import JumpRecord


def pairwise_log_mean_alpha(record: JumpRecord, num_models: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per ordered pair (i, j), i != j: proposal count, log mean alpha, its delta-method variance, log jump ratio.

    Returns ``count [K, K]``, ``log_mean [K, K]`` (NaN where no proposal), ``var [K, K]`` (variance of
    ``log_mean``: var(alpha) / (n mean(alpha)^2)) and ``log_jump_ratio [K, K]`` (log j_j(i) - log j_i(j), the
    mean over the pair's proposals; it is constant per pair).
    """
    moved = record.model_from != record.model_to
    pair = (record.model_from * num_models + record.model_to)[moved]
    log_alpha = record.log_alpha[moved].to(torch.float64)
    alpha = log_alpha.exp()
    size = num_models * num_models
    zeros = torch.zeros(size, dtype=torch.float64, device=alpha.device)
    count = zeros.index_add(0, pair, torch.ones_like(alpha))
    mean = zeros.index_add(0, pair, alpha) / count.clamp_min(1)
    second = zeros.index_add(0, pair, alpha * alpha) / count.clamp_min(1)
    ratio = zeros.index_add(0, pair, record.log_jump_ratio[moved].to(torch.float64)) / count.clamp_min(1)
    var = (second - mean * mean).clamp_min(0) / (count.clamp_min(1) * mean * mean)
    seen = count > 0
    log_mean = torch.where(seen, mean.log(), torch.full_like(mean, math.nan))
    shape = (num_models, num_models)
    return count.view(shape), log_mean.view(shape), var.view(shape), torch.where(seen, ratio, math.nan).view(shape)


def bridge_log_ratios(record: JumpRecord, num_models: int) -> tuple[Tensor, Tensor]:
    """log B[i, j] = log pi(i) / pi(j) for every pair proposed in both directions (NaN otherwise), and its variance."""
    _, log_mean, var, log_jump = pairwise_log_mean_alpha(record, num_models)
    log_b = log_mean.T - log_mean + log_jump
    log_b.fill_diagonal_(0.0)
    var_b = var + var.T
    var_b.fill_diagonal_(0.0)
    return log_b, var_b


def bartolucci_model_probs(record: JumpRecord, num_models: int, reference: int | None = None) -> tuple[Tensor, Tensor]:
    """Model probabilities by eq. 10 from one proposal per draw, and their delta-method standard errors.

    With ``reference = j``: pi_hat(i) = B[i, j] / sum_l B[l, j] (for i = j this is eq. 10). By default j is
    the model with the most proposals. Every model must have been proposed to and from j.
    """
    log_b, var_b = bridge_log_ratios(record, num_models)
    if reference is None:
        reference = int(torch.bincount(record.model_from, minlength=num_models).argmax())
    column, column_var = log_b[:, reference], var_b[:, reference]
    missing = torch.isnan(column).nonzero().flatten().tolist()
    if missing:
        raise ValueError(f"no proposals in both directions between model {reference} and models {missing}")
    probs = torch.softmax(column, 0)
    # d p_i / d log B_l = p_i (delta_il - p_l); the log ratios of different l are independent.
    jac = torch.diag(probs) - probs[:, None] * probs[None, :]
    se = torch.sqrt((jac * jac) @ column_var)
    return probs, se
