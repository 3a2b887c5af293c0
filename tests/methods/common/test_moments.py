"""Grouped masked moments against a per-group numpy computation."""

import numpy as np
import torch

from methods.common.moments import (
    grouped_diagonal_moments,
    grouped_moments,
    safe_cholesky,
    shrink_to_pooled,
    shrunk_covariances,
)


def test_grouped_moments_match_numpy() -> None:
    gen = torch.Generator().manual_seed(0)
    n, d, g = 20_000, 3, 4
    group = torch.randint(0, g, (n,), generator=gen)
    mask = torch.rand(n, d, generator=gen) < 0.7
    x = torch.randn(n, d, generator=gen, dtype=torch.float64) * 2 + 1
    count, mean, cov = grouped_moments(group, x, mask, g)
    for k in range(g):
        xs, ms = x[group == k].numpy(), mask[group == k].numpy()
        for i in range(d):
            assert np.isclose(mean[k, i], xs[ms[:, i], i].mean())
            for j in range(d):
                both = ms[:, i] & ms[:, j]
                mi, mj = xs[ms[:, i], i].mean(), xs[ms[:, j], j].mean()
                expected = ((xs[both, i] - mi) * (xs[both, j] - mj)).mean()
                assert count[k, i, j] == both.sum() and np.isclose(cov[k, i, j], expected)


def test_shrunk_covariances_are_positive_definite() -> None:
    count = torch.zeros(2, 2, 2, dtype=torch.float64)
    count[0] = 50.0  # group 1 never saw anything
    cov = torch.zeros(2, 2, 2, dtype=torch.float64)
    cov[0] = torch.tensor([[2.0, 1.99], [1.99, 2.0]])
    out = shrunk_covariances(count, cov, prior_weight=4.0)
    torch.testing.assert_close(out[1], cov[0] + 1e-9 * 2.0 * torch.eye(2, dtype=torch.float64))
    chol = safe_cholesky(out)
    torch.testing.assert_close(chol @ chol.mT, out)


def test_shrink_to_pooled_borrows_the_pooled_value() -> None:
    count = torch.tensor([[30.0], [10.0], [0.0]], dtype=torch.float64)  # group 2 never seen
    value = torch.tensor([[1.0], [5.0], [0.0]], dtype=torch.float64)
    out = shrink_to_pooled(count, value, prior_weight=10.0, default=7.0)
    pooled = (30 * 1.0 + 10 * 5.0) / 40
    expected = torch.tensor([(30 + 10 * pooled) / 40, (50 + 10 * pooled) / 20, pooled], dtype=torch.float64)
    torch.testing.assert_close(out[:, 0], expected)
    assert shrink_to_pooled(torch.zeros(2, 1), torch.zeros(2, 1), 1.0, default=7.0).eq(7.0).all()


def test_diagonal_moments_agree_with_full_moments() -> None:
    gen = torch.Generator().manual_seed(1)
    group = torch.randint(0, 3, (5000,), generator=gen)
    mask = torch.rand(5000, 4, generator=gen) < 0.6
    x = torch.randn(5000, 4, generator=gen, dtype=torch.float64)
    count, mean, cov = grouped_moments(group, x, mask, 3)
    n, m, v = grouped_diagonal_moments(group, x, mask, 3)
    torch.testing.assert_close(n, torch.diagonal(count, dim1=-2, dim2=-1))
    torch.testing.assert_close(m, mean)
    torch.testing.assert_close(v, torch.diagonal(cov, dim1=-2, dim2=-1))
