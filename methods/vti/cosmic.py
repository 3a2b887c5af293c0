"""CoSMIC normalizing flows: conditional flows that are the identity on a model's inactive coordinates.

A CoSMIC layer computes its elementwise transformer parameters rho_i from a conditioner and mixes them with the
transformer's static point rho^Id by the context-to-mask map, rho_i^C = (1 - C_i(m)) rho^Id + C_i(m) rho_i (VTI
eq. 8). Since C_i(m) is 0 or 1, this is a selection: active coordinates get the conditioner's parameters and inactive
ones the static point, so they pass through unchanged (VTI Lemma 2.1). Inside the strict-left permutation the active
coordinates come first, and autoregressive conditioners then never read an inactive coordinate, so the density
factorises as q(theta_m | m) nu(u) (VTI Prop. 2.2).

Every layer works on "left-aligned" vectors (active coordinates first, in ascending order) and has two directions:

* ``sample(x, active, context)``: the generative direction z -> theta used in training (one conditioner pass per
  layer, as in an inverse autoregressive flow); returns the output and log |det d out / d in|;
* ``density(y, active, context)``: the inverse, used to evaluate log q at a given theta (sequential over
  coordinates for autoregressive layers); returns the input and log |det d in / d out|.

``context``: a float feature matrix ``[B, C]``, or an int64 vector ``[B]`` of model indices standing for one-hot codes,
read by :class:`ModelContextLinear` as a column lookup of its weight. Conditioners, splines, sandwich and scale come
from :mod:`methods.flows`. Details: docs/methods.md, "VTI (`methods/vti/`)", "The flow library (`methods/flows/`)".
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.flows.affine import SCALE_FLOOR, scale_shift
from methods.flows.made import MADEConditioner
from methods.flows.sandwich import sigmoid_sandwich
from methods.flows.splines import DERIVATIVE_AT_IDENTITY, rq_spline

#: Spline settings of the VTI code: 10 bins on [0, 1], minimum bin width/height/derivative 1e-3.
NUM_BINS = 10
#: Clamp of the sigmoid sandwich around splines (nflows' Logit default).
SANDWICH_EPS = 1e-6
#: The spline's raw derivatives are offset by this, so that zero-initialised raw outputs are unit derivatives.
DERIVATIVE_OFFSET = DERIVATIVE_AT_IDENTITY


# --------------------------------------------------------------------------- permutations
def strict_left_order(mask: Tensor) -> Tensor:
    """Per row, the active coordinate indices ascending, then the inactive ones: int64 ``[B, D]``."""
    dim = mask.shape[-1]
    key = (~mask).to(torch.int64) * dim + torch.arange(dim, device=mask.device)
    return torch.argsort(key, dim=-1)


def to_left(x: Tensor, order: Tensor) -> Tensor:
    """Gather coordinates into left-aligned order."""
    return x.gather(-1, order)


def from_left(x_left: Tensor, order: Tensor) -> Tensor:
    """Undo :func:`to_left`."""
    return torch.empty_like(x_left).scatter_(-1, order, x_left)


def partial_reverse_index(num_active: Tensor, dim: int) -> Tensor:
    """Index that reverses the first ``d_m`` entries of each row and keeps the rest (self-inverse)."""
    pos = torch.arange(dim, device=num_active.device).expand(num_active.shape[0], dim)
    d = num_active.unsqueeze(-1)
    return torch.where(pos < d, d - 1 - pos, pos)


def left_mask(num_active: Tensor, dim: int) -> Tensor:
    """The left-aligned mask ``[1] * d_m + [0] * (D - d_m)`` per row (bool ``[B, D]``)."""
    return torch.arange(dim, device=num_active.device) < num_active.unsqueeze(-1)


# --------------------------------------------------------------------------- layers
class CoSMICLayer(nn.Module):
    """A transform of left-aligned vectors that is the identity where ``active`` is False."""

    #: Whether ``density`` needs one conditioner pass per coordinate.
    autoregressive: bool = False

    def sample(self, x: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Generative direction: output and log |det d out / d in| per row."""
        raise NotImplementedError

    def density(self, y: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Inverse direction: input and log |det d in / d out| per row."""
        raise NotImplementedError


class ModelContextLinear(nn.Linear):
    """A linear map of the context that also reads an int64 model index as its one-hot code."""

    def forward(self, context: Tensor) -> Tensor:
        """``context W^T + b``; for an index m, column m of W plus b (equal to the one-hot product)."""
        if context.is_floating_point():
            return super().forward(context)
        out = self.weight.t()[context]
        return out if self.bias is None else out + self.bias


def reads_model_index(linear: nn.Linear) -> ModelContextLinear:
    """``linear`` itself, made a :class:`ModelContextLinear` (its parameters, their order and names kept).

    The class is swapped in place rather than a new layer built, so that no initialisation draws from the global
    generator: flows keep the parameters (and the numbers) they had before index contexts existed.
    """
    linear.__class__ = ModelContextLinear
    return linear  # type: ignore[return-value]


def per_model(net: nn.Module, context: Tensor) -> Tensor:
    """``net(context)``; an index context runs once per distinct model of the batch and is gathered back."""
    if context.is_floating_point():
        return net(context)
    distinct, inverse = torch.unique(context, return_inverse=True)
    return net(distinct)[inverse]


def _zero_last_linear(module: nn.Module) -> None:
    """Zero the weights and bias of the last ``nn.Linear`` in ``module`` (identity initialisation)."""
    last = [m for m in module.modules() if isinstance(m, nn.Linear)][-1]
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)


def context_mlp(context_dim: int, hidden: int, depth: int, out: int) -> nn.Sequential:
    """Linear(C, h), ReLU, (depth - 1) x [Linear(h, h), ReLU], Linear(h, out) with a zeroed last layer."""
    layers: list[nn.Module] = [nn.Linear(context_dim, hidden), nn.ReLU()]
    for _ in range(max(depth - 1, 0)):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    layers.append(nn.Linear(hidden, out))
    reads_model_index(layers[0])
    net = nn.Sequential(*layers)
    _zero_last_linear(net)
    return net


class _MADELayer(MADEConditioner, CoSMICLayer):
    """Shared machinery of autoregressive CoSMIC layers: a zero-initialised MADE conditioner.

    The conditioner (:class:`~methods.flows.made.MADEConditioner`) adds a zero-initialised
    linear map of the context to the MADE outputs, so that the first left-aligned
    coordinate, whose MADE outputs are a bare bias, still gets a model-specific transform.
    It reads an int64 model-index context as a row lookup itself (:class:`~methods.flows.made.PackedMADE`).
    """

    autoregressive = True
    multiplier: int

    def __init__(self, dim: int, context_dim: int, hidden: int, num_blocks: int, activation: str = "relu") -> None:
        act = {"relu": F.relu, "leaky_relu": F.leaky_relu}[activation]
        super().__init__(dim, hidden, context_dim, num_blocks, self.multiplier, act)
        self.dim = dim

    def _forward_map(self, x: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """Elementwise map x -> y and log dy/dx per coordinate (masked entries may be anything)."""
        raise NotImplementedError

    def _inverse_map(self, y: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """Elementwise map y -> x and log dx/dy per coordinate."""
        raise NotImplementedError

    def _conditioner_input(self, x: Tensor) -> Tensor:
        return x

    def sample(self, x: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """y_i = tau(x_i; rho(x_<i, m)) on active coordinates, y_i = x_i elsewhere."""
        params = self.conditioner(self._conditioner_input(x), context)
        y, logd = self._forward_map(x, params, active)
        return torch.where(active, y, x), torch.where(active, logd, 0.0).sum(-1)

    def density(self, y: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Invert coordinate by coordinate: after pass k the first k coordinates are exact."""
        x = torch.where(active, torch.zeros_like(y), y)
        logd = torch.zeros_like(y)
        for _ in range(int(active.sum(-1).max()) if active.numel() else 0):
            params = self.conditioner(self._conditioner_input(x), context)
            x_new, logd = self._inverse_map(y, params, active)
            x = torch.where(active, x_new, y)
        return x, torch.where(active, logd, 0.0).sum(-1)


class CoSMICAffineMAF(_MADELayer):
    """Masked affine autoregressive layer: y_i = s_i x_i + t_i with (s_i, t_i) from x_<i and m.

    Per coordinate the MADE emits (unconstrained scale, shift); s = softplus_{ln 2}(.) + 1e-6,
    so the zero-initialised layer is (up to the 1e-6 floor) the identity; the static point
    of inactive coordinates is s = 1, t = 0 exactly.
    """

    multiplier = 2

    def _forward_map(self, x: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        return scale_shift(x, params[..., 0], params[..., 1])

    def _inverse_map(self, y: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        return scale_shift(y, params[..., 0], params[..., 1], inverse=True)


class CoSMICSplineMAF(_MADELayer):
    """Rational-quadratic spline autoregressive layer inside a sigmoid sandwich: logit o RQS o sigmoid.

    The spline acts on [0, 1] with 10 bins; its conditioner reads sigmoid(x). At the
    static point (equal widths and heights, unit derivatives) the spline is the
    identity. Only active coordinates go through the sandwich, so inactive ones are
    returned bit for bit, even where the sigmoid would saturate.
    """

    multiplier = 3 * NUM_BINS + 1

    def _conditioner_input(self, x: Tensor) -> Tensor:
        return torch.sigmoid(x)

    def _sandwich(self, x: Tensor, params: Tensor, active: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        # Inactive coordinates enter the spline at 0.5 (any point in [0, 1]); their outputs are discarded.
        def spline(s: Tensor) -> tuple[Tensor, Tensor]:
            s = torch.where(active, s, 0.5)
            return rq_spline(s, params, inverse=inverse, derivative_offset=DERIVATIVE_OFFSET)

        return sigmoid_sandwich(x, spline, SANDWICH_EPS)

    def _forward_map(self, x: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        return self._sandwich(x, params, active, inverse=False)

    def _inverse_map(self, y: Tensor, params: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        return self._sandwich(y, params, active, inverse=True)


class _ElementwiseLayer(CoSMICLayer):
    """Elementwise layers whose per-position parameters come from the context only."""

    def _raw(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """The two parameter vectors ``[B or 1, D]``."""
        raise NotImplementedError

    def _map(self, x: Tensor, a: Tensor, b: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def sample(self, x: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Apply the map on active coordinates."""
        a, b = self._raw(context)
        y, logd = self._map(x, a, b, inverse=False)
        return torch.where(active, y, x), torch.where(active, logd, 0.0).sum(-1)

    def density(self, y: Tensor, active: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Invert the map on active coordinates."""
        a, b = self._raw(context)
        x, logd = self._map(y, a, b, inverse=True)
        return torch.where(active, x, y), torch.where(active, logd, 0.0).sum(-1)


class _AffineMap:
    """y = s x + t with s = softplus_{ln 2}(a) + 1e-6, t = b."""

    @staticmethod
    def _map(x: Tensor, a: Tensor, b: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        y, log_d = scale_shift(x, a, b, inverse)
        return y, log_d.expand_as(x)


class CoSMICDiagonalAffine(_AffineMap, _ElementwiseLayer):
    """Diagonal affine layer whose scale and shift come from a context MLP (zero-initialised output)."""

    def __init__(self, dim: int, context_dim: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.dim = dim
        self.net = context_mlp(context_dim, hidden, depth, 2 * dim)

    def _raw(self, context: Tensor) -> tuple[Tensor, Tensor]:
        out = per_model(self.net, context)
        return out[:, self.dim :], out[:, : self.dim]


class CoSMICSharedDiagonalAffine(_AffineMap, _ElementwiseLayer):
    """Global diagonal affine: one learnable (scale, shift) per left-aligned position, shared by all models."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.raw_scale = nn.Parameter(torch.zeros(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def _raw(self, context: Tensor) -> tuple[Tensor, Tensor]:
        return self.raw_scale.unsqueeze(0), self.shift.unsqueeze(0)


class CoSMICSinhArcSinh(_ElementwiseLayer):
    """Sinh-arcsinh layer y = sinh((asinh x + eps) / delta) with (eps, delta) from a context MLP.

    delta = softplus(.) + 1e-6 with the raw value offset so that zero gives delta = 1.
    The authors' code does not zero-initialise this MLP's last layer (a quirk); here it
    is zeroed like every other CoSMIC conditioner, so the layer starts as the identity.
    """

    def __init__(self, dim: int, context_dim: int, hidden: int, depth: int = 3) -> None:
        super().__init__()
        self.dim = dim
        self.net = context_mlp(context_dim, hidden, depth, 2 * dim)
        self.delta_offset = math.log(math.expm1(1.0 - SCALE_FLOOR))

    def _raw(self, context: Tensor) -> tuple[Tensor, Tensor]:
        out = per_model(self.net, context)
        return out[:, : self.dim], F.softplus(out[:, self.dim :] + self.delta_offset) + SCALE_FLOOR

    def _map(self, x: Tensor, eps: Tensor, delta: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        if inverse:
            inner = delta * torch.asinh(x) - eps
            out = torch.sinh(inner)
            return out, torch.log(delta) + torch.log(torch.cosh(inner)) - 0.5 * torch.log1p(x * x)
        inner = (torch.asinh(x) + eps) / delta
        return torch.sinh(inner), torch.log(torch.cosh(inner)) - torch.log(delta) - 0.5 * torch.log1p(x * x)


# --------------------------------------------------------------------------- the flow
class CoSMICFlow(nn.Module):
    """T(z | m) = P_m^{-1} o [R] o L_K o R o ... o R o L_1 o P_m with partial reverses R between layers.

    ``layers`` are applied in the generative direction in the order given. When
    the number of reverses between layers is odd, one more closes the stack, so
    that the zero-initialised flow is the identity map rather than a permutation
    of the active coordinates. With ``bookends=False`` (diagonal flows) there is
    no permutation and layers see the raw mask.
    """

    def __init__(self, dim: int, layers: list[CoSMICLayer], bookends: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.layers = nn.ModuleList(layers)
        self.bookends = bookends

    def _frame(self, mask: Tensor) -> tuple[Tensor | None, Tensor, Tensor, Tensor]:
        num_active = mask.sum(-1)
        if not self.bookends:
            return None, mask, num_active, torch.empty(0)
        return (
            strict_left_order(mask),
            left_mask(num_active, self.dim),
            num_active,
            partial_reverse_index(num_active, self.dim),
        )

    def sample(self, z: Tensor, mask: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """theta = T(z | m) and log |det dtheta/dz| per row; inactive coordinates are returned unchanged."""
        order, active, _, reverse = self._frame(mask)
        x = z if order is None else to_left(z, order)
        logdet = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for i, layer in enumerate(self.layers):
            if i and order is not None:
                x = x.gather(-1, reverse)
            x, ld = layer.sample(x, active, context)
            logdet = logdet + ld
        if order is None:
            return x, logdet
        if len(self.layers) % 2 == 0:
            x = x.gather(-1, reverse)
        return from_left(x, order), logdet

    def inverse(self, theta: Tensor, mask: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """z = T^{-1}(theta | m) and log |det dz/dtheta| per row."""
        order, active, _, reverse = self._frame(mask)
        x = theta if order is None else to_left(theta, order)
        if order is not None and len(self.layers) % 2 == 0:
            x = x.gather(-1, reverse)
        logdet = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
        for i in reversed(range(len(self.layers))):
            x, ld = self.layers[i].density(x, active, context)
            logdet = logdet + ld
            if i and order is not None:
                x = x.gather(-1, reverse)
        return (x if order is None else from_left(x, order)), logdet

    def log_prob(self, theta: Tensor, mask: Tensor, context: Tensor) -> Tensor:
        """log q(theta_m | m) of the active coordinates (Prop. 2.2: the saturated density minus log nu(u))."""
        z, logdet = self.inverse(theta, mask, context)
        log_nu = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        return torch.where(mask, log_nu, 0.0).sum(-1) + logdet
