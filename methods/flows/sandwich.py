"""The sigmoid sandwich z = logit(F(sigmoid(x))) around a map F of [0, 1] (a spline or a stack of them)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from suite.core.tensor_ops import row_sum

#: F: values in [0, 1] -> (F(values), log |det dF|), either elementwise (same shape) or summed per row ``[B]``.
UnitMap = Callable[[Tensor], tuple[Tensor, Tensor]]


def log_sigmoid_derivative(x: Tensor) -> Tensor:
    """log d sigmoid(x)/dx, exact for any x."""
    return -F.softplus(-x) - F.softplus(x)


def logit(t: Tensor, eps: float | None = None) -> tuple[Tensor, Tensor]:
    """logit(t) and log d logit/dt, with t clamped to [eps, 1 - eps] (None: the dtype's smallest margins).

    With ``eps=None`` t is kept off 0 and 1 just enough that saturated values stay finite.
    """
    if eps is None:
        finfo = torch.finfo(t.dtype)
        t = t.clamp(finfo.tiny, 1.0 - finfo.eps / 2)
    else:
        t = t.clamp(eps, 1 - eps)
    log_t, log_1mt = torch.log(t), torch.log1p(-t)
    return log_t - log_1mt, -log_t - log_1mt


def sigmoid_sandwich(x: Tensor, inner: UnitMap, eps: float | None = None) -> tuple[Tensor, Tensor]:
    """z = logit(inner(sigmoid(x))) and log |dz/dx|: elementwise if ``inner``'s log-determinant is, else ``[B]``.

    ``eps`` (e.g. 1e-6, nflows' ``Logit`` default) clamps sigmoid(x) and inner's output to [eps, 1 - eps];
    None leaves sigmoid(x) as it is and clamps only as far as :func:`logit` needs. The inverse of a
    sandwich is the sandwich of the inverse map.
    """
    s = torch.sigmoid(x)
    if eps is not None:
        s = s.clamp(eps, 1 - eps)
    v, log_det = inner(s)
    z, log_dlogit = logit(v, eps)
    if log_det.dim() == x.dim():
        return z, log_sigmoid_derivative(x) + log_det + log_dlogit
    return z, log_det + row_sum(log_sigmoid_derivative(x) + log_dlogit)
