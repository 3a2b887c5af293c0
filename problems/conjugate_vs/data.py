"""Simulated data of the conjugate variable-selection problem: AR(1)-correlated covariates, a sparse true beta."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: Magnitudes of the nonzero covariate coefficients, largest first (signs drawn from the data seed).
SIGNAL = (0.5, 0.35, 0.25, 0.2, 0.15)
#: Coefficient of the intercept column.
INTERCEPT = 1.0


@dataclass(frozen=True)
class RegressionData:
    """Design ``x`` [n, p + 1] (column 0 is the intercept), response ``y`` [n] and the true coefficients [p + 1]."""

    x: Tensor
    y: Tensor
    beta: Tensor

    @property
    def relevant(self) -> tuple[int, ...]:
        """Columns with a nonzero true coefficient (0 is the intercept)."""
        return tuple(int(j) for j in torch.nonzero(self.beta).flatten())


def true_coefficients(num_covariates: int, generator: torch.Generator) -> Tensor:
    """[INTERCEPT, beta_1..beta_p]: max(2, p // 4) nonzero covariates, evenly spaced, magnitudes from SIGNAL."""
    beta = torch.zeros(num_covariates + 1, dtype=torch.float64)
    beta[0] = INTERCEPT
    num_nonzero = min(max(2, num_covariates // 4), len(SIGNAL), num_covariates)
    columns = [1 + (k * num_covariates) // num_nonzero for k in range(num_nonzero)]
    signs = 2.0 * torch.randint(0, 2, (num_nonzero,), generator=generator, dtype=torch.float64) - 1.0
    beta[columns] = signs * torch.tensor(SIGNAL[:num_nonzero], dtype=torch.float64)
    return beta


def generate(
    num_covariates: int, num_observations: int, correlation: float, noise_variance: float, seed: int
) -> RegressionData:
    """Rows x_i ~ N(0, Sigma), Sigma_jk = correlation^|j-k| (an AR(1) chain), y = X beta + N(0, noise_variance)."""
    gen = torch.Generator().manual_seed(seed)
    beta = true_coefficients(num_covariates, gen)
    z = torch.randn(num_observations, num_covariates, generator=gen, dtype=torch.float64)
    covariates = torch.empty_like(z)
    covariates[:, 0] = z[:, 0]
    innovation = math.sqrt(1.0 - correlation**2)
    for j in range(1, num_covariates):
        covariates[:, j] = correlation * covariates[:, j - 1] + innovation * z[:, j]
    x = torch.cat([torch.ones(num_observations, 1, dtype=torch.float64), covariates], dim=1)
    noise = torch.randn(num_observations, generator=gen, dtype=torch.float64) * math.sqrt(noise_variance)
    return RegressionData(x=x, y=x @ beta + noise, beta=beta)
