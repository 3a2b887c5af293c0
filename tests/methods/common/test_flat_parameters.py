"""FlatParameters: one-vector optimiser steps equal the per-tensor ones; views survive backward and state loads."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from methods.common.flat_parameters import FlatParameters

F64 = torch.float64


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()


def test_training_on_the_flat_vector_matches_per_tensor_training() -> None:
    """Ten AdamW steps with clipping: same parameters to 1e-12 (the clip norm is summed in another order)."""
    plain, flat_net = _net(), _net()
    flat = FlatParameters(flat_net)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=0.05, weight_decay=0.01)
    flat_opt = torch.optim.AdamW([flat.vector], lr=0.05, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        x = torch.randn(16, 3, generator=g, dtype=F64)
        plain_opt.zero_grad(set_to_none=True)
        plain(x).square().sum().backward()
        norm_plain = torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
        plain_opt.step()
        flat.zero_grad()
        flat_net(x).square().sum().backward()
        norm_flat = flat.clip_grad_norm_(1.0)
        flat_opt.step()
        assert float(norm_flat) == pytest.approx(float(norm_plain), rel=1e-12)
        assert flat.is_intact()
    for a, b in zip(plain.parameters(), flat_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gradients_accumulate_in_the_views_and_state_loads_write_through() -> None:
    net = _net()
    flat = FlatParameters(net)
    net(torch.ones(4, 3, dtype=F64)).sum().backward()
    reference = _net()
    reference(torch.ones(4, 3, dtype=F64)).sum().backward()
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    torch.testing.assert_close(flat.grad, expected, rtol=1e-12, atol=1e-12)
    state = copy.deepcopy(net.state_dict())
    with torch.no_grad():
        flat.vector.zero_()
    assert float(net[0].weight.detach().abs().sum()) == 0.0  # the module reads the vector
    net.load_state_dict(state)
    assert flat.is_intact()
    torch.testing.assert_close(flat.vector.detach(), torch.cat([v.reshape(-1) for v in state.values()]))


def test_a_moved_module_is_no_longer_intact_and_mixed_dtypes_are_refused() -> None:
    net = _net()
    flat = FlatParameters(net)
    net.float()
    assert not flat.is_intact()
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="one device and dtype"):
        FlatParameters(mixed)
