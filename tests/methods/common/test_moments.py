"""Grouped masked moments against a per-group numpy computation."""

import numpy as np
import pytest
import torch

from methods.common import moments
from methods.common.moments import (
    grouped_diagonal_moments,
    grouped_moments,
    ridged_cholesky,
    safe_cholesky,
    shrink_to_pooled,
    shrunk_covariances,
)


@pytest.mark.parametrize("max_matmul_groups", [moments.MAX_MATMUL_GROUPS, 0], ids=["matmul", "chunked"])
def test_grouped_moments_match_numpy(max_matmul_groups: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of summing (a matrix product per group, outer products in row chunks), group 2 left empty."""
    monkeypatch.setattr(moments, "MAX_MATMUL_GROUPS", max_matmul_groups)
    gen = torch.Generator().manual_seed(0)
    n, d, g = 20_000, 3, 4
    group = torch.randint(0, g, (n,), generator=gen)
    group[group == 2] = 3
    mask = torch.rand(n, d, generator=gen) < 0.7
    x = torch.randn(n, d, generator=gen, dtype=torch.float64) * 2 + 1
    count, mean, cov = grouped_moments(group, x, mask, g)
    assert bool((count[2] == 0).all() & (mean[2] == 0).all() & (cov[2] == 0).all())
    for k in (0, 1, 3):
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
    # A group that saw nothing gets the pooled variances, without borrowing correlations.
    torch.testing.assert_close(out[1], 2.0 * torch.eye(2, dtype=torch.float64))
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


def test_ridge_goes_only_to_the_matrices_that_fail() -> None:
    # Regression: one indefinite matrix used to make every matrix of the batch get a ridge at the batch's
    # mean diagonal, inactive unit variances included; the well-conditioned one must be left alone.
    good = torch.tensor([[0.017, 0.016, 0.0], [0.016, 0.017, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    bad = torch.tensor([[0.02, 0.03, 0.0], [0.03, 0.02, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    active = torch.tensor([[True, True, False], [True, True, False]])
    chol, ridge = ridged_cholesky(torch.stack([good, bad]), active)
    torch.testing.assert_close(chol[0], torch.linalg.cholesky(good), rtol=0, atol=0)
    torch.testing.assert_close(safe_cholesky(torch.stack([good, bad]), active)[0], torch.linalg.cholesky(good))
    assert ridge[0] == 0 and 0 < ridge[1] < float("inf")
    # The failing matrix is ridged in proportion to its own active variances; its inactive unit variance stays.
    expected = bad + ridge[1] * torch.diag(torch.tensor([0.02, 0.02, 0.0], dtype=torch.float64))
    torch.testing.assert_close(chol[1] @ chol[1].mT, expected)


def test_ridged_cholesky_falls_back_to_the_diagonal_when_no_ridge_helps() -> None:
    hopeless = torch.tensor([[[1.0, 0.0], [0.0, -1e9]]], dtype=torch.float64)
    chol, ridge = ridged_cholesky(hopeless)
    assert torch.isinf(ridge[0])
    assert torch.isfinite(chol).all() and (torch.diagonal(chol, dim1=-2, dim2=-1) > 0).all()


def test_shrunk_covariances_are_positive_definite_where_entrywise_pooling_is_indefinite() -> None:
    # Models on coordinate pairs {0,1}, {1,2}, {0,2} with correlations +0.95, +0.95, -0.95 and different
    # scales: their entry-by-entry pooled covariance is indefinite, and every model shrunk towards it was
    # not positive definite. Shrinking variances and correlations separately is, by construction.
    d = 3
    sets = [(0, 1), (1, 2), (0, 2), (0, 1, 2)]
    draws = [5000.0, 3000.0, 2000.0, 4.0]
    blocks = [
        torch.tensor([[0.017, 0.95 * 0.017], [0.95 * 0.017, 0.017]]),
        torch.tensor([[1.0, 0.95 * 2.0], [0.95 * 2.0, 4.0]]),
        torch.tensor([[4.0, -0.95], [-0.95, 0.25]]),
        torch.tensor([[0.02, 0.01, 0.0], [0.01, 0.02, 0.01], [0.0, 0.01, 0.02]]),
    ]
    count = torch.zeros(len(sets), d, d, dtype=torch.float64)
    cov = torch.zeros(len(sets), d, d, dtype=torch.float64)
    for g, (idx, n, block) in enumerate(zip(sets, draws, blocks, strict=True)):
        ix = torch.tensor(idx)
        count[g][ix[:, None], ix[None, :]] = n
        cov[g][ix[:, None], ix[None, :]] = block.to(torch.float64)
    entrywise_pooled = (count * cov).sum(0) / count.sum(0)
    assert torch.linalg.eigvalsh(entrywise_pooled).min() < 0  # the premise: the old target is indefinite
    out = shrunk_covariances(count, cov, prior_weight=d + 2.0)
    assert (torch.linalg.cholesky_ex(out).info == 0).all()
    assert (torch.linalg.eigvalsh(out).min(-1).values > 0).all()
    # The 4-draw model: variances shrink towards the pooled ones with weight w = 5, correlations by 4 / 9.
    seen, var = torch.diagonal(count, dim1=-2, dim2=-1), torch.diagonal(cov, dim1=-2, dim2=-1)
    pooled = (seen * var).sum(0) / seen.sum(0)
    shrunk_var = (4.0 * var[3] + 5.0 * pooled) / 9.0
    torch.testing.assert_close(torch.diagonal(out[3]), shrunk_var)
    own_corr = cov[3, 0, 1] / (var[3, 0] * var[3, 1]).sqrt()
    torch.testing.assert_close(out[3, 0, 1], 4.0 / 9.0 * own_corr * (shrunk_var[0] * shrunk_var[1]).sqrt())
    # A model on a pair keeps no correlation with the coordinate it never saw.
    assert out[0, 0, 2] == 0 and out[0, 1, 2] == 0
    assert ridged_cholesky(out)[1].eq(0).all()


def test_shrunk_covariances_of_models_with_one_or_two_draws_are_positive_definite() -> None:
    # One draw has no spread at all, two draws a rank-one covariance: both must still be usable.
    gen = torch.Generator().manual_seed(2)
    group = torch.cat([torch.zeros(500, dtype=torch.int64), torch.tensor([1, 2, 2])])
    x = torch.randn(503, 4, generator=gen, dtype=torch.float64) @ torch.randn(4, 4, generator=gen, dtype=torch.float64)
    mask = torch.ones(503, 4, dtype=torch.bool)
    mask[500:, 3] = False
    count, _, cov = grouped_moments(group, x, mask, 3)
    out = shrunk_covariances(count, cov, prior_weight=6.0)
    assert (torch.linalg.eigvalsh(out).min(-1).values > 0).all()
    assert ridged_cholesky(out)[1].eq(0).all()
