"""Simulated data of the misspecified robust variable-selection problem (VTI App. E; avti ``RobustVS._generate``).

Every random draw comes from one ``torch.Generator`` seeded with the data seed,
in the authors' call order (their code seeds torch's global RNG; a fresh
CPU generator with the same seed yields the same stream), in float64 on the
CPU. The authors' experiment drivers set torch's default dtype and device
before building the data, so their float32 or CUDA data sets differ from these
in the draws; the distribution is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

SPARSITY = 0.4
OUTLIER_FRACTION = 0.1
SIGMA_X = 1.0


@dataclass(frozen=True)
class Setting:
    """Constants of one misspecification level of the data-generating process."""

    sigma1: float  # inlier noise sd
    sigma2: float  # extra outlier noise sd
    correlation_proportion: float
    correlation_factor: float
    beta1: float  # coefficient on relevant columns, first part of the rows
    beta2: float  # coefficient on relevant columns, remaining rows
    sigmabeta1: float
    sigmabeta2: float
    sigmabeta_split: float  # fraction of rows using beta1 (the first ``int(n * split)`` rows)


SETTINGS: dict[str, Setting] = {
    "none": Setting(1.0, 10.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0),
    "mid": Setting(2.0, 5.0, 0.0, 0.1, 0.5, 1.5, 0.0, 0.0, 0.5),
    "high": Setting(4.0, 4.0, 0.4, 0.1, 0.5, 1.5, 0.0, 0.0, 0.5),
}


@dataclass(frozen=True)
class RobustVSData:
    """Design ``x`` [n, p] (column 0 is the intercept), response ``y`` [n], and the relevant columns (incl. 0)."""

    x: Tensor
    y: Tensor
    relevant: tuple[int, ...]
    outliers: tuple[int, ...]
    noise_free: Tensor  # x @ beta_true row by row, before any noise


def _random_signs(size: int, gen: torch.Generator) -> Tensor:
    """Uniform signs in {-1, +1} (avti ``generate_random_signs``)."""
    return 2 * torch.randint(0, 2, (size,), generator=gen) - 1


def generate(num_observations: int, dimension: int, setting: Setting, seed: int) -> RobustVSData:
    """Steps 1-5 of avti ``RobustVS._generate`` with a generator seeded by ``seed`` (float64, CPU)."""
    n, p, s = num_observations, dimension, setting
    gen = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    # 1. design with an intercept column
    x = torch.randn(n, p, generator=gen, dtype=f64) * SIGMA_X
    x[:, 0] = 1.0
    # 2. relevant columns: the intercept plus num_relevant - 1 random covariates
    num_relevant = int(p * SPARSITY)
    if num_relevant < 2:
        raise ValueError(f"need int(0.4 * dimension) >= 2 relevant columns incl. the intercept, got dimension {p}")
    selectable = torch.randperm(p - 1, generator=gen) + 1
    relevant = torch.tensor([0, *selectable[: num_relevant - 1].tolist()])
    # 3. correlate some irrelevant columns with two relevant ones (the permutation is drawn even if none are)
    keep = torch.ones(p, dtype=torch.bool)
    keep[relevant] = False
    remaining = torch.arange(p)[keep]
    num_correlated = int(p * s.correlation_proportion)
    correlated = remaining[torch.randperm(len(remaining), generator=gen)[:num_correlated]]
    cf = s.correlation_factor
    for idx in correlated.tolist():  # a handful of columns, once per data set
        x[:, idx] = x[:, idx] * (1 - cf)
        refs = relevant[torch.randperm(num_relevant, generator=gen)[:2]].tolist()
        coeffs = torch.rand(2, generator=gen, dtype=f64)
        coeffs = coeffs / coeffs.sum() * cf
        sign0 = _random_signs(1, gen)
        sign1 = _random_signs(1, gen)
        x[:, idx] += x[:, refs[0]] * coeffs[0] * sign0 + x[:, refs[1]] * coeffs[1] * sign1
    # 4. response: the first `split` rows use beta1, the rest beta2 (intercept included)
    split = int(n * s.sigmabeta_split)
    beta_true1 = torch.zeros(p, dtype=f64)
    beta_true1[relevant] = s.beta1 + s.sigmabeta1 * torch.randn(num_relevant, generator=gen, dtype=f64)
    mean1 = x[:split] @ beta_true1
    y1 = mean1 + torch.randn(split, generator=gen, dtype=f64) * s.sigma1
    beta_true2 = torch.zeros(p, dtype=f64)
    beta_true2[relevant] = s.beta2 + s.sigmabeta2 * torch.randn(num_relevant, generator=gen, dtype=f64)
    mean2 = x[split:] @ beta_true2
    y2 = mean2 + torch.randn(n - split, generator=gen, dtype=f64) * s.sigma1
    y = torch.cat([y1, y2])
    # 5. outliers: extra N(0, sigma2^2) noise on a random subset of rows
    num_outliers = int(n * OUTLIER_FRACTION)
    outliers = torch.randperm(n, generator=gen)[:num_outliers]
    y[outliers] += torch.randn(num_outliers, generator=gen, dtype=f64) * s.sigma2
    return RobustVSData(
        x=x,
        y=y,
        relevant=tuple(relevant.tolist()),
        outliers=tuple(outliers.tolist()),
        noise_free=torch.cat([mean1, mean2]),
    )
