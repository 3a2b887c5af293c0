"""Fixed-dimensional targets as one-model problems, scored by negative ELBO.

The MIF paper's hierarchical benchmarks (eight schools, Neal's funnel, seeds)
have a single model; they enter the suite as problems whose model space holds
one model with every coordinate active, so that every method and metric
applies unchanged. Their leaderboards sort by ``neg_elbo``, measured by the
suite on fresh draws of the method's own density (lower is better), and show
the figures the source papers report beside it.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from suite.core.model_space import CategoricalSpace
from suite.core.problem import Problem
from suite.core.types import ModelProbs


class SingleModelProblem(Problem):
    """A target on R^dim with one model; subclasses give ``dim_max`` and the log joint."""

    main_metric: ClassVar[str] = "neg_elbo"
    #: Negative ELBOs reported by the source paper, by suite method name (see ``reported_source``).
    reported_neg_elbo: ClassVar[dict[str, float]] = {}
    #: Where ``reported_neg_elbo`` comes from.
    reported_source: ClassVar[str] = ""

    model_space = CategoricalSpace(["model"])

    def mask(self, model_index: Tensor) -> Tensor:
        """Every coordinate is active."""
        return torch.ones(model_index.shape[0], self.dim_max, dtype=torch.bool, device=model_index.device)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """The one model has probability 1."""
        return torch.zeros(model_index.shape, dtype=torch.float64, device=model_index.device)

    def reference_model_probs(self) -> ModelProbs:
        """Exactly one model."""
        return ModelProbs.from_dense(torch.ones(1, dtype=torch.float64))
