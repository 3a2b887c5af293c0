"""``example-gaussians``: three nested Gaussian models whose answer is known exactly.

Model k (k = 1, 2, 3) uses the first k coordinates, with theta_k ~ N(MEAN[:k], I) and model prior PRIOR. The
target is normalised, so the model posterior is the prior and exact draws are cheap: the problem carries its own
ground truth (no reference engine needed).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from suite import CategoricalSpace, Draws, ModelProbs, Problem
from suite.core.tensor_ops import DeviceCache

PRIOR = (0.2, 0.3, 0.5)
MEAN = (1.0, -0.5, 2.0)
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class ExampleGaussians(Problem):
    """Three nested Gaussian models (dimensions 1, 2, 3) with model probabilities 0.2, 0.3, 0.5."""

    #: Compute seconds each method gets in the quick profile (the equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 2.0}

    def __init__(self) -> None:
        self.model_space = CategoricalSpace(["k=1", "k=2", "k=3"])
        self.dim_max = 3
        masks = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
        log_prior = torch.tensor(PRIOR, dtype=torch.float64).log()
        # Constants live on the CPU; DeviceCache copies them to each device and dtype once.
        self._tables = DeviceCache(masks=masks, log_prior=log_prior, mean=torch.tensor(MEAN, dtype=torch.float64))

    def config(self) -> dict[str, Any]:
        """No constructor arguments: one instance."""
        return {}

    def mask(self, model_index: Tensor) -> Tensor:
        """Model k uses the first k coordinates."""
        return self._tables.get("masks", model_index.device)[model_index]

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """log PRIOR[m]."""
        return self._tables.get("log_prior", model_index.device)[model_index]

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log PRIOR[m] + sum over active coordinates of log N(theta_i; MEAN_i, 1), once for torch and JAX."""
        active = xp.take(xp.constant(self._tables, "masks", theta, exact_dtype=False), model_index)
        log_prior = xp.take(xp.constant(self._tables, "log_prior", theta), model_index)
        z = theta - xp.constant(self._tables, "mean", theta)
        log_normal = xp.where(active, -0.5 * z * z - LOG_SQRT_2PI, 0.0)  # inactive coordinates ignored, NaN too
        return log_prior + xp.row_sum(log_normal)

    def reference_model_probs(self) -> ModelProbs:
        """Exact: the model posterior is the prior."""
        return ModelProbs.from_dense(torch.tensor(PRIOR, dtype=torch.float64))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws in float64, zero in inactive coordinates."""
        device = generator.device
        weights = torch.tensor(PRIOR, dtype=torch.float64, device=device)
        model_index = torch.multinomial(weights, num_draws, replacement=True, generator=generator)
        z = torch.randn(num_draws, self.dim_max, generator=generator, dtype=torch.float64, device=device)
        theta = z + self._tables.get("mean", device)
        return Draws(model_index, torch.where(self.mask(model_index), theta, 0.0))
