"""Tensor helpers: the fast float64 normal sampler and the row helpers."""

import pytest
import torch
from scipy import stats

from suite.core.tensor_ops import row_sum, rows, standard_normal, uniform_to_normal_, unique_rows
from suite.core.types import ModelProbs


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


@pytest.mark.parametrize("width", [None, 2])
def test_unique_rows_matches_torch_unique_over_rows(width: int | None) -> None:
    """Sorted distinct rows, inverse and counts as ``torch.unique(dim=0)``, for [K] and [K, W] indices."""
    gen = torch.Generator().manual_seed(0)
    shape = (500,) if width is None else (500, width)
    x = torch.randint(0, 20, shape, generator=gen)
    fast = unique_rows(x, return_inverse=True, return_counts=True)
    slow = torch.unique(x, dim=0, return_inverse=True, return_counts=True)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))


def test_model_probs_refuses_repeated_indices_of_either_shape() -> None:
    with pytest.raises(ValueError, match="distinct"):
        ModelProbs(torch.tensor([0, 3, 0]), torch.full((3,), 1 / 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="distinct"):
        ModelProbs(torch.tensor([[0, 1], [0, 1]]), torch.full((2,), 0.5, dtype=torch.float64))
    assert ModelProbs(torch.tensor([[0, 1], [1, 0]]), torch.full((2,), 0.5, dtype=torch.float64)).total() == 1.0
