"""The TRJ jump (TRJ paper, Algorithm 1), batched over chains.

From (m, theta) and a proposed m' (drawn by the caller, with the log ratio
log j_m'(m) - log j_m(m') of reverse to forward jump probabilities):

1. z = T_m(theta) on m's active coordinates;
2. coordinates active in m' but not in m take u ~ N(0, 1), coordinates active
   in m but not in m' are given up (hbar is the identity by coordinate slot);
3. theta' = T_m'^{-1}(z');
4. log alpha = log pi(m', theta') - log pi(m, theta) + log j_m'(m) - log j_m(m')
   + sum_dropped log phi(z_i) - sum_born log phi(u_i)
   + log |det dT_m/dtheta| + log |det dT_m'^{-1}/dz'|.

Chains whose proposal is their own model are left unchanged (log alpha = 0);
Algorithm 1 makes a within-model move there, which the sampler does anyway.
With exact transports, log alpha reduces to the model part alone
(Proposition 1 of the TRJ paper).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from methods.common.chains import ChainState
from suite.core.problem import ExactTransport, Problem, std_normal_log_prob
from suite.core.tensor_ops import row_sum


class JumpRecord(NamedTuple):
    """One proposal per chain: from and to models, log acceptance ratio (capped at 0), and the jump's log ratio."""

    model_from: Tensor  # int64 [C]
    model_to: Tensor  # int64 [C]
    log_alpha: Tensor  # [C], <= 0; -inf where the proposal has zero density
    log_jump_ratio: Tensor  # [C], log j_to(from) - log j_from(to)


def transport_jump(
    problem: Problem,
    state: ChainState,
    transport: ExactTransport,
    model_to: Tensor,
    log_jump_ratio: Tensor,
    generator: torch.Generator,
) -> tuple[ChainState, Tensor, JumpRecord]:
    """One TRJ proposal per chain to ``model_to``; returns the new state, accept flags and the proposal record."""
    m, theta, log_joint = state
    active, active_to = problem.mask(m), problem.mask(model_to)
    z, log_det_fwd = transport.to_reference(m, theta)
    u = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
    z_to = torch.where(active, z, u)
    theta_to, log_det_inv = transport.from_reference(model_to, z_to)
    theta_to = torch.where(active_to, theta_to, theta)
    dropped = (active & ~active_to).to(theta.dtype)
    born = (active_to & ~active).to(theta.dtype)
    # where() before the product: an inactive slot may hold anything, even inf.
    log_aux = row_sum(dropped * torch.where(active, std_normal_log_prob(z), 0.0)) - row_sum(
        born * std_normal_log_prob(u)
    )
    log_joint_to = problem.log_joint(model_to, theta_to)
    log_ratio = (log_joint_to - log_joint) + log_jump_ratio + log_aux + log_det_fwd + log_det_inv
    return metropolis_jump(state, model_to, theta_to, log_joint_to, log_ratio, log_jump_ratio, generator)


def saturated_jump(
    problem: Problem,
    state: ChainState,
    transport: ExactTransport,
    model_to: Tensor,
    log_jump_ratio: Tensor,
    generator: torch.Generator,
) -> tuple[ChainState, Tensor, JumpRecord]:
    """One CTRJ proposal per chain (TRJ paper, Algorithm 2) through a conditional transport of all coordinates.

    The state is saturated: inactive coordinates hold auxiliary variables u ~ N(0, 1) (the sampler refreshes
    them before each jump). xi' = T^{-1}(T(xi | m) | m'), and the ratio is that of the saturated target
    pi(m, theta) prod_inactive phi(u) with both log-determinants.
    """
    m, xi, log_joint = state
    active, active_to = problem.mask(m), problem.mask(model_to)
    z, log_det_fwd = transport.to_reference(m, xi)
    xi_to, log_det_inv = transport.from_reference(model_to, z)
    log_aux = row_sum(torch.where(active_to, 0.0, std_normal_log_prob(xi_to))) - row_sum(
        torch.where(active, 0.0, std_normal_log_prob(xi))
    )
    log_joint_to = problem.log_joint(model_to, xi_to)
    log_ratio = (log_joint_to - log_joint) + log_jump_ratio + log_aux + log_det_fwd + log_det_inv
    return metropolis_jump(state, model_to, xi_to, log_joint_to, log_ratio, log_jump_ratio, generator)


def metropolis_jump(
    state: ChainState,
    model_to: Tensor,
    theta_to: Tensor,
    log_joint_to: Tensor,
    log_ratio: Tensor,
    log_jump_ratio: Tensor,
    generator: torch.Generator,
) -> tuple[ChainState, Tensor, JumpRecord]:
    """Accept or reject proposed (m', theta') per chain given the log acceptance ratio.

    Chains whose proposal is their own model are left unchanged (log alpha = 0, not counted as accepted);
    NaN ratios are rejections.
    """
    m, theta, log_joint = state
    stay = model_to == m
    log_ratio = torch.where(stay, torch.zeros_like(log_ratio), log_ratio)
    log_alpha = torch.nan_to_num(log_ratio, nan=-torch.inf).clamp_max(0.0)
    accept = torch.rand(log_alpha.shape, generator=generator, dtype=theta.dtype, device=theta.device) < log_alpha.exp()
    accept = accept & ~stay
    new_state = ChainState(
        torch.where(accept, model_to, m),
        torch.where(accept.unsqueeze(-1), theta_to, theta),
        torch.where(accept, log_joint_to, log_joint),
    )
    return new_state, accept, JumpRecord(m, model_to, log_alpha, log_jump_ratio)


def propose_from_probs(model_index: Tensor, log_probs: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """m' ~ j(.) independently of the current model (j_k(k') = p(k') for every k); m' may equal m.

    Returns m' and log j_m'(m) - log j_m(m') = log p(m) - log p(m').
    """
    probs = log_probs.exp().to(torch.float64)
    model_to = torch.multinomial(probs, model_index.numel(), replacement=True, generator=generator)
    model_to = model_to.to(model_index.device)
    return model_to, (log_probs[model_index] - log_probs[model_to]).to(log_probs.dtype)
