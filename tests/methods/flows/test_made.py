"""MADE conditioners and MADE+: outputs of coordinate i read only earlier coordinates; identity start."""

from __future__ import annotations

import torch

from methods.flows.made import MADEConditioner, MADEPlus, degree_mask

F64 = torch.float64


def _perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def test_degree_mask_rules() -> None:
    d = torch.arange(1, 5)
    assert torch.equal(degree_mask(d, d, strict=True), torch.tril(torch.ones(4, 4, dtype=torch.bool), -1))
    assert torch.equal(degree_mask(d, d, strict=False), torch.tril(torch.ones(4, 4, dtype=torch.bool)))


def test_conditioner_starts_at_zero_and_is_autoregressive() -> None:
    torch.manual_seed(0)
    made = MADEConditioner(features=4, hidden=16, context_dim=2, num_blocks=2, multiplier=3).double()
    g = torch.Generator().manual_seed(1)
    x, context = torch.randn(8, 4, generator=g, dtype=F64), torch.randn(8, 2, generator=g, dtype=F64)
    made.requires_grad_(False)
    assert made.conditioner(x, context).shape == (8, 4, 3)
    assert float(made.conditioner(x, context).abs().max()) == 0.0
    _perturbed(made, 2)
    base = made.conditioner(x, context)
    for i in range(4):
        changed = x.clone()
        changed[:, i:] = torch.randn(8, 4 - i, generator=g, dtype=F64)
        torch.testing.assert_close(made.conditioner(changed, context)[:, : i + 1], base[:, : i + 1], rtol=0, atol=0)
    # Through the context shortcut even the first coordinate's outputs depend on the context.
    assert float((made.conditioner(x, context + 1.0)[:, 0] - base[:, 0]).abs().max()) > 1e-3


def test_conditioner_without_context_has_no_shortcut() -> None:
    made = MADEConditioner(features=3, hidden=8, context_dim=None, num_blocks=1, multiplier=2)
    assert made.context_out is None
    assert made.conditioner(torch.randn(5, 3), None).shape == (5, 3, 2)


def test_made_plus_outputs_of_a_variable_read_only_earlier_variables() -> None:
    torch.manual_seed(0)
    cards = [4, 3, 2, 2]
    net = _perturbed(MADEPlus(cards, hidden=16, num_blocks=2, logit_clamp=500.0).double(), 1)
    starts = [0, 4, 7, 8, 9]  # output columns of each variable (categorical: K_v, binary: 1)
    values = torch.tensor([[3, 2, 1, 0], [0, 1, 0, 1]], dtype=F64)
    base = net(values)
    for v in range(len(cards)):
        changed = values.clone()
        changed[:, v:] = torch.tensor([1.0, 0.0, 1.0, 1.0])[v:]
        torch.testing.assert_close(net(changed)[:, : starts[v + 1]], base[:, : starts[v + 1]], rtol=0, atol=0)
    rows = slice(starts[1], starts[2])
    torch.testing.assert_close(net.outputs_of(net.features(values), rows), base[:, rows], rtol=0, atol=0)
