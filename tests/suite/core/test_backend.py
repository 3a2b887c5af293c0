"""The backend namespaces agree function by function."""

import numpy as np
import pytest
import torch

from suite.core.backend import TORCH, jax_backend
from suite.core.tensor_ops import DeviceCache


@pytest.fixture(scope="module")
def arrays():
    import jax.numpy as jnp

    jax_backend()  # enables float64 in JAX; arrays made before that would silently be float32
    gen = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(5, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    return (a, b, c), tuple(jnp.asarray(x.numpy()) for x in (a, b, c))


def test_elementwise_and_reductions_agree(arrays) -> None:
    (a, b, c), (ja, jb, jc) = arrays
    jx = jax_backend()
    pairs = [
        (TORCH.fma(a, b, c, -0.5), jx.fma(ja, jb, jc, -0.5)),
        (TORCH.axpy(a, b, 2.5), jx.axpy(ja, jb, 2.5)),
        (TORCH.row_sum(a), jx.row_sum(ja)),
        (TORCH.asinh(a), jx.asinh(ja)),
        (TORCH.scatter_columns(6, torch.tensor([4, 0, 2]), a), jx.scatter_columns(6, np.array([4, 0, 2]), ja)),
        (TORCH.take(a, torch.tensor([3, 3, 1])), jx.take(ja, np.array([3, 3, 1]))),
        (TORCH.nan_to_neg_inf(torch.log(a)), jx.nan_to_neg_inf(jx.log(ja))),
    ]
    for got_torch, got_jax in pairs:
        np.testing.assert_allclose(np.asarray(got_jax), got_torch.numpy(), rtol=1e-14, atol=1e-14)


def test_constants_are_converted_once_per_backend() -> None:
    cache = DeviceCache(table=torch.arange(6.0).view(2, 3))
    like = torch.zeros(1, dtype=torch.float64)
    assert TORCH.constant(cache, "table", like).dtype == torch.float64
    first = jax_backend().constant(cache, "table", np.zeros(1))
    assert first is jax_backend().constant(cache, "table", np.zeros(1))
    assert str(first.dtype) == "float64"
