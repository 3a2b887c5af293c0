"""Stick-breaking between unconstrained logits z and the gap proportions of k ordered change points in (0, L).

v_j = sigmoid(z_j) is the fraction of what remains of [0, L] after s_{j-1} that the j-th gap takes:
s_j = s_{j-1} + v_j (L - s_{j-1}), so p_{j-1} = v_j R_{j-1} with R_j = prod_{i <= j} (1 - v_i), and p_k = R_k.
Why stick-breaking: the map is nested, so adding z_{k+1} (a birth) keeps s_1..s_k and splits the last segment,
and dropping z_k (a death) merges the last two; generic transdimensional samplers that keep shared coordinates
then make Green (1995)'s birth and death moves in the last segment.

The Jacobian of z -> (p_0..p_{k-1}) is triangular: prod_j v_j (1 - v_j) R_{j-1}; positions s = L cumsum(p)
contribute a further L^k.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from suite.core.tensor_ops import row_sum


def gaps_from_logits(z: Tensor, on_z: Tensor, closed: Tensor) -> tuple[Tensor, Tensor]:
    """log p_j [B, k_max + 1] (-inf beyond slot k) and log |d(p_0..p_{k-1}) / dz| [B].

    ``z`` holds zeros where inactive, ``on_z`` is the float mask of the k active logits and ``closed`` is 0 for
    slots 0..k and -inf beyond.
    """
    log_v = -F.softplus(-z) * on_z
    log_rest = -F.softplus(z) * on_z  # log (1 - v_j)
    log_remain = torch.cumsum(torch.cat([log_rest.new_zeros(len(z), 1), log_rest], 1), -1)  # log R_0..R_kmax
    log_v_pad = torch.cat([log_v, log_v.new_zeros(len(z), 1)], 1)
    log_gap = log_v_pad + log_remain + closed  # slot j < k: log v_{j+1} + log R_j; slot k: log R_k
    log_jacobian = row_sum(log_v + log_rest + log_remain[:, :-1] * on_z)
    return log_gap, log_jacobian


def logits_from_positions(positions: Tensor, on_z: Tensor, length: float) -> Tensor:
    """z_j = log(s_j - s_{j-1}) - log(L - s_j) for active slots, 0 elsewhere (the inverse map)."""
    previous = torch.cat([positions.new_zeros(len(positions), 1), positions[:, :-1]], 1)
    gap = (positions - previous).clamp_min(1e-300)
    rest = (length - positions).clamp_min(1e-300)
    return torch.where(on_z, torch.log(gap) - torch.log(rest), 0.0)
