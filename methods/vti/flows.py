"""Flow types of VTI by name: ``diag``, ``affine(N,M)``, ``spline(N,M)`` and ``sas``.

* ``diag``: one CoSMIC diagonal affine layer whose scale and shift come from a
  context MLP of depth 5 and width ub2(2C) (the authors' ``diagnorm``).
* ``affine(N,M)``: N masked affine autoregressive layers with M residual
  blocks each, hidden width ub2(2 d_max), leaky-ReLU (``affine55`` is the
  paper's "Affine MAF (5,5)").
* ``spline(N,M)``: N rational-quadratic spline autoregressive layers with M
  residual blocks, then a shared global diagonal affine layer (the paper's
  "Spline MAF (4,6)" is ``spline(4,6)``).
* ``sas(N,M)``: ``affine(N,M)`` followed by a sinh-arcsinh layer with
  context-MLP parameters, for skewed and heavy-tailed posteriors (the
  sinh-arcsinh layer starts as the identity, so it only adds to
  ``affine(N,M)``); ``sas`` is ``sas(1,2)``.

The authors' compact names (``affine55``, ``spline46``) are accepted too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from methods.vti.cosmic import (
    CoSMICAffineMAF,
    CoSMICDiagonalAffine,
    CoSMICFlow,
    CoSMICLayer,
    CoSMICSharedDiagonalAffine,
    CoSMICSinhArcSinh,
    CoSMICSplineMAF,
)

FLOW_TYPES = ("diag", "affine(N,M)", "spline(N,M)", "sas(N,M)")
_PATTERN = re.compile(r"^(affine|spline|sas)(?:\((\d+),(\d+)\)|(\d)(\d))$")


def upper_power_of_two(n: int) -> int:
    """Smallest power of two >= n (the authors' ``ub2``)."""
    return 1 << max(int(n) - 1, 0).bit_length()


@dataclass(frozen=True)
class FlowSpec:
    """A parsed flow type: kind and, for autoregressive kinds, layers and blocks."""

    kind: str
    num_layers: int = 0
    num_blocks: int = 0

    @classmethod
    def parse(cls, name: str) -> FlowSpec:
        """Parse a flow name; unknown names raise ValueError listing the valid forms."""
        text = name.replace(" ", "").lower()
        if text in ("diag", "diagnorm"):
            return cls("diag")
        if text == "sas":
            return cls("sas", 1, 2)  # the smallest: one affine layer, then sinh-arcsinh
        match = _PATTERN.match(text)
        if match:
            layers = match.group(2) or match.group(4)
            blocks = match.group(3) or match.group(5)
            if int(layers) >= 1 and int(blocks) >= 1:
                return cls(match.group(1), int(layers), int(blocks))
        raise ValueError(
            f"unknown flow type {name!r}; valid: {', '.join(FLOW_TYPES)} (e.g. affine(5,5), spline(4,6), sas)"
        )

    def default_learning_rate(self) -> float:
        """The authors' flow learning rate for this kind (1e-1 for diag, else 1e-3)."""
        return 1e-1 if self.kind == "diag" else 1e-3


#: Widest context MLP (diag and sinh-arcsinh layers): ub2(2 x context) unless the context is a long one-hot code.
MAX_CONTEXT_WIDTH = 256
#: Above this saturated dimension the default MADE width is the authors' 128 of their DAG flows
#: (``affine510f128``, d_max = 549) instead of ub2(2 d_max) (2048 there: 40M weights per layer). Sachs (385)
#: is above it too: at width 1024 the quick profile's learning rate diverged there in two iterations.
MAX_DEFAULT_WIDTH_DIM = 256
LARGE_DIM_WIDTH = 128


def build_flow(spec: FlowSpec, dim: int, context_dim: int, hidden: int | None = None) -> CoSMICFlow:
    """A zero-initialised CoSMIC flow (the identity map) of the given type.

    The context MLPs of ``diag`` and ``sas`` are ub2(2 x context) wide, capped at
    ``MAX_CONTEXT_WIDTH``: with a one-hot context over 543 DAGs the uncapped
    width (2048) made those layers 8M parameters and a step 10 times slower.
    """
    width = hidden or (upper_power_of_two(2 * dim) if dim <= MAX_DEFAULT_WIDTH_DIM else LARGE_DIM_WIDTH)
    context_width = hidden or min(upper_power_of_two(2 * context_dim), MAX_CONTEXT_WIDTH)
    layers: list[CoSMICLayer]
    if spec.kind == "diag":
        return CoSMICFlow(dim, [CoSMICDiagonalAffine(dim, context_dim, context_width, depth=5)], bookends=False)
    if spec.kind == "affine":
        layers = [
            CoSMICAffineMAF(dim, context_dim, width, spec.num_blocks, activation="leaky_relu")
            for _ in range(spec.num_layers)
        ]
    elif spec.kind == "spline":
        layers = [CoSMICSplineMAF(dim, context_dim, width, spec.num_blocks) for _ in range(spec.num_layers)]
        layers.append(CoSMICSharedDiagonalAffine(dim))
    elif spec.kind == "sas":
        layers = [
            CoSMICAffineMAF(dim, context_dim, width, spec.num_blocks, activation="leaky_relu")
            for _ in range(spec.num_layers)
        ]
        layers.append(CoSMICSinhArcSinh(dim, context_dim, context_width))
    else:  # pragma: no cover - parse() admits no other kind
        raise ValueError(spec.kind)
    return CoSMICFlow(dim, layers)
