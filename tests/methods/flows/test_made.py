"""MADE conditioners and MADE+: outputs of coordinate i read only earlier coordinates; identity start."""

from __future__ import annotations

import pytest
import torch

from methods.flows.made import IncrementalMADE, MADEConditioner, MADEPlus, degree_mask, zeroed_made

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
    assert not made.has_context
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


def _sequential_outputs(full, engine, inputs: torch.Tensor, widths: list[int]) -> tuple[list, list]:
    """Outputs of each variable from full passes and from the incremental engine, filling inputs in order."""
    x = torch.zeros_like(inputs)
    by_pass, by_engine, start = [], [], 0
    for v, width in enumerate(widths):
        rows = slice(start, start + width)
        by_pass.append(full(x)[:, rows])
        by_engine.append(engine.outputs(x, v, rows))
        x[:, v] = inputs[:, v]
        start += width
    return by_pass, by_engine


def test_incremental_made_equals_full_passes_for_nflows_made() -> None:
    torch.manual_seed(0)
    for features in (1, 2, 7):
        made = _perturbed(zeroed_made(features, 3 * features + 2, None, 3, 1, torch.nn.functional.leaky_relu), 4)
        made = made.double()
        bits = torch.bernoulli(torch.full((64, features), 0.5, dtype=F64), generator=torch.Generator().manual_seed(5))
        engine = IncrementalMADE.of_nflows(made, 64)
        by_pass, by_engine = _sequential_outputs(made, engine, bits, [1] * features)
        for a, b in zip(by_pass, by_engine, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_incremental_made_equals_full_passes_for_made_plus() -> None:
    torch.manual_seed(0)
    cards = [4, 3, 2, 2, 2, 2]
    made = _perturbed(MADEPlus(cards, 32, 2, logit_clamp=500.0).double(), 6)
    g = torch.Generator().manual_seed(7)
    values = torch.stack([torch.randint(k, (50,), generator=g) for k in cards], -1).to(F64)
    engine = IncrementalMADE.of_made_plus(made, 50)
    by_pass, by_engine = _sequential_outputs(lambda x: made.final(made.features(x)), engine, values, made.widths)
    for a, b in zip(by_pass, by_engine, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_incremental_made_refuses_a_context() -> None:
    made = zeroed_made(3, 8, 2, 2, 1)
    with pytest.raises(ValueError, match="without context"):
        IncrementalMADE.of_nflows(made, 4)


@pytest.mark.parametrize("context_kind", ["float", "index", "none"])
def test_packed_made_is_nflows_made_plus_shortcut(context_kind: str) -> None:
    """PackedMADE computes nflows' residual MADE plus the context shortcut, and the same parameter gradients
    (1e-12 in float64: only summation orders differ); masked weight entries get zero gradient."""
    from nflows.transforms.made import MADE

    from methods.flows.made import PackedMADE

    torch.manual_seed(3)
    features, hidden, blocks, multiplier, num_contexts = 4, 12, 3, 2, 6
    context_dim = None if context_kind == "none" else num_contexts
    made = MADE(features, hidden, context_dim, blocks, multiplier, activation=torch.nn.functional.leaky_relu).double()
    shortcut = None if context_dim is None else torch.nn.Linear(num_contexts, features * multiplier, bias=False)
    if shortcut is not None:
        shortcut.double()
    _perturbed(made, 4)
    packed = PackedMADE(made, shortcut)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, features, generator=g, dtype=F64)
    index = torch.randint(num_contexts, (9,), generator=g)
    context = {
        "float": torch.randn(9, num_contexts, generator=g, dtype=F64),
        "index": index,
        "none": None,
    }[context_kind]
    one_hot = torch.eye(num_contexts, dtype=F64)[index]
    dense = None if context is None else (context if context_kind == "float" else one_hot)
    expected = made(x, dense) + (0.0 if shortcut is None else shortcut(dense))
    got = packed(x, context)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    weights = torch.randn(expected.shape, generator=g, dtype=F64)
    (expected * weights).sum().backward()
    (got * weights).sum().backward()
    torch.testing.assert_close(packed.initial_weight.grad, made.initial_layer.weight.grad * made.initial_layer.mask)
    torch.testing.assert_close(packed.final_bias.grad, made.final_layer.bias.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        packed.block_weights.grad[2], made.blocks[1].linear_layers[0].weight.grad, rtol=1e-12, atol=1e-12
    )
    assert torch.equal(packed.block_weights[1], made.blocks[0].linear_layers[1].weight)  # the values taken over
    if context_kind != "none":
        h = hidden
        block_map = made.blocks[0].context_layer.weight.grad
        torch.testing.assert_close(packed.context_weight.grad[:, h : 2 * h].t(), block_map, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(packed.context_weight.grad[:, -features * multiplier :].t(), shortcut.weight.grad)
