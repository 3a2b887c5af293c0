"""Affine maps: the positive scale of flow layers, elementwise scale-and-shift, and a Cholesky affine block."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Lower bound added to every positive scale (VTI code: softplus(.) + 1e-6).
SCALE_FLOOR = 1e-6
#: softplus with beta = ln 2 maps 0 to 1, so zero-initialised layers are the identity.
SOFTPLUS_BETA = math.log(2.0)


def positive_scale(raw: Tensor) -> Tensor:
    """softplus_{ln 2}(raw) + 1e-6: equals 1 + 1e-6 at raw = 0."""
    return F.softplus(raw, beta=SOFTPLUS_BETA) + SCALE_FLOOR


def scale_shift(x: Tensor, raw_scale: Tensor, shift: Tensor, inverse: bool = False) -> tuple[Tensor, Tensor]:
    """y = s x + t with s = :func:`positive_scale` (raw_scale), or its inverse; and log |dy/dx| (or |dx/dy|)."""
    scale = positive_scale(raw_scale)
    if inverse:
        return (x - shift) / scale, -torch.log(scale)
    return scale * x + shift, torch.log(scale)


class CholeskyAffine(nn.Module):
    """z = L^{-1} (x - mean) with a fixed mean and lower Cholesky factor L (target -> reference)."""

    def __init__(self, mean: Tensor, chol: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("chol_t", chol.T.contiguous())
        self.register_buffer("log_det", torch.log(torch.diagonal(chol)).sum())

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Target -> reference: z and log |det dz/dx| ``[B]``."""
        # Row form: z^T = (x - mean)^T L^{-T}, a triangular solve from the right.
        z = torch.linalg.solve_triangular(self.chol_t, x - self.mean, upper=True, left=False)
        return z, (-self.log_det).expand(x.shape[0])

    def inverse(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Reference -> target: x and log |det dx/dz| ``[B]``."""
        return z @ self.chol_t + self.mean, self.log_det.expand(z.shape[0])
