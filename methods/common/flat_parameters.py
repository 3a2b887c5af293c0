"""A module's trainable parameters as views of one flat vector, so that optimiser work is one pass, not one per tensor.

A training step of a small flow on a CPU is dominated by the number of operations, not by arithmetic. Gradient
zeroing, norm clipping and an Adam(W) step over P parameter tensors are P small operations each (the foreach
kernels loop over the tensors on a CPU); over one vector they are one each. The parameters stay ordinary
``nn.Parameter`` leaves of the module (its forward pass, ``state_dict`` and ``load_state_dict`` are untouched):
their data and gradients become views of :attr:`FlatParameters.vector` and of its gradient, and autograd
accumulates into those views in place.

Moving or casting the module afterwards (``module.to``) replaces the parameters' data and breaks the views: build
this last, on the module's final device and dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

#: Added to the norm in the clipping coefficient, as in ``torch.nn.utils.clip_grad_norm_``.
CLIP_EPS = 1e-6


class FlatParameters:
    """The trainable parameters of ``module`` as views of one vector (:attr:`vector`) and their gradients of its."""

    def __init__(self, module: nn.Module) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the module has no trainable parameters")
        if len({(p.device, p.dtype) for p in params}) > 1:
            raise ValueError("all parameters must share one device and dtype to be flattened")
        with torch.no_grad():
            self.vector = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]))
        self.vector.grad = torch.zeros_like(self.vector)
        offset = 0
        for p in params:
            size = p.numel()
            p.data = self.vector.data[offset : offset + size].view_as(p)
            p.grad = self.vector.grad[offset : offset + size].view_as(p)
            offset += size
        self.params = params

    @property
    def grad(self) -> Tensor:
        """The gradients of all parameters, as one vector."""
        assert self.vector.grad is not None
        return self.vector.grad

    def is_intact(self) -> bool:
        """Whether every parameter and gradient is still a view of the flat vectors (nothing replaced them)."""
        offset = 0
        for p in self.params:
            size = p.numel()
            if p.data_ptr() != self.vector[offset:].data_ptr() or p.grad is None:
                return False
            if p.grad.data_ptr() != self.grad[offset:].data_ptr():
                return False
            offset += size
        return True

    def zero_grad(self) -> None:
        """Set every gradient to zero in place (the views stay; ``set_to_none`` would break them)."""
        self.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Scale the gradients to Euclidean norm at most ``max_norm``; returns the norm before (as clip_grad_norm_)."""
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + CLIP_EPS), max=1.0))
        return norm
