"""Eight schools, centred (Rubin 1981; MIF paper App. D.1, eqs. D.1-D.2).

mu ~ N(0, 5^2), log tau ~ N(0, 5^2), theta_i ~ N(mu, tau^2), y_i ~ N(theta_i, sigma_i^2),
z = (mu, log tau, theta_1..theta_8). The data are Rubin's (1981) public table.

Ground truth is exact up to quadrature: theta and mu integrate out in closed
form given tau (y ~ N(0, diag(sigma^2 + tau^2) + 25 J)), leaving one
integral over log tau, done on a fine grid. Exact draws take log tau from
that grid (piecewise-linear density, inverted exactly), then mu and theta
from their Gaussian conditionals.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import ClassVar

import torch
from torch import Tensor

from suite.core.problem import LOG_SQRT_2PI
from suite.core.registry import register_problem
from suite.core.single_model import SingleModelProblem
from suite.core.types import Draws

#: Rubin (1981): estimated treatment effects and their standard errors (schools A-H).
Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)
PRIOR_SCALE = 5.0
#: Grid over log tau for the exact marginal: the prior's +-6 sd (mass outside: 2e-9).
GRID = (-30.0, 30.0, 60_001)


def _normal_log_pdf(x: Tensor, loc: Tensor | float, scale: Tensor | float) -> Tensor:
    z = (x - loc) / scale
    log_scale = torch.log(scale) if isinstance(scale, Tensor) else math.log(scale)
    return -0.5 * z * z - log_scale - LOG_SQRT_2PI


@register_problem("eight-schools")
class EightSchools(SingleModelProblem):
    """Eight schools, centred parameterisation, D = 10 (mu, log tau, theta_1..8); exact ground truth by quadrature."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 4.0}

    reported_neg_elbo: ClassVar[dict[str, float]] = {
        "mf": 34.80,
        "fr": 33.85,
        "fr-vip": 31.86,
        "iaf": 32.22,
        "mif": 31.78,
    }
    reported_source: ClassVar[str] = "MIF paper Table 1 (MF, FR, FR-VIP), Table 2 (IAF), Table 3 (MIF, h = 2^10)"

    #: Why float32 cannot evaluate this target at its own posterior draws.
    float32_note: ClassVar[str] = (
        "the centred funnel's neck reaches tau ~ e^-20, where theta_i - mu is below float32 resolution"
    )

    def __init__(self) -> None:
        self.dim_max = 2 + len(Y)
        self._y = torch.tensor(Y, dtype=torch.float64)
        self._sigma = torch.tensor(SIGMA, dtype=torch.float64)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log N(mu; 0, 25) + log N(log tau; 0, 25) + sum_i [log N(theta_i; mu, tau^2) + log N(y_i; theta_i, s_i^2)]."""
        y, sigma = self._y.to(theta), self._sigma.to(theta)
        mu, log_tau, effects = theta[:, 0], theta[:, 1], theta[:, 2:]
        prior = _normal_log_pdf(mu, 0.0, PRIOR_SCALE) + _normal_log_pdf(log_tau, 0.0, PRIOR_SCALE)
        centred = (effects - mu[:, None]) * torch.exp(-log_tau)[:, None]
        groups = -0.5 * (centred * centred).sum(-1) - len(Y) * (log_tau + LOG_SQRT_2PI)
        likelihood = _normal_log_pdf(y, effects, sigma).sum(-1)
        return prior + groups + likelihood

    def latent_order(self) -> Tensor:
        """mu and log tau before the school effects."""
        return torch.arange(self.dim_max)

    def prior_location_scale(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """f = (0, 0, mu, ..., mu); log g = (log 5, log 5, log tau, ..., log tau)."""
        n = len(Y)
        f = torch.cat([torch.zeros_like(theta[:, :2]), theta[:, :1].expand(-1, n)], dim=-1)
        log_g = torch.cat([torch.full_like(theta[:, :2], math.log(PRIOR_SCALE)), theta[:, 1:2].expand(-1, n)], dim=-1)
        return f, log_g

    # ----------------------------------------------------------- exact ground truth
    @cached_property
    def _marginal(self) -> tuple[Tensor, Tensor]:
        """Grid over log tau and log p(y, log tau) on it (theta and mu integrated out)."""
        grid = torch.linspace(*GRID[:2], GRID[2], dtype=torch.float64)
        var = self._sigma**2 + torch.exp(2 * grid)[:, None]  # [G, 8]
        # y ~ N(0, V + s^2 J) with V = diag(var), s = PRIOR_SCALE: Sherman-Morrison for the quadratic form and det.
        inv = 1.0 / var
        a = (inv * self._y).sum(-1)
        precision_sum = inv.sum(-1)
        denom = 1.0 + PRIOR_SCALE**2 * precision_sum
        quad = (inv * self._y**2).sum(-1) - PRIOR_SCALE**2 * a**2 / denom
        log_det = torch.log(var).sum(-1) + torch.log(denom)
        log_lik = -0.5 * (quad + log_det) - len(Y) * LOG_SQRT_2PI
        return grid, log_lik + _normal_log_pdf(grid, 0.0, PRIOR_SCALE)

    def log_evidence(self) -> float:
        """log p(y), by the trapezoid rule over log tau (error far below 1e-6)."""
        grid, log_density = self._marginal
        step = float(grid[1] - grid[0])
        top = log_density.max()
        values = torch.exp(log_density - top)
        return float(top + torch.log(step * (values.sum() - 0.5 * (values[0] + values[-1]))))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: log tau from its marginal on the grid, then mu | tau, y and theta | mu, tau, y."""
        grid, log_density = self._marginal
        weights = torch.exp(log_density - log_density.max())
        cell_mass = 0.5 * (weights[1:] + weights[:-1])
        cell = torch.multinomial(cell_mass, num_draws, replacement=True, generator=generator)
        u = torch.rand(num_draws, generator=generator, dtype=torch.float64)
        # Invert the linear density on the chosen cell: w(s) = w0 + (w1 - w0) s on s in [0, 1].
        w0, w1 = weights[cell], weights[cell + 1]
        slope = w1 - w0
        target = u * 0.5 * (w0 + w1)
        safe = slope.abs() > 1e-12 * (w0 + w1)
        root = (-w0 + torch.sqrt(w0 * w0 + 2 * slope * target)) / torch.where(safe, slope, 1.0)
        s = torch.where(safe, root, target / w0)
        log_tau = grid[cell] + s * (grid[1] - grid[0])
        tau2 = torch.exp(2 * log_tau)[:, None]
        var = self._sigma**2 + tau2
        precision = (1.0 / var).sum(-1) + 1.0 / PRIOR_SCALE**2
        mean = (self._y / var).sum(-1) / precision
        noise = torch.randn(num_draws, 1 + len(Y), generator=generator, dtype=torch.float64)
        mu = mean + noise[:, 0] / precision.sqrt()
        post_var = 1.0 / (1.0 / self._sigma**2 + 1.0 / tau2)
        post_mean = post_var * (self._y / self._sigma**2 + mu[:, None] / tau2)
        effects = post_mean + post_var.sqrt() * noise[:, 1:]
        theta = torch.cat([mu[:, None], log_tau[:, None], effects], dim=-1)
        return Draws(torch.zeros(num_draws, dtype=torch.int64), theta)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Fresh exact draws."""
        return self.reference_draws(num_draws, generator)
