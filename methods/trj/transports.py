"""Per-model transports T_m between pi(theta | m) and N(0, I), acting on the active coordinates of saturated vectors.

A transport has the methods of :class:`suite.problem.ExactTransport`:
``to_reference(model_index, theta) -> (z, log |det dz/dtheta|)`` and
``from_reference(model_index, z) -> (theta, log |det dtheta/dz|)``; inactive
coordinates pass through unchanged. A problem with exact maps (``sas``) is a
transport itself.
"""

from __future__ import annotations

import torch
from torch import Tensor

from methods.common.moments import grouped_moments, safe_cholesky
from suite.problem import Problem
from suite.tensor_ops import row_sum, rows


class AffineTransport:
    """z = L_m^{-1} (theta - mu_m) on the active block: the TRJ paper's "Affine NF".

    ``mu_m`` and ``L_m`` (Cholesky factor of the covariance) are the sample
    moments of model m's draws. Inactive coordinates have mean 0 and an
    identity block in L_m, so they pass through. The tables are ``[K, D]`` and
    ``[K, D, D]`` over the K models of an enumerable space.
    """

    def __init__(self, mean: Tensor, chol: Tensor) -> None:
        self.mean, self.chol = mean, chol
        self.log_diag = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1))

    @classmethod
    def fit(cls, problem: Problem, model_index: Tensor, theta: Tensor, min_draws: int | None = None) -> AffineTransport:
        """Moments of each model's draws; a model with fewer than ``min_draws`` (default dim + 2) draws is refused."""
        num_models = problem.model_space.num_models
        if num_models is None:
            raise ValueError("affine transports need an enumerable model space")
        mask = problem.mask(model_index)
        _, mean, cov = grouped_moments(model_index, theta, mask, num_models)
        active = problem.mask(problem.model_space.all_indices(theta.device))
        need = (active.sum(-1) + 2) if min_draws is None else torch.full((num_models,), min_draws)
        draws = torch.bincount(model_index, minlength=num_models)
        short = (draws < need.to(draws.device)).nonzero().flatten().tolist()
        if short:
            names = ", ".join(problem.model_space.identifier(m) for m in short[:5])
            raise ValueError(f"too few draws to fit transports for {len(short)} model(s), e.g. {names}")
        both = active[:, :, None] & active[:, None, :]
        eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
        cov = torch.where(both, cov, eye.expand_as(cov))
        mean = torch.where(active, mean, torch.zeros_like(mean))
        return cls(mean, safe_cholesky(cov))

    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = L_m^{-1} (theta - mu_m) and its log-determinant -sum log diag L_m."""
        chol = rows(self.chol, model_index)
        centred = theta - rows(self.mean, model_index)
        z = torch.linalg.solve_triangular(chol, centred.unsqueeze(-1), upper=False).squeeze(-1)
        return z, -row_sum(rows(self.log_diag, model_index))

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = mu_m + L_m z and its log-determinant sum log diag L_m."""
        chol = rows(self.chol, model_index)
        theta = rows(self.mean, model_index) + torch.matmul(chol, z.unsqueeze(-1)).squeeze(-1)
        return theta, row_sum(rows(self.log_diag, model_index))
