"""The rational-quadratic spline: a monotone bijection of [0, 1], exact inverse and log-derivative, identity start."""

from __future__ import annotations

import torch
from nflows.transforms.splines.rational_quadratic import rational_quadratic_spline

from methods.flows.splines import DERIVATIVE_AT_IDENTITY, rq_spline

F64 = torch.float64
BINS = 10


def _raw_and_x(seed: int = 0, rows: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    raw = 2.0 * torch.randn(rows, 3, 3 * BINS + 1, generator=g, dtype=F64)
    x = torch.rand(rows, 3, generator=g, dtype=F64)
    x[0, 0], x[0, 1] = 0.0, 1.0  # the end points are knots
    return raw, x


def test_inverse_undoes_forward_with_opposite_log_derivative() -> None:
    raw, x = _raw_and_x()
    y, log_d = rq_spline(x, raw)
    x_back, log_d_inverse = rq_spline(y, raw, inverse=True)
    # The root of a quadratic in float64: a few ulps of x, amplified by at most 1/min derivative (1e3).
    torch.testing.assert_close(x_back, x, rtol=0, atol=1e-11)
    torch.testing.assert_close(log_d_inverse, -log_d, rtol=0, atol=1e-9)
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0 + 1e-15
    torch.testing.assert_close(y[0, :2], torch.tensor([0.0, 1.0], dtype=F64), rtol=0, atol=1e-15)


def test_log_derivative_is_the_autograd_derivative() -> None:
    raw, x = _raw_and_x(1, 50)
    x = x.requires_grad_(True)
    y, log_d = rq_spline(x, raw)
    (grad,) = torch.autograd.grad(y.sum(), x)  # elementwise map: the gradient of the sum is dy_i/dx_i
    torch.testing.assert_close(log_d, torch.log(grad), rtol=0, atol=1e-10)


def test_monotone() -> None:
    g = torch.Generator().manual_seed(2)
    raw = 3.0 * torch.randn(1, 3 * BINS + 1, generator=g, dtype=F64).expand(1001, -1)
    y, _ = rq_spline(torch.linspace(0, 1, 1001, dtype=F64), raw)
    assert bool((y.diff() > 0).all())


def test_identity_at_equal_bins_and_unit_derivatives() -> None:
    """Zero logits with derivative raw DERIVATIVE_AT_IDENTITY (or zero raw with that offset) is the identity."""
    x = torch.linspace(0, 1, 101, dtype=F64)
    raw = torch.zeros(101, 3 * BINS + 1, dtype=F64)
    raw[:, 2 * BINS :] = DERIVATIVE_AT_IDENTITY
    for y, log_d in (rq_spline(x, raw), rq_spline(x, torch.zeros_like(raw), derivative_offset=DERIVATIVE_AT_IDENTITY)):
        torch.testing.assert_close(y, x, rtol=0, atol=1e-15)
        torch.testing.assert_close(log_d, torch.zeros_like(x), rtol=0, atol=1e-14)


def test_derivative_offset_equals_shifting_the_raw_derivatives() -> None:
    raw, x = _raw_and_x(3, 100)
    shifted = raw.clone()
    shifted[..., 2 * BINS :] += 0.7
    for inverse in (False, True):
        expected = rq_spline(x, shifted, inverse=inverse)
        got = rq_spline(x, raw, inverse=inverse, derivative_offset=0.7)
        # Same arithmetic; softplus on a strided view may take another vector path (1 ulp).
        torch.testing.assert_close(got, expected, rtol=1e-15, atol=1e-15)


def test_spline_matches_nflows() -> None:
    """The lean spline computes nflows' rational-quadratic spline (same parameterisation) both ways."""
    g = torch.Generator().manual_seed(0)
    raw = 2.0 * torch.randn(2000, 3, 31, generator=g, dtype=F64)
    x = torch.rand(2000, 3, generator=g, dtype=F64)
    x[0, 0], x[0, 1] = 0.0, 1.0
    for inverse in (False, True):
        y, log_d = rq_spline(x, raw, inverse=inverse)
        y_ref, log_d_ref = rational_quadratic_spline(x, raw[..., :10], raw[..., 10:20], raw[..., 20:], inverse=inverse)
        # Rounding only: the softmax is written out and the knot sums are ordered differently.
        torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(log_d, log_d_ref, rtol=0, atol=1e-9)
