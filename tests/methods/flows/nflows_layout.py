"""A module's tensors in the layout they had before :class:`~methods.flows.made.PackedMADE` (nflows' modules).

The regression fixture ``layers_before.json`` checksums state dicts and perturbs parameters tensor by tensor, in
the order and shapes of nflows' residual MADE plus the context shortcut. Packing changed that layout, not the
function; these walks give views of the packed tensors in the old order, so the fixture still applies.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from methods.flows.made import MADEConditioner, PackedMADE


def _packed_tensors(net: PackedMADE, features: int, multiplier: int, with_buffers: bool) -> Iterator[Tensor]:
    """nflows' MADE (initial layer, context layer, blocks, final layer), then the shortcut, as views."""
    hidden_degrees = net.initial_mask.sum(1).round().to(torch.int64)
    output_degrees = torch.arange(1, features + 1).repeat_interleave(multiplier)

    def masked_linear(weight: Tensor, bias: Tensor, mask: Tensor, degrees: Tensor) -> Iterator[Tensor]:
        yield weight
        yield bias
        if with_buffers:
            yield mask
            yield degrees

    has_context = net.context_weight is not None
    starts = [0]
    for size in net.context_sizes:
        starts.append(starts[-1] + size)

    def context_map(i: int, with_bias: bool = True) -> Iterator[Tensor]:
        yield net.context_weight[:, starts[i] : starts[i + 1]].t()
        if with_bias:
            yield net.context_bias[starts[i] : starts[i + 1]]

    yield from masked_linear(net.initial_weight, net.initial_bias, net.initial_mask, hidden_degrees)
    if has_context:
        yield from context_map(0)
    for k in range(net.num_blocks):
        if has_context:
            yield from context_map(k + 1)
        for j in (2 * k, 2 * k + 1):
            yield from masked_linear(net.block_weights[j], net.block_biases[j], net.block_masks[j], hidden_degrees)
    yield from masked_linear(net.final_weight, net.final_bias, net.final_mask, output_degrees)
    if len(net.context_sizes) > net.num_blocks + 1:
        yield from context_map(net.num_blocks + 1, with_bias=False)


def old_layout(module: nn.Module, with_buffers: bool) -> Iterator[Tensor]:
    """Parameters (and, with ``with_buffers``, buffers) in ``state_dict`` order with MADEs in nflows' layout."""
    if isinstance(module, MADEConditioner):
        yield from _packed_tensors(module.net, module.features, module.multiplier, with_buffers)
        return
    yield from (p for p in module._parameters.values() if p is not None)
    if with_buffers:
        skip = module._non_persistent_buffers_set
        yield from (b for name, b in module._buffers.items() if b is not None and name not in skip)
    for child in module._modules.values():
        if child is not None:
            yield from old_layout(child, with_buffers)
