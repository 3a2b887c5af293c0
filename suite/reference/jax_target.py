"""A problem's per-model log densities in JAX, on the saturated space, for NUTS and SMC.

For a fixed model m the reference engine samples the whole saturated vector
theta in R^dim_max: the active coordinates follow the posterior and the
inactive ones an independent N(0, 1). The extra factor integrates to one, so
normalising constants are unchanged, while every model has the same
dimension and one compiled kernel serves them all (``vmap`` over models).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suite.core.backend import jax_backend
from suite.core.problem import Problem

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class JaxTarget:
    """Saturated per-model log densities of a problem as JAX functions of (model index, theta[D])."""

    problem: Problem
    masks: Any  # jnp bool [K, D]
    dim: int

    @classmethod
    def of(cls, problem: Problem) -> JaxTarget:
        """Build the JAX view of an enumerable problem (raises if it has no backend-agnostic log joint)."""
        if problem.num_models is None:
            raise ValueError(f"problem {problem.name!r} has no enumerable model space; the engine needs one")
        xp = jax_backend()
        masks = problem.mask(problem.model_space.all_indices()).numpy()
        probe = torch.zeros(1, problem.dim_max, dtype=torch.float64)
        problem.log_joint_with(xp, xp.jnp.zeros(1, dtype=xp.jnp.int64), xp.jnp.asarray(probe.numpy()))
        return cls(problem, xp.jnp.asarray(masks), problem.dim_max)

    def _inactive_normal(self, m: Any, theta: Any) -> Any:
        jnp = jax_backend().jnp
        inactive = ~self.masks[m]
        return jnp.sum(jnp.where(inactive, -0.5 * theta * theta - LOG_SQRT_2PI, 0.0))

    def log_joint(self, m: Any, theta: Any) -> Any:
        """log p(D, theta_m, m) + sum over inactive coordinates of log N(theta_j; 0, 1), for one vector."""
        xp = jax_backend()
        value = self.problem.log_joint_with(xp, m[None], theta[None])[0]
        return value + self._inactive_normal(m, theta)

    def log_prior(self, m: Any, theta: Any) -> Any:
        """log p(theta_m | m) + the inactive N(0, 1) terms (a normalised density on R^D), for one vector."""
        xp = jax_backend()
        value = self.problem.log_prior_with(xp, m[None], theta[None])[0]
        return value + self._inactive_normal(m, theta)

    def sample_prior(self, model_index: np.ndarray, num: int, generator: torch.Generator) -> np.ndarray:
        """``num`` prior draws per model, N(0, 1) on inactive coordinates: float64 ``[len(model_index), num, D]``."""
        m = torch.as_tensor(model_index, dtype=torch.int64).repeat_interleave(num)
        theta = self.problem.sample_prior(m, generator)
        noise = torch.randn(theta.shape, generator=generator, dtype=torch.float64)
        theta = torch.where(self.problem.mask(m), theta, noise)
        return theta.reshape(len(model_index), num, self.dim).numpy()
