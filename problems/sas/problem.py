"""Two-model sinh-arcsinh target of the TRJ paper (Davies et al. 2023, sec. 4.1).

pi(k=1, theta_1) = 1/4 p_1(theta_1) and pi(k=2, theta_2) = 3/4 p_2(theta_2),
where p_k is the law of theta = S_{eps,delta}(L Z), Z ~ N(0, I_{n_k}), and
S_{eps,delta}(x) = sinh(delta^{-1} (asinh(x) + eps)) elementwise:

- model "k=1": n = 1, eps = -2, delta = 1, L = 1;
- model "k=2": n = 2, eps = (1.5, -2), delta = (1, 1.5), L L^T = [[1, .99], [.99, 1]].

The target is normalised, so the evidence is 1 and the model probabilities
are exactly 1/4 and 3/4. The exact transport to the N(0, I) reference is
T_k(theta) = L^{-1} S^{-1}(theta) (TRJ eq. 14). As in the authors' code the
model prior is uniform and the weights 1/4, 3/4 sit in the likelihood.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from suite.core.backend import TORCH
from suite.core.model_space import CategoricalSpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, rows
from suite.core.types import Draws, ModelProbs

MODEL_WEIGHTS = (0.25, 0.75)
# Row k holds the constants of model k for coordinates (theta_1, theta_2); model
# "k=1" has no second coordinate, so its second entries are placeholders.
EPSILON = ((-2.0, 0.0), (1.5, -2.0))
DELTA = ((1.0, 1.0), (1.0, 1.5))
RHO = 0.99
L21 = RHO
L22 = math.sqrt(1.0 - RHO**2)


def _log_cosh(x: Tensor) -> Tensor:
    """log cosh(x) without overflow."""
    a = x.abs()
    return a + torch.log1p(torch.exp(-2.0 * a)) - math.log(2.0)


@register_problem("sas")
class SinhArcsinh(Problem):
    """Sinh-arcsinh toy of TRJ sec. 4.1: models of dimension 1 and 2 with probabilities 1/4 and 3/4."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 3.0}

    main_metric: ClassVar[str] = "model_prob_tv"

    def __init__(self) -> None:
        self.model_space = CategoricalSpace(["k=1", "k=2"])
        self.dim_max = 2
        self._masks = torch.tensor([[True, False], [True, True]])
        self._log_weights = torch.tensor(MODEL_WEIGHTS, dtype=torch.float64).log()
        self._device = DeviceCache(masks=self._masks, table=self._build_table(self._log_weights, self._masks))

    @staticmethod
    def _build_table(log_weights: Tensor, masks: Tensor) -> Tensor:
        """Per-model constants [2, 10].

        Columns: -eps (0:2), delta (2:4), log delta (4:6), offset (6), has-theta_2 (7), eps (8:10).
        """
        eps = torch.tensor(EPSILON, dtype=torch.float64)
        delta = torch.tensor(DELTA, dtype=torch.float64)
        second = masks[:, 1:].to(torch.float64)
        # log w_k, the N(0, I) constants of the active coordinates and log |det L^{-1}|.
        offset = log_weights[:, None] - LOG_SQRT_2PI * (1.0 + second) - second * math.log(L22)
        return torch.cat([-eps, delta, delta.log(), offset, second, eps], dim=-1)

    # ------------------------------------------------------------------ contract
    def mask(self, model_index: Tensor) -> Tensor:
        """Model "k=1" uses theta_1 only; "k=2" uses both coordinates."""
        return rows(self._device.get("masks", model_index.device), model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over the two models (the weights are in the likelihood)."""
        return torch.full(model_index.shape, -math.log(2.0), dtype=torch.float64, device=model_index.device)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log pi(k, theta_k) = log w_k + log N(z; 0, I) + log |det dz/dtheta|, z = T_k(theta); exactly normalised."""
        constants = xp.take(xp.constant(self._device, "table", theta), model_index)
        active = xp.take(xp.constant(self._device, "masks", theta, exact_dtype=False), model_index)
        y, log_dy = self._sas_inverse(xp, constants, active, theta)
        y0, y1 = y[:, 0], y[:, 1]
        first = xp.fma(log_dy[:, 0] + constants[:, 6], y0, y0, -0.5)
        # z_2 = (y_2 - rho y_1) / sqrt(1 - rho^2); its square term is folded into one fma.
        r = xp.axpy(y1, y0, -L21)
        second = xp.fma(log_dy[:, 1], r, r, -0.5 / L22**2)
        return xp.nan_to_neg_inf(xp.fma(first, constants[:, 7], second))

    # ------------------------------------------------------------ exact transport
    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = L^{-1} S^{-1}(theta) on active coordinates, and log |det dz/dtheta|."""
        constants = rows(self._device.get("table", theta.device, theta.dtype), model_index)
        y, log_dy = self._sas_inverse(TORCH, constants, self.mask(model_index), theta)
        second = constants[:, 7]
        z1 = torch.where(second > 0, (y[:, 1] - L21 * y[:, 0]) / L22, theta[:, 1])
        return torch.stack([y[:, 0], z1], dim=-1), log_dy[:, 0] + second * (log_dy[:, 1] - math.log(L22))

    @staticmethod
    def _sas_inverse(xp: Any, constants: Any, active: Any, theta: Any) -> tuple[Any, Any]:
        """y = S^{-1}(theta) elementwise and log |dS^{-1}/dx| per coordinate.

        Inactive coordinates are set to zero first so that whatever they hold
        (even NaN) cannot leak into the result through the masked arithmetic.
        """
        theta = xp.where(active, theta, 0.0)
        inner = xp.fma(constants[:, 0:2], constants[:, 2:4], xp.asinh(theta))  # delta asinh(x) - eps
        y = xp.sinh(inner)
        # d/dx sinh(delta asinh(x) - eps) = delta cosh(delta asinh(x) - eps) / sqrt(1 + x^2), and
        # cosh(a) = sqrt(1 + sinh(a)^2), so log |dy/dx| = log delta + (log1p(y^2) - log1p(x^2)) / 2.
        # y^2 overflows only for |theta| beyond ~1e100, where the density is zero anyway (NaN -> -inf).
        log_dy = xp.axpy(constants[:, 4:6], xp.log1p(y * y) - xp.log1p(theta * theta), 0.5)
        return y, log_dy

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = S(L z) on active coordinates, and log |det dtheta/dz|."""
        constants = rows(self._device.get("table", z.device, z.dtype), model_index)
        eps, delta, log_delta, two = constants[:, 8:10], constants[:, 2:4], constants[:, 4:6], constants[:, 7] > 0
        y = torch.stack([z[:, 0], torch.where(two, L21 * z[:, 0] + L22 * z[:, 1], z[:, 1])], dim=-1)
        outer = (torch.asinh(y) + eps) / delta
        # d/dy sinh((asinh(y) + eps) / delta) = cosh(.) / (delta sqrt(1 + y^2))
        log_dtheta = _log_cosh(outer) - log_delta - 0.5 * torch.log1p(y * y)
        theta = torch.stack([torch.sinh(outer[:, 0]), torch.where(two, torch.sinh(outer[:, 1]), z[:, 1])], dim=-1)
        log_det = log_dtheta[:, 0] + torch.where(two, log_dtheta[:, 1] + math.log(L22), 0.0)
        return theta, log_det

    # --------------------------------------------------------------- ground truth
    def reference_model_probs(self) -> ModelProbs:
        """Exactly (1/4, 3/4)."""
        return ModelProbs.from_dense(torch.tensor(MODEL_WEIGHTS, dtype=torch.float64))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: k ~ Categorical(1/4, 3/4), theta = S(L Z); inactive coordinates are zero."""
        device = generator.device
        weights = torch.tensor(MODEL_WEIGHTS, dtype=torch.float64, device=device)
        model_index = torch.multinomial(weights, num_draws, replacement=True, generator=generator)
        z = torch.randn(num_draws, 2, generator=generator, dtype=torch.float64, device=device)
        z = torch.where(self.mask(model_index), z, torch.zeros_like(z))
        theta, _ = self.from_reference(model_index, z)
        return Draws(model_index, theta)
