"""MADE: masked autoregressive networks. The one module that imports nflows (its residual MADE).

* :func:`degree_mask`: the MADE connectivity rule between units of given degrees.
* :func:`zeroed_made`: nflows' residual MADE with a zeroed final layer (VTI's bit sampler uses it bare).
* :class:`MADEConditioner`: base of autoregressive flow layers, an nflows residual MADE with a zeroed
  final layer plus a zeroed linear shortcut from the context (VTI CoSMIC layers, TRJ spline layers),
  computed by :class:`PackedMADE` (the same function in about half the operations).
* :class:`MADEPlus`: a residual MADE with a different number of outputs per variable (VTI App. F.8).
* :class:`IncrementalMADE`: sequential sampling through either residual MADE at the cost of about one pass.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from nflows.transforms.made import MADE
from torch import Tensor, nn

__all__ = [
    "MADE",
    "IncrementalMADE",
    "MADEConditioner",
    "MADEPlus",
    "MaskedLinear",
    "PackedMADE",
    "degree_mask",
    "zeroed_made",
]


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


class PackedMADE(nn.Module):
    """nflows' residual MADE (optionally with a context and an output shortcut from it) in a few packed tensors.

    The same function as ``made(x, context) + context_out(context)`` with the same parameter values, computed with
    about half the operations: the residual blocks' weights, masks and biases are stacked (one mask product and
    one unbind per pass instead of one product per layer), and every map of the context (the initial layer's,
    each block's and the output shortcut) is one table read once per pass. A CPU iteration of a small flow is
    dominated by the number of operations and parameter tensors, not by arithmetic. The masks are applied in
    every pass, so entries outside the masks may hold anything (they get zero gradient).

    An int64 ``context`` ``[B]`` is read as model indices standing for their one-hot codes (a row lookup of the
    context table, the same numbers as the product with the one-hot code).
    """

    def __init__(self, made: MADE, context_out: nn.Linear | None) -> None:
        super().__init__()
        if not made.use_residual_blocks:
            raise ValueError("PackedMADE needs a residual MADE")
        if any(block.use_batch_norm or block.dropout.p > 0 for block in made.blocks):
            raise ValueError("PackedMADE needs a MADE without batch norm or dropout")
        self.activation = made.activation
        self.num_blocks = len(made.blocks)

        def copy(t: Tensor) -> nn.Parameter:
            return nn.Parameter(t.detach().clone())

        self.initial_weight, self.initial_bias = copy(made.initial_layer.weight), copy(made.initial_layer.bias)
        self.register_buffer("initial_mask", made.initial_layer.mask.clone())
        linears = [layer for block in made.blocks for layer in block.linear_layers]
        self.block_weights = copy(torch.stack([layer.weight for layer in linears]))
        self.block_biases = copy(torch.stack([layer.bias for layer in linears]))
        self.register_buffer("block_masks", torch.stack([layer.mask for layer in linears]))
        self.final_weight, self.final_bias = copy(made.final_layer.weight), copy(made.final_layer.bias)
        self.register_buffer("final_mask", made.final_layer.mask.clone())
        self.context_weight: nn.Parameter | None = None
        self.context_sizes: list[int] = []
        if getattr(made, "context_layer", None) is None:
            return
        maps = [made.context_layer, *(block.context_layer for block in made.blocks)]
        self.context_sizes = [m.out_features for m in maps]
        weights = [m.weight for m in maps]
        if context_out is not None:
            weights.append(context_out.weight)
            self.context_sizes.append(context_out.out_features)
        # Stored [C, total]: an index context reads rows, a float context multiplies from the left.
        self.context_weight = copy(torch.cat(weights).t().contiguous())
        self.context_bias = copy(torch.cat([m.bias for m in maps]))
        shortcut = 0 if context_out is None else context_out.out_features
        self.register_buffer("shortcut_bias", made.initial_layer.bias.new_zeros(shortcut))

    def _context_parts(self, context: Tensor) -> tuple[Tensor, ...]:
        bias = torch.cat((self.context_bias, self.shortcut_bias))
        if context.is_floating_point():
            table = torch.addmm(bias, context, self.context_weight)
        else:
            table = F.embedding(context, self.context_weight) + bias
        return table.split(self.context_sizes, dim=1)

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        """Raw outputs ``[B, features * multiplier]`` (nflows' layout: a feature's outputs adjacent)."""
        act = self.activation
        h = F.linear(x, self.initial_weight * self.initial_mask, self.initial_bias)
        parts: tuple[Tensor, ...] = ()
        if self.context_weight is not None:
            if context is None:
                raise ValueError("this MADE was built with a context; pass one")
            parts = self._context_parts(context)
            h = h + act(parts[0])
        weights = (self.block_weights * self.block_masks).unbind(0)
        biases = self.block_biases.unbind(0)
        for k in range(self.num_blocks):
            t = F.linear(act(h), weights[2 * k], biases[2 * k])
            if parts:
                t = t + parts[k + 1]
            h = h + F.linear(act(t), weights[2 * k + 1], biases[2 * k + 1])
        out = F.linear(h, self.final_weight * self.final_mask, self.final_bias)
        if len(parts) > self.num_blocks + 1:
            out = out + parts[-1]
        return out


class MADEConditioner(nn.Module):
    """Autoregressive conditioner: ``features x multiplier`` outputs, those of coordinate i read x_<i only.

    The network is nflows' MADE with residual blocks, its final layer zeroed so that an
    untrained layer sees all-zero parameters. In that MADE the outputs of the first
    coordinate connect to no hidden unit (its degree admits none), so they are a bare
    bias that ignores the context: the first coordinate would get the same transform
    for every context. With a context, a zero-initialised linear map from it straight
    to the outputs (the shortcut) fixes this without touching the autoregressive
    structure (the context is not a coordinate). nflows' modules are built (so the initial
    numbers are theirs) and then packed into :class:`PackedMADE` (``net``), which computes the same function.
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
        made = zeroed_made(features, hidden, context_dim, num_blocks, multiplier, activation)
        context_out = None
        if context_dim is not None:
            context_out = nn.Linear(context_dim, features * multiplier, bias=False)
            nn.init.zeros_(context_out.weight)
        self.net = PackedMADE(made, context_out)

    @property
    def has_context(self) -> bool:
        """Whether the conditioner reads a context."""
        return self.net.context_weight is not None

    def conditioner(self, x: Tensor, context: Tensor | None) -> Tensor:
        """Outputs ``[B, features, multiplier]`` (nflows lays them out per feature)."""
        return self.net(x, context).view(x.shape[0], self.features, self.multiplier)


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


def _masked(layer: nn.Module) -> Tensor:
    """The effective weight of a masked layer (nflows' or ours): weight times its 0/1 mask."""
    return layer.weight * layer.mask


class IncrementalMADE:
    """Draw the variables of a residual MADE in order at the cost of about one pass, not one pass per variable.

    A hidden unit of degree d reads only the inputs of degree <= d (variables 0..d-1) and hidden units of degree
    <= d, so once variables 0..d-1 are drawn its value is final. Before the outputs of variable v (degree v + 1,
    which read hidden units of degree <= v) are needed, :meth:`outputs` fills the hidden units of the degrees not
    yet filled, in every layer, and reuses all earlier ones; a full pass per variable recomputes them all. The
    hidden units are reordered by degree so that each fill is a slice. Numerically the same network as the
    masked forward pass (the same products, summed in a different order: equal to rounding).

    ``blocks`` are residual pairs (h <- h + L1(act(L0(act(h))))); ``activate_features`` applies ``activation`` to
    the last hidden layer before the final layer (our :class:`MADEPlus`; nflows' residual MADE does not). Built
    for one batch of ``num`` rows; no gradients.
    """

    def __init__(
        self,
        first: nn.Module,
        blocks: list[tuple[nn.Module, nn.Module]],
        final: nn.Module,
        activation: Callable[[Tensor], Tensor],
        activate_features: bool,
        num: int,
    ) -> None:
        # A hidden unit of degree d reads the inputs of degree 1..d: its degree is its first-layer mask's row sum.
        hidden_degrees = first.mask.sum(1).round().to(torch.int64)
        order = torch.argsort(hidden_degrees, stable=True)
        sorted_degrees = hidden_degrees[order]
        num_outputs_degrees = int(first.weight.shape[1])
        # Hidden units readable by the outputs of variable v: degree <= v.
        levels = torch.arange(num_outputs_degrees, device=sorted_degrees.device)
        self.ends = torch.searchsorted(sorted_degrees, levels, right=True).tolist()
        self.first = (_masked(first)[order], first.bias[order])
        self.blocks = [
            (_masked(a)[order][:, order], a.bias[order], _masked(b)[order][:, order], b.bias[order]) for a, b in blocks
        ]
        self.final = (_masked(final)[:, order], final.bias)
        self.activation, self.activate_features = activation, activate_features
        width = len(order)
        like = first.weight
        # stream[k]: the residual stream after k blocks; active[k]: its activation; inner[k]: act(L0(...)) of block k.
        self.stream = [like.new_zeros(num, width) for _ in range(len(blocks) + 1)]
        self.active = [like.new_zeros(num, width) for _ in range(len(blocks) + 1)]
        self.inner = [like.new_zeros(num, width) for _ in blocks]
        self.filled = 0

    def _fill(self, inputs: Tensor, end: int) -> None:
        """Compute hidden units [filled, end) of every layer (all their inputs are set)."""
        a, act = self.filled, self.activation
        weight, bias = self.first
        self.stream[0][:, a:end] = F.linear(inputs, weight[a:end], bias[a:end])
        for k, (w0, b0, w1, b1) in enumerate(self.blocks):
            h_in, h_out, z = self.stream[k], self.stream[k + 1], self.inner[k]
            self.active[k][:, a:end] = act(h_in[:, a:end])
            z[:, a:end] = act(F.linear(self.active[k][:, :end], w0[a:end, :end], b0[a:end]))
            h_out[:, a:end] = h_in[:, a:end] + F.linear(z[:, :end], w1[a:end, :end], b1[a:end])
        if self.activate_features:
            self.active[-1][:, a:end] = act(self.stream[-1][:, a:end])
        self.filled = end

    @torch.no_grad()
    def outputs(self, inputs: Tensor, variable: int, rows: slice) -> Tensor:
        """Final-layer outputs ``rows`` of ``variable``, given ``inputs`` with every earlier variable set."""
        end = self.ends[variable]
        if end > self.filled:
            self._fill(inputs, end)
        features = (self.active if self.activate_features else self.stream)[-1][:, :end]
        weight, bias = self.final
        return F.linear(features, weight[rows, :end], bias[rows])

    @classmethod
    def of_nflows(cls, made: MADE, num: int) -> IncrementalMADE:
        """For nflows' residual MADE without context, batch norm or dropout (the VTI bit sampler's)."""
        if getattr(made, "context_layer", None) is not None or not made.use_residual_blocks:
            raise ValueError("IncrementalMADE needs a residual MADE without context")
        if any(block.use_batch_norm or block.dropout.p > 0 for block in made.blocks):
            raise ValueError("IncrementalMADE needs a MADE without batch norm or dropout")
        blocks = [(block.linear_layers[0], block.linear_layers[1]) for block in made.blocks]
        first = made.initial_layer
        return cls(first, blocks, made.final_layer, made.activation, False, num)

    @classmethod
    def of_made_plus(cls, made: MADEPlus, num: int) -> IncrementalMADE:
        """For :class:`MADEPlus` (its outputs still need the logit clamp)."""
        blocks = [(first, second) for first, second in made.blocks]
        return cls(made.first, blocks, made.final, torch.relu, True, num)
