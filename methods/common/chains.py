"""Batched Markov chains on the saturated space, shared by the reversible-jump families (rjmcmc, trj).

C chains advance together: a :class:`ChainState` holds each chain's model index, saturated parameter vector and
cached log joint, and every move is a tensor operation over the chains, never a loop. The Metropolis decision and
the row-wise selection live here so that every family accepts and rejects the same way (a NaN ratio is a
rejection).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from suite.core.problem import Problem
from suite.core.tensor_ops import standard_normal


class ChainState(NamedTuple):
    """State of C chains: model, saturated parameters and the cached log joint."""

    model_index: Tensor  # int64 [C]
    theta: Tensor  # [C, D]
    log_joint: Tensor  # [C]


def metropolis_accept(log_alpha: Tensor, generator: torch.Generator) -> Tensor:
    """Metropolis decisions U < exp(log_alpha); NaN ratios are rejections."""
    u = torch.rand(log_alpha.shape, generator=generator, dtype=log_alpha.dtype, device=log_alpha.device)
    return u < log_alpha.exp()


def select_rows(accept: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """Row-wise choice between proposals and current values."""
    if new.ndim == 2:
        accept = accept.unsqueeze(-1).expand_as(new)
    return torch.where(accept, new, old)


def random_walk_move(
    problem: Problem, state: ChainState, chol: Tensor, generator: torch.Generator
) -> tuple[ChainState, Tensor]:
    """Gaussian random-walk Metropolis on active coordinates; ``chol`` is per chain ``[C, D, D]`` or shared ``[D, D]``.

    The step ``L eps`` restricted to the active set is N(0, (L L^T)_AA), the
    marginal of the full Gaussian, so the proposal is symmetric for any L.
    """
    m, theta, log_joint = state
    eps = standard_normal(theta.shape, generator, theta.dtype, theta.device)
    step = eps @ chol.T if chol.ndim == 2 else torch.matmul(chol, eps.unsqueeze(-1)).squeeze(-1)
    theta_new = torch.where(problem.mask(m), theta + step, theta)
    log_joint_new = problem.log_joint(m, theta_new)
    accept = metropolis_accept(log_joint_new - log_joint, generator)
    return ChainState(m, select_rows(accept, theta_new, theta), torch.where(accept, log_joint_new, log_joint)), accept
