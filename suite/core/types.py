"""Small value types shared by problems, methods and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from suite.core.tensor_ops import unique_rows


class Draws(NamedTuple):
    """Transdimensional draws on the saturated space.

    ``theta[i]`` holds the parameters of model ``model_index[i]`` in its
    active coordinates; inactive coordinates carry no meaning (zero in draws
    made by the suite).
    """

    model_index: Tensor  # int64 [N] (or [N, W] for multi-word model spaces)
    theta: Tensor  # float [N, dim_max]

    def __len__(self) -> int:
        return int(self.model_index.shape[0])


@dataclass(frozen=True)
class ModelProbs:
    """Probabilities of a set of models (all of them, or the top ones).

    ``index`` lists distinct model indices (``[K]``, or ``[K, W]`` rows for
    multi-word model spaces), ``prob`` their probabilities and ``se``
    (optional) their Monte Carlo standard errors. Models not listed have
    probability zero as far as this estimate knows.
    """

    index: Tensor  # int64 [K] or [K, W]
    prob: Tensor  # float64 [K]
    se: Tensor | None = None

    def __post_init__(self) -> None:
        if self.index.ndim not in (1, 2) or self.prob.ndim != 1 or self.prob.shape[0] != self.index.shape[0]:
            raise ValueError("index ([K] or [K, W]) and prob ([K]) must have the same length")
        if self.se is not None and self.se.shape != self.prob.shape:
            raise ValueError("se must have the shape of prob")
        if unique_rows(self.index).shape[0] != self.index.shape[0]:
            raise ValueError("model indices must be distinct")

    @classmethod
    def from_dense(cls, prob: Tensor, se: Tensor | None = None) -> ModelProbs:
        """Wrap a dense probability vector over models ``0..K-1``."""
        prob = prob.detach().to("cpu", torch.float64)
        return cls(
            torch.arange(prob.numel()),
            prob,
            None if se is None else se.detach().to("cpu", torch.float64),
        )

    @classmethod
    def from_indices(cls, model_index: Tensor) -> ModelProbs:
        """Relative frequencies of the models in a sample of indices."""
        index, counts = unique_rows(model_index.detach().cpu(), return_counts=True)
        return cls(index, counts.to(torch.float64) / counts.sum())

    def dense(self, num_models: int) -> Tensor:
        """Dense float64 vector of length ``num_models`` (single-word indices only)."""
        if self.index.ndim != 1:
            raise ValueError("multi-word model indices have no dense vector")
        out = torch.zeros(num_models, dtype=torch.float64)
        out[self.index] = self.prob.to(torch.float64)
        return out

    def top(self, k: int) -> ModelProbs:
        """The ``k`` most probable models, most probable first."""
        order = torch.argsort(self.prob, descending=True)[:k]
        return ModelProbs(self.index[order], self.prob[order], None if self.se is None else self.se[order])

    def total(self) -> float:
        """Sum of the listed probabilities (1 for a complete estimate)."""
        return float(self.prob.sum())


@dataclass(frozen=True)
class Estimate:
    """A number with its Monte Carlo standard error (None when not defined)."""

    value: float
    se: float | None = None
