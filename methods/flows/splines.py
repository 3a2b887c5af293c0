"""The monotone rational-quadratic spline of [0, 1] onto itself (Durkan et al. 2019), parameterised as nflows'."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

#: Minimum bin width, bin height and knot derivative (nflows' defaults, and the VTI and TRJ codes').
MIN_BIN = 1e-3
#: Derivatives are MIN_BIN + softplus(raw); this raw value gives derivative 1.
DERIVATIVE_AT_IDENTITY = math.log(math.expm1(1.0 - MIN_BIN))


def rq_spline(x: Tensor, raw: Tensor, inverse: bool = False, derivative_offset: float = 0.0) -> tuple[Tensor, Tensor]:
    """Monotone rational-quadratic spline of [0, 1] onto itself, elementwise, and log |dy/dx|.

    ``raw`` is ``[..., 3K + 1]``: K width logits, K height logits, K + 1 raw knot
    derivatives, parameterised as nflows' ``rational_quadratic_spline`` (softmax bin
    sizes with a 1e-3 floor, derivatives 1e-3 + softplus(raw + ``derivative_offset``)).
    It computes the same values with fewer passes over the ``[..., K]`` tables: one bin
    search and one gather of both knots of the bin, and softplus only at those knots.
    Inputs must lie in [0, 1] (they are not checked).
    """
    k = (raw.shape[-1] - 1) // 3
    logits = raw[..., : 2 * k].unflatten(-1, (2, k))  # widths and heights together
    # softmax written out: torch.softmax over a short last dimension is several times slower on CPU.
    e = torch.exp(logits - logits.detach().amax(-1, keepdim=True))
    size = MIN_BIN + (1.0 - MIN_BIN * k) * (e / e.sum(-1, keepdim=True))
    inner = torch.cumsum(size[..., :-1], dim=-1)
    edge = torch.zeros_like(size[..., :1])
    knots = torch.cat([edge, inner, edge + 1.0], dim=-1).unbind(-2)  # [..., K + 1] each, exactly 0 and 1 at the ends
    # The bin of each input: interior knots at or below it (no clamp needed for inputs in [0, 1]).
    search = knots[1] if inverse else knots[0]
    bin_idx = torch.searchsorted(search[..., 1:-1].contiguous(), x.unsqueeze(-1), right=True)
    table = torch.stack([knots[0], knots[1], raw[..., 2 * k :]], dim=-2)  # [..., 3, K + 1]
    index = torch.cat([bin_idx, bin_idx + 1], dim=-1).unsqueeze(-2).expand(*bin_idx.shape[:-1], 3, 2)
    ends = table.gather(-1, index)  # [..., 3, 2]: (x, y, raw derivative) at both knots of the bin
    x0, y0 = ends[..., 0, 0], ends[..., 1, 0]
    width, height = ends[..., 0, 1] - x0, ends[..., 1, 1] - y0
    raw_deriv = ends[..., 2, :] if derivative_offset == 0.0 else ends[..., 2, :] + derivative_offset
    deriv = MIN_BIN + F.softplus(raw_deriv)
    d0, d1 = deriv[..., 0], deriv[..., 1]
    slope = height / width
    curve = d0 + d1 - 2.0 * slope
    if inverse:
        dy = x - y0
        a = dy * curve + height * (slope - d0)
        b = height * d0 - dy * curve
        c = -slope * dy
        root = (2.0 * c) / (-b - torch.sqrt((b * b - 4.0 * a * c).clamp_min(0.0)))
        xi = root
        out = root * width + x0
    else:
        xi = (x - x0) / width
        out = None
    xi_1m = xi * (1.0 - xi)
    denominator = slope + curve * xi_1m
    log_num = torch.log(d1 * xi * xi + 2.0 * slope * xi_1m + d0 * (1.0 - xi) * (1.0 - xi))
    log_deriv = 2.0 * torch.log(slope) + log_num - 2.0 * torch.log(denominator)
    if inverse:
        return out, -log_deriv
    return y0 + height * (slope * xi * xi + d0 * xi_1m) / denominator, log_deriv
