"""The sigmoid sandwich: logit inverts sigmoid, identity inside gives the identity, both log-det conventions agree."""

from __future__ import annotations

import torch

from methods.flows.sandwich import log_sigmoid_derivative, logit, sigmoid_sandwich

F64 = torch.float64


def _x(seed: int = 0) -> torch.Tensor:
    return 3.0 * torch.randn(64, 4, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _square_map(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u -> u^2 on [0, 1], elementwise, with log 2u."""
    return u * u, torch.log(2.0 * u)


def test_logit_inverts_sigmoid_and_log_derivatives_cancel() -> None:
    x = _x()
    for eps in (None, 1e-6):
        z, log_d = logit(torch.sigmoid(x), eps)
        torch.testing.assert_close(z, x, rtol=0, atol=1e-9)
        torch.testing.assert_close(log_d + log_sigmoid_derivative(x), torch.zeros_like(x), rtol=0, atol=1e-9)


def test_logit_stays_finite_when_saturated() -> None:
    t = torch.tensor([0.0, 1.0], dtype=F64)
    for eps in (None, 1e-6):
        z, log_d = logit(t, eps)
        assert bool(torch.isfinite(z).all() and torch.isfinite(log_d).all())


def test_identity_inside_is_the_identity() -> None:
    x = _x(1)
    z, log_d = sigmoid_sandwich(x, lambda u: (u, torch.zeros_like(u)))
    torch.testing.assert_close(z, x, rtol=0, atol=1e-9)
    torch.testing.assert_close(log_d, torch.zeros_like(x), rtol=0, atol=1e-9)


def test_row_sums_match_elementwise_and_autograd() -> None:
    """A [B] inner log-determinant gives the row sums of the elementwise result; both match autograd."""
    x = _x(2).requires_grad_(True)
    z, log_d = sigmoid_sandwich(x, _square_map)
    _, log_d_rows = sigmoid_sandwich(x, lambda u: (u * u, torch.log(2.0 * u).sum(-1)))
    torch.testing.assert_close(log_d_rows, log_d.sum(-1), rtol=0, atol=1e-12)
    (grad,) = torch.autograd.grad(z.sum(), x)
    torch.testing.assert_close(log_d, torch.log(grad), rtol=0, atol=1e-8)


def test_sandwich_of_the_inverse_inverts() -> None:
    x = _x(3).clamp(-5, 5)
    z, log_d = sigmoid_sandwich(x, _square_map)
    x_back, log_d_back = sigmoid_sandwich(z, lambda v: (torch.sqrt(v), -torch.log(2.0 * torch.sqrt(v))))
    torch.testing.assert_close(x_back, x, rtol=0, atol=1e-8)
    torch.testing.assert_close(log_d_back, -log_d, rtol=0, atol=1e-8)
