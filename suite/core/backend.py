"""Array backends, so that each log density is written once and evaluated in torch and in JAX.

Problems write ``log_joint_with(xp, model_index, theta)`` against the small
namespace below; ``xp`` is :data:`TORCH` for the methods (batched, fast on
CPU and CUDA) or :func:`jax_backend` for the reference engine (NumPyro,
BlackJAX). Both namespaces offer the same functions with the same meaning;
the torch side uses the forms that are cheapest on small CPU batches
(``index_select``, ``addcmul``, matrix-vector row sums).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import torch

from suite.core.tensor_ops import DeviceCache, row_sum


class TorchBackend:
    """torch implementation of the backend namespace."""

    name = "torch"
    asinh = staticmethod(torch.asinh)
    sinh = staticmethod(torch.sinh)
    exp = staticmethod(torch.exp)
    log = staticmethod(torch.log)
    log1p = staticmethod(torch.log1p)
    where = staticmethod(torch.where)
    abs = staticmethod(torch.abs)
    maximum = staticmethod(torch.maximum)
    sqrt = staticmethod(torch.sqrt)
    stack = staticmethod(torch.stack)
    row_sum = staticmethod(row_sum)

    @staticmethod
    def constant(cache: DeviceCache, name: str, like: Any, exact_dtype: bool = True) -> Any:
        """Constant ``name`` on ``like``'s device (in its dtype when ``exact_dtype``)."""
        return cache.get(name, like.device, like.dtype if exact_dtype else None)

    @staticmethod
    def take(table: Any, index: Any) -> Any:
        """Rows ``table[index]``."""
        return table.index_select(0, index)

    @staticmethod
    def fma(a: Any, b: Any, c: Any, scale: float = 1.0) -> Any:
        """``a + scale * b * c``."""
        return torch.addcmul(a, b, c, value=scale)

    @staticmethod
    def axpy(y: Any, x: Any, alpha: float) -> Any:
        """``y + alpha * x``."""
        return torch.add(y, x, alpha=alpha)

    @staticmethod
    def nan_to_neg_inf(x: Any) -> Any:
        """Replace NaN by ``-inf`` (a density that cannot be evaluated is zero)."""
        return torch.nan_to_num(x, nan=-math.inf, posinf=math.inf, neginf=-math.inf)

    @staticmethod
    def sum(x: Any, axis: int) -> Any:
        """Sum over ``axis``."""
        return x.sum(axis)

    @staticmethod
    def diagonal(x: Any) -> Any:
        """Diagonal of a square matrix (last two axes)."""
        return torch.diagonal(x, dim1=-2, dim2=-1)

    @staticmethod
    def scatter_columns(num_columns: int, index: Any, values: Any) -> Any:
        """``out[:, index] = values`` into zeros of shape ``[B, num_columns]``."""
        return values.new_zeros(values.shape[0], num_columns).index_copy(1, index, values)

    @staticmethod
    def cast(x: Any, like: Any) -> Any:
        """``x`` in the dtype of ``like``."""
        return x.to(like.dtype)

    @staticmethod
    def logaddexp(a: Any, b: Any) -> Any:
        """``log(exp(a) + exp(b))`` elementwise, stably."""
        return torch.logaddexp(a, b)

    @staticmethod
    def logsumexp(x: Any, axis: int) -> Any:
        """``log(sum(exp(x)))`` over ``axis``, stably."""
        return torch.logsumexp(x, axis)

    @staticmethod
    def cholesky(x: Any) -> Any:
        """Lower Cholesky factor of symmetric positive-definite matrices (last two axes); NaN if not SPD."""
        factor, info = torch.linalg.cholesky_ex(x)
        return torch.where((info > 0)[..., None, None], math.nan, factor)

    @staticmethod
    def solve_lower(lower: Any, rhs: Any) -> Any:
        """``lower^{-1} rhs`` for lower-triangular ``lower`` (batched over leading axes)."""
        return torch.linalg.solve_triangular(lower, rhs, upper=False)

    @staticmethod
    def concat(parts: Any, axis: int) -> Any:
        """Concatenate along ``axis``."""
        return torch.cat(parts, axis)


class JaxBackend:
    """JAX implementation of the backend namespace (float64 enabled)."""

    name = "jax"

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        self.jnp = jnp
        self.asinh, self.sinh, self.exp, self.log = jnp.arcsinh, jnp.sinh, jnp.exp, jnp.log
        self.log1p, self.where, self.stack = jnp.log1p, jnp.where, jnp.stack
        self.abs, self.maximum, self.sqrt = jnp.abs, jnp.maximum, jnp.sqrt

    def constant(self, cache: DeviceCache, name: str, like: Any, exact_dtype: bool = True) -> Any:
        """Constant ``name`` as a JAX array (in ``like``'s dtype when ``exact_dtype``)."""
        return cache.jax(name, like.dtype if exact_dtype else None)

    def row_sum(self, x: Any) -> Any:
        """Sum over the last axis."""
        return x.sum(-1)

    def take(self, table: Any, index: Any) -> Any:
        """Rows ``table[index]``."""
        return self.jnp.take(table, index, axis=0)

    def fma(self, a: Any, b: Any, c: Any, scale: float = 1.0) -> Any:
        """``a + scale * b * c``."""
        return a + scale * b * c

    def axpy(self, y: Any, x: Any, alpha: float) -> Any:
        """``y + alpha * x``."""
        return y + alpha * x

    def nan_to_neg_inf(self, x: Any) -> Any:
        """Replace NaN by ``-inf``."""
        return self.jnp.where(self.jnp.isnan(x), -self.jnp.inf, x)

    def sum(self, x: Any, axis: int) -> Any:
        """Sum over ``axis``."""
        return x.sum(axis)

    def diagonal(self, x: Any) -> Any:
        """Diagonal of a square matrix (last two axes)."""
        return self.jnp.diagonal(x, axis1=-2, axis2=-1)

    def scatter_columns(self, num_columns: int, index: Any, values: Any) -> Any:
        """``out[:, index] = values`` into zeros of shape ``[B, num_columns]``."""
        return self.jnp.zeros((values.shape[0], num_columns), dtype=values.dtype).at[:, index].set(values)

    def cast(self, x: Any, like: Any) -> Any:
        """``x`` in the dtype of ``like``."""
        return x.astype(like.dtype)

    def logaddexp(self, a: Any, b: Any) -> Any:
        """``log(exp(a) + exp(b))`` elementwise, stably."""
        return self.jnp.logaddexp(a, b)

    def logsumexp(self, x: Any, axis: int) -> Any:
        """``log(sum(exp(x)))`` over ``axis``, stably."""
        import jax.scipy.special

        return jax.scipy.special.logsumexp(x, axis=axis)

    def cholesky(self, x: Any) -> Any:
        """Lower Cholesky factor of symmetric positive-definite matrices (last two axes); NaN if not SPD."""
        factor = self.jnp.linalg.cholesky(x)
        failed = self.jnp.isnan(factor).any(axis=(-2, -1), keepdims=True)
        return self.jnp.where(failed, self.jnp.nan, factor)

    def solve_lower(self, lower: Any, rhs: Any) -> Any:
        """``lower^{-1} rhs`` for lower-triangular ``lower`` (batched over leading axes)."""
        import jax.scipy.linalg

        return jax.scipy.linalg.solve_triangular(lower, rhs, lower=True)

    def concat(self, parts: Any, axis: int) -> Any:
        """Concatenate along ``axis``."""
        return self.jnp.concatenate(parts, axis)


TORCH = TorchBackend()


@cache
def jax_backend() -> JaxBackend:
    """The JAX backend (imports JAX and enables float64 on first use)."""
    return JaxBackend()
