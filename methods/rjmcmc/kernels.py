"""Batched RJMCMC moves on the saturated space: C chains advance together, no loop over chains.

Between-model move (independent auxiliary, Brooks et al. 2003): from model m propose m' ~ j(. | m); coordinates
active in both keep their (standardised) values, newly active ones are drawn from an auxiliary density, deactivated
ones are dropped. The acceptance probability is

    min(1, pi(m', theta') j(m | m') prod_dropped g(u_i) / [pi(m, theta) j(m' | m) prod_born g(u_i)] |J|).

With location 0 and scale s for every model this is the textbook move with g = N(0, s^2) and unit Jacobian; with
per-model moments it is a moment-matched jump.

With ``global_prob > 0`` each chain independently draws its proposal, with that probability, uniformly from the
other models; the choice does not depend on the state and the uniform draw is symmetric, so the move stays
pi-reversible. With ``swap_prob > 0`` on a :class:`BinarySpace`, a chain proposes, with that probability (also
state-independent), an add-one-drop-one swap of one included and one excluded bit: k is unchanged, so the proposal
probability 1 / (k (p - k)) is the same both ways, and the added coordinate takes the dropped one's (standardised)
value, with no auxiliary draw.
The within-model random walk and the chains' state are shared with TRJ (:mod:`methods.common.chains`).
Details (why global jumps and swaps): docs/methods.md, "Methods" ("Global jumps", "Swap moves").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from methods.common.chains import ChainState, metropolis_accept, select_rows
from suite.core.model_space import BinarySpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import row_sum, standard_normal

#: (model indices [C], their masks [C, D]) -> per-chain location and scale [C, D] of the jump's
#: standardisation and the log-determinant sum of log scale over active coordinates [C].
Standardiser = Callable[[Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


def init_state(
    problem: Problem, num_chains: int, aux_scale: float, dtype: torch.dtype, generator: torch.Generator
) -> ChainState:
    """Uniformly drawn models with every coordinate drawn from the auxiliary density."""
    model_index = problem.model_space.sample_uniform(num_chains, generator)
    theta = aux_scale * torch.randn(
        num_chains, problem.dim_max, generator=generator, dtype=dtype, device=generator.device
    )
    return ChainState(model_index, theta, problem.log_joint(model_index, theta))


def propose_model(
    problem: Problem,
    model_index: Tensor,
    generator: torch.Generator,
    global_prob: float = 0.0,
    swap_prob: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """The space's jump, or a uniform other model (``global_prob``) or a bit swap (``swap_prob``); models, log ratios.

    One uniform U per chain picks the move: U < global_prob a uniform draw, then up to global_prob + swap_prob a
    swap (binary spaces only; ignored elsewhere), else the space's own jump. With both weights 0 no extra random
    numbers are drawn, so the neighbour-only stream is unchanged (and so is the global-only one without swaps).
    """
    m_new, log_ratio, _ = _propose(problem, model_index, generator, global_prob, swap_prob)
    return m_new, log_ratio


def _propose(
    problem: Problem, model_index: Tensor, generator: torch.Generator, global_prob: float, swap_prob: float
) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`propose_model`'s models and log ratios, and which chains proposed a swap (None without swaps)."""
    m_new, log_ratio = problem.model_space.propose_jump(model_index, generator)
    swap = swap_prob > 0.0 and isinstance(problem.model_space, BinarySpace)
    if global_prob <= 0.0 and not swap:
        return m_new, log_ratio, None
    uniform = _uniform_other(problem, model_index, generator) if global_prob > 0.0 else m_new
    u = torch.rand(model_index.shape, generator=generator, device=model_index.device)
    coin = u < global_prob
    m_new, log_ratio = torch.where(coin, uniform, m_new), torch.where(coin, torch.zeros_like(log_ratio), log_ratio)
    if not swap:
        return m_new, log_ratio, None
    swapped = propose_swap(problem.model_space, model_index, generator)
    take = ~coin & (u < global_prob + swap_prob)
    m_new, log_ratio = torch.where(take, swapped, m_new), torch.where(take, torch.zeros_like(log_ratio), log_ratio)
    return m_new, log_ratio, take


def propose_swap(space: BinarySpace, model_index: Tensor, generator: torch.Generator) -> Tensor:
    """Flip one uniformly chosen included bit and one uniformly chosen excluded bit (symmetric, k fixed).

    A model with no included or no excluded bit proposes itself. The swap kernel is then the identity there,
    which is trivially pi-reversible, and the reverse of any swap that is made is a swap from a model with
    0 < k < p; so the kernel stays pi-reversible for any target. Falling back to a single-bit flip instead would
    not be: from k = 0 it could reach k = 1, from where no swap leads back.
    """
    bits = space.bits(model_index)
    # The argmax of uniform keys over a subset is a uniform element of it (ties have probability zero).
    keys = torch.rand(bits.shape, generator=generator, device=model_index.device)
    drop = torch.where(bits, keys, -1.0).argmax(-1)
    add = torch.where(bits, -1.0, keys).argmax(-1)
    k = bits.sum(-1)
    movable = (k > 0) & (k < space.num_bits)
    return torch.where(movable, model_index ^ (1 << drop) ^ (1 << add), model_index)


def _uniform_other(problem: Problem, model_index: Tensor, generator: torch.Generator) -> Tensor:
    """A uniform draw from the other models (symmetric); on spaces that cannot be counted, from all models."""
    num_models = problem.model_space.num_models
    if num_models is None or num_models < 2:
        return problem.model_space.sample_uniform(model_index.shape[0], generator)
    shift = torch.randint(1, num_models, model_index.shape, generator=generator, device=model_index.device)
    return (model_index + shift) % num_models


def between_model_move(
    problem: Problem,
    state: ChainState,
    standardiser: Standardiser,
    generator: torch.Generator,
    global_prob: float = 0.0,
    swap_prob: float = 0.0,
) -> tuple[ChainState, Tensor]:
    """One independent-auxiliary jump per chain; returns the new state and the accept flags.

    With per-model location ``a_m`` and scale ``b_m`` (from ``standardiser``),
    shared coordinates keep their standardised value ``(theta_i - a_mi) / b_mi``,
    born ones take ``u_i ~ N(0, 1)`` and dropped ones give up theta's
    standardised value as ``u_i``. The Jacobian of this map is
    ``prod_{A'} b_m'i / prod_A b_mi``. ``global_prob``, ``swap_prob``: see :func:`propose_model`.
    """
    m, theta, log_joint = state
    m_new, log_jump_ratio, swapped = _propose(problem, m, generator, global_prob, swap_prob)
    active, active_new = problem.mask(m), problem.mask(m_new)
    loc, scale, log_det = standardiser(m, active)
    loc_new, scale_new, log_det_new = standardiser(m_new, active_new)
    dtype = theta.dtype
    z = (theta - loc) / scale
    u = standard_normal(theta.shape, generator, dtype, theta.device)
    is_dropped, is_born = active & ~active_new, active_new & ~active
    source = torch.where(active, z, u)
    if swapped is not None:
        # A swap that drops one coordinate and adds one moves the dropped coordinate's standardised value to the
        # added one (no auxiliary variable): a permutation, so the Jacobian is still log_det_new - log_det. The
        # reverse swap (m' to m, also proposed as a swap) has one dropped and one born coordinate too and moves it back.
        transfer = swapped & (is_dropped.sum(-1) == 1) & (is_born.sum(-1) == 1)
        z_dropped = row_sum(torch.where(is_dropped, z, torch.zeros_like(z)))
        source = torch.where(transfer[:, None] & is_born, z_dropped[:, None], source)
        is_dropped, is_born = is_dropped & ~transfer[:, None], is_born & ~transfer[:, None]
    theta_new = torch.where(active_new, torch.addcmul(loc_new, scale_new, source), theta)
    # log phi(u) over dropped coordinates minus log phi(u) over born ones.
    log_phi_z = torch.addcmul(_neg_log_sqrt_2pi(theta), z, z, value=-0.5)
    log_phi_u = torch.addcmul(_neg_log_sqrt_2pi(theta), u, u, value=-0.5)
    dropped, born = is_dropped.to(dtype), is_born.to(dtype)
    log_aux_ratio = row_sum(torch.addcmul(dropped * log_phi_z, born, log_phi_u, value=-1.0))
    log_joint_new = problem.log_joint(m_new, theta_new)
    log_alpha = (log_joint_new - log_joint) + (log_jump_ratio + log_aux_ratio) + (log_det_new - log_det)
    accept = metropolis_accept(log_alpha, generator)
    return ChainState(
        torch.where(accept, m_new, m),
        select_rows(accept, theta_new, theta),
        torch.where(accept, log_joint_new, log_joint),
    ), accept


_CONSTANTS: dict[tuple[torch.dtype, torch.device], Tensor] = {}


def _neg_log_sqrt_2pi(like: Tensor) -> Tensor:
    """Scalar tensor -log sqrt(2 pi) in ``like``'s dtype and device (cached: scalars cost a copy per call)."""
    key = (like.dtype, like.device)
    if key not in _CONSTANTS:
        _CONSTANTS[key] = torch.tensor(-LOG_SQRT_2PI, dtype=like.dtype, device=like.device)
    return _CONSTANTS[key]
