"""Per-model transports T_m between pi(theta | m) and N(0, I), acting on the active coordinates of saturated vectors.

A transport has the methods of :class:`suite.core.problem.ExactTransport`:
``to_reference(model_index, theta) -> (z, log |det dz/dtheta|)`` and
``from_reference(model_index, z) -> (theta, log |det dtheta/dz|)``; inactive
coordinates pass through unchanged. A problem with exact maps (``sas``) is a
transport itself.
"""

from __future__ import annotations

import torch
from torch import Tensor

from methods.common.moments import grouped_moments, safe_cholesky, shrink_to_pooled, shrunk_covariances
from suite.core.problem import Problem, std_normal_log_prob
from suite.core.tensor_ops import row_sum, rows


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
    def fit(
        cls, problem: Problem, model_index: Tensor, theta: Tensor, min_draws: int | None = None, shrink: bool = False
    ) -> AffineTransport:
        """Moments of each model's draws.

        A model with fewer than ``min_draws`` (default dim + 2) draws is refused, unless ``shrink``: then every
        model's mean and covariance are shrunk towards the pooled ones with the weight of dim + 2 draws, so
        that models with few or no draws still get a transport (the pooled moments).
        """
        num_models = problem.model_space.num_models
        if num_models is None:
            raise ValueError("affine transports need an enumerable model space")
        mask = problem.mask(model_index)
        count, mean, cov = grouped_moments(model_index, theta, mask, num_models)
        active = problem.mask(problem.model_space.all_indices(theta.device))
        if shrink:
            weight = float(problem.dim_max + 2)
            mean = shrink_to_pooled(torch.diagonal(count, dim1=-2, dim2=-1), mean, prior_weight=1.0, default=0.0)
            cov = shrunk_covariances(count, cov, prior_weight=weight)
        else:
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
        # The inactive block must stay exactly the identity, or the transport would not pass inactive
        # coordinates through and its log-determinant would be off (safe_cholesky's last-resort fallback
        # could otherwise touch it).
        return cls(mean, torch.where(both, safe_cholesky(cov, active), eye.expand_as(cov)))

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


def transport_log_prob(transport: object, problem: Problem, model_index: Tensor, theta: Tensor) -> Tensor:
    """log q_m(theta_m): the density that ``transport`` pulls back from N(0, I) on m's active coordinates, ``[B]``.

    q_m(theta) = N(T_m(theta); 0, I) |det dT_m/dtheta|, for any transport acting on active coordinates only.
    """
    z, log_det = transport.to_reference(model_index, theta)
    return active_log_prob(z, log_det, problem.mask(model_index))


def active_log_prob(z: Tensor, log_det: Tensor, active: Tensor) -> Tensor:
    """sum over active coordinates of log N(z_i; 0, 1), plus ``log_det``, ``[B]``."""
    # where() before the sum: an inactive slot may hold anything, even inf.
    return row_sum(torch.where(active, std_normal_log_prob(z), 0.0)) + log_det
