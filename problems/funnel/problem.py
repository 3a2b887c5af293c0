"""Neal's funnel (MIF paper App. D.1, eqs. D.8-D.9): a normalised target, so its -ELBO is KL(q || pi).

x_1 ~ N(0, 3^2) and x_k ~ N(0, exp(x_1 / 2)^2) for k = 2..D (the variance of
x_k is exp(x_1)). There is no data: the evidence is exactly 1, and exact
draws come from the prior itself.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from suite.core.problem import LOG_SQRT_2PI
from suite.core.registry import register_problem
from suite.core.single_model import SingleModelProblem
from suite.core.types import Draws

SCALE_X1 = 3.0


@register_problem("funnel")
class Funnel(SingleModelProblem):
    """Neal's funnel, D = 10: x_1 ~ N(0, 9), x_k ~ N(0, e^{x_1}); normalised (log Z = 0)."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 4.0}

    reported_neg_elbo: ClassVar[dict[str, float]] = {"mf": 1.86, "fr": 1.86, "fr-vip": 0.00, "iaf": 0.37, "mif": 0.00}
    reported_source: ClassVar[str] = "MIF paper Table 1 (MF, FR, FR-VIP), Table 2 (IAF), Table 3 (MIF, h = 2^10)"

    def __init__(self, dim: int = 10) -> None:
        if not isinstance(dim, int) or dim < 2:
            raise ValueError(f"dim must be an int >= 2; got {dim!r}")
        self.dim = dim
        self.dim_max = dim

    def config(self) -> dict[str, Any]:
        """The dimension."""
        return {"dim": self.dim}

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log N(x_1; 0, 9) + sum_k log N(x_k; 0, e^{x_1})."""
        x1, rest = theta[:, 0], theta[:, 1:]
        head = -0.5 * (x1 / SCALE_X1) ** 2 - math.log(SCALE_X1) - LOG_SQRT_2PI
        tail = -0.5 * (rest * rest).sum(-1) * torch.exp(-x1) - (self.dim - 1) * (0.5 * x1 + LOG_SQRT_2PI)
        return head + tail

    def latent_order(self) -> Tensor:
        """x_1 is every other coordinate's parent."""
        return torch.arange(self.dim)

    def prior_location_scale(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """f = 0; log g_1 = log 3, log g_k = x_1 / 2."""
        log_g = (0.5 * theta[:, :1]).expand(-1, self.dim).clone()
        log_g[:, 0] = math.log(SCALE_X1)
        return torch.zeros_like(theta), log_g

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws of the funnel."""
        z = torch.randn(num_draws, self.dim, generator=generator, dtype=torch.float64, device=generator.device)
        x1 = SCALE_X1 * z[:, :1]
        theta = torch.cat([x1, z[:, 1:] * torch.exp(0.5 * x1)], dim=-1)
        return Draws(torch.zeros(num_draws, dtype=torch.int64, device=generator.device), theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws."""
        return self.reference_draws(num_draws, generator)

    def log_evidence(self) -> float:
        """log Z = 0: the target is normalised."""
        return 0.0
