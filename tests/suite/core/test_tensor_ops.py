"""Tensor helpers: the fast float64 normal sampler and the row helpers."""

import pytest
import torch
from scipy import stats

from suite.core.tensor_ops import row_sum, rows, standard_normal, uniform_to_normal_


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_standard_normal_is_standard_normal(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    z = standard_normal((200_000, 2), gen, dtype, torch.device("cpu"))
    assert z.dtype == dtype and z.shape == (200_000, 2) and bool(torch.isfinite(z).all())
    flat = z.double().flatten().numpy()
    # Kolmogorov-Smirnov at n = 4e5: a real departure of 0.005 in the CDF would give p ~ 1e-8.
    assert stats.kstest(flat, "norm").pvalue > 1e-3
    # Moments: standard errors sqrt(2/n) = 0.0022 for the variance, sqrt(96/n) = 0.015 for the 4th moment.
    assert abs(flat.var() - 1.0) < 0.011 and abs((flat**4).mean() - 3.0) < 0.08


def test_standard_normal_extreme_uniforms_stay_finite_and_symmetric() -> None:
    z = uniform_to_normal_(torch.tensor([0.0, 0.5 - 2.0**-54, 1.0 - 2.0**-53], dtype=torch.float64))
    assert bool(torch.isfinite(z).all()) and z[0] == -z[2] and z[2] > 8.0 and abs(float(z[1])) < 1e-15


def test_row_helpers_match_torch() -> None:
    x = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
    assert torch.equal(row_sum(x), x.sum(-1))
    index = torch.tensor([3, 0, 3])
    assert torch.equal(rows(x, index), x[index])
