"""MADE: masked autoregressive networks. The one module that imports nflows (its residual MADE).

* :func:`degree_mask`: the MADE connectivity rule between units of given degrees.
* :func:`zeroed_made`: nflows' residual MADE with a zeroed final layer (VTI's bit sampler uses it bare).
* :class:`MADEConditioner`: base of autoregressive flow layers, an nflows residual MADE with a zeroed
  final layer plus a zeroed linear shortcut from the context (VTI CoSMIC layers, TRJ spline layers).
* :class:`MADEPlus`: a residual MADE with a different number of outputs per variable (VTI App. F.8).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from nflows.transforms.made import MADE
from torch import Tensor, nn

__all__ = ["MADE", "MADEConditioner", "MADEPlus", "MaskedLinear", "degree_mask", "zeroed_made"]


def degree_mask(in_degrees: Tensor, out_degrees: Tensor, strict: bool) -> Tensor:
    """Bool ``[out, in]``: unit j may read unit i when degree_j > degree_i (strict) or >= (hidden units)."""
    if strict:
        return out_degrees[:, None] > in_degrees[None, :]
    return out_degrees[:, None] >= in_degrees[None, :]


def zeroed_made(
    features: int,
    hidden: int,
    context_dim: int | None,
    num_blocks: int,
    multiplier: int,
    activation: Callable[[Tensor], Tensor] = F.relu,
) -> MADE:
    """nflows' residual MADE with its final layer zeroed: every output starts at 0 whatever the input."""
    made = MADE(
        features=features,
        hidden_features=hidden,
        context_features=context_dim,
        num_blocks=num_blocks,
        output_multiplier=multiplier,
        use_residual_blocks=True,
        activation=activation,
    )
    nn.init.zeros_(made.final_layer.weight)
    nn.init.zeros_(made.final_layer.bias)
    return made


class MADEConditioner(nn.Module):
    """Autoregressive conditioner: ``features x multiplier`` outputs, those of coordinate i read x_<i only.

    ``made`` is nflows' MADE with residual blocks, its final layer zeroed so that an
    untrained layer sees all-zero parameters. In that MADE the outputs of the first
    coordinate connect to no hidden unit (its degree admits none), so they are a bare
    bias that ignores the context: the first coordinate would get the same transform
    for every context. With a context, a zero-initialised linear map from it straight
    to the outputs (``context_out``) fixes this without touching the autoregressive
    structure (the context is not a coordinate).
    """

    def __init__(
        self,
        features: int,
        hidden: int,
        context_dim: int | None,
        num_blocks: int,
        multiplier: int,
        activation: Callable[[Tensor], Tensor] = F.relu,
    ) -> None:
        super().__init__()
        self.features, self.multiplier = features, multiplier
        self.made = zeroed_made(features, hidden, context_dim, num_blocks, multiplier, activation)
        self.context_out = None
        if context_dim is not None:
            self.context_out = nn.Linear(context_dim, features * multiplier, bias=False)
            nn.init.zeros_(self.context_out.weight)

    def conditioner(self, x: Tensor, context: Tensor | None) -> Tensor:
        """Outputs ``[B, features, multiplier]`` (nflows lays them out per feature)."""
        out = self.made(x, context)
        if self.context_out is not None:
            out = out + self.context_out(context)
        return out.view(x.shape[0], self.features, self.multiplier)


class MaskedLinear(nn.Linear):
    """A linear layer whose weight is multiplied by a fixed 0/1 connectivity mask (:func:`degree_mask`)."""

    def __init__(self, in_degrees: Tensor, out_degrees: Tensor, strict: bool) -> None:
        super().__init__(len(in_degrees), len(out_degrees))
        self.register_buffer("mask", degree_mask(in_degrees, out_degrees, strict).to(self.weight.dtype))

    def forward(self, x: Tensor) -> Tensor:
        """x W^T (masked) + b."""
        return F.linear(x, self.weight * self.mask, self.bias)


class MADEPlus(nn.Module):
    """Masked autoregressive MLP with K_v outputs for categorical variable v and 1 for a binary one.

    The output units of variable v repeat its degree v + 1 (the per-dimension output
    multiplier r(v) of VTI App. F.8); residual ReLU blocks, final layer zero-initialised,
    outputs clamped to ±``logit_clamp``.
    """

    def __init__(self, cardinalities: list[int], hidden: int, num_blocks: int, logit_clamp: float) -> None:
        super().__init__()
        v = len(cardinalities)
        self.logit_clamp = logit_clamp
        self.widths = [k if k > 2 else 1 for k in cardinalities]
        in_degrees = torch.arange(1, v + 1)
        hidden_degrees = torch.arange(hidden) % max(v - 1, 1) + 1
        out_degrees = torch.repeat_interleave(in_degrees, torch.tensor(self.widths))
        self.first = MaskedLinear(in_degrees, hidden_degrees, strict=False)
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                [
                    MaskedLinear(hidden_degrees, hidden_degrees, False),
                    MaskedLinear(hidden_degrees, hidden_degrees, False),
                ]
            )
            for _ in range(num_blocks)
        )
        self.final = MaskedLinear(hidden_degrees, out_degrees, strict=True)
        with torch.no_grad():
            self.final.weight.zero_()
            self.final.bias.zero_()

    def features(self, values: Tensor) -> Tensor:
        """Last hidden layer ``[B, hidden]`` (after its ReLU) for variable values ``[B, V]`` (as floats)."""
        h = self.first(values)
        for first, second in self.blocks:
            h = h + second(torch.relu(first(torch.relu(h))))
        return torch.relu(h)

    def forward(self, values: Tensor) -> Tensor:
        """Raw outputs ``[B, sum_v width_v]`` (clamped) for variable values ``[B, V]`` (as floats)."""
        return self.final(self.features(values)).clamp(-self.logit_clamp, self.logit_clamp)

    def outputs_of(self, features: Tensor, rows: slice) -> Tensor:
        """The final layer's outputs ``rows`` only (one variable's logits during sequential sampling)."""
        weight = self.final.weight[rows] * self.final.mask[rows]
        return F.linear(features, weight, self.final.bias[rows]).clamp(-self.logit_clamp, self.logit_clamp)
