"""Affine maps: positive scale at zero, exact inverses and log-determinants."""

from __future__ import annotations

import torch

from methods.flows.affine import SCALE_FLOOR, CholeskyAffine, positive_scale, scale_shift

F64 = torch.float64


def test_positive_scale_is_one_at_zero_and_positive() -> None:
    assert float(positive_scale(torch.zeros((), dtype=F64))) == 1.0 + SCALE_FLOOR
    assert float(positive_scale(torch.tensor(-800.0, dtype=F64))) >= SCALE_FLOOR


def test_scale_shift_inverse_and_log_derivative() -> None:
    g = torch.Generator().manual_seed(0)
    x, raw, shift = (torch.randn(32, 5, generator=g, dtype=F64) for _ in range(3))
    y, log_d = scale_shift(x, raw, shift)
    x_back, log_d_inverse = scale_shift(y, raw, shift, inverse=True)
    torch.testing.assert_close(x_back, x, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(log_d_inverse, -log_d, rtol=0, atol=0)
    torch.testing.assert_close(log_d, torch.log(positive_scale(raw)), rtol=0, atol=0)


def test_cholesky_affine_whitens_and_inverts() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 3, generator=g, dtype=F64)
    cov = a @ a.T + 0.5 * torch.eye(3, dtype=F64)
    chol, mean = torch.linalg.cholesky(cov), torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    block = CholeskyAffine(mean, chol)
    x = torch.randn(64, 3, generator=g, dtype=F64)
    z, log_det = block(x)
    torch.testing.assert_close(z, torch.linalg.solve(chol, (x - mean).T).T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(log_det, torch.full((64,), -0.5 * float(torch.logdet(cov)), dtype=F64))
    x_back, log_det_inverse = block.inverse(z)
    torch.testing.assert_close(x_back, x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(log_det_inverse, -log_det, rtol=0, atol=0)
