"""Grouped masked moments against a per-group numpy computation."""

import numpy as np
import torch

from methods.common.moments import grouped_moments, safe_cholesky, shrunk_covariances


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
