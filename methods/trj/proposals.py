"""Comparison proposals for TRJ: independence jumps (Lopes & West 2004) and the Brooks et al. (2003) "standard" one.

An independence jump from (m, theta) to a given m' draws ALL parameters of m' afresh, theta' ~ q_m', and accepts with

    log alpha = log pi(m', theta') - log pi(m, theta) + log j_m'(m) - log j_m(m') + log q_m(theta) - log q_m'(theta').

:class:`LopesWestProposal` is the factor-analysis q of the TRJ paper (sec. 4.2): a Gaussian on the loadings with the
training draws' mean and twice their covariance, times IG(18, 18 v_i) on each noise variance lambda_i, v_i a mode
estimate of lambda_i. :class:`ScaledIdentityTransport` makes :func:`methods.trj.kernels.transport_jump` the Brooks
et al. proposal: shared coordinates are kept and newborn ones drawn from N(0, scale^2).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

from methods.common.chains import ChainState
from methods.common.moments import grouped_moments, safe_cholesky
from methods.trj.kernels import JumpRecord, metropolis_jump
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import row_sum, rows

#: Lopes & West's inverse-gamma shape for the noise variances.
LW_SHAPE = 18.0
#: Lopes & West's inflation of the posterior covariance of the loadings.
LW_COV_SCALE = 2.0
#: Elements of one block of pairwise differences in :func:`kde_modes` (about 32 MB in float64).
KDE_BLOCK = 2**22


class IndependenceProposal(Protocol):
    """Per-model proposal densities q_m on the active coordinates of saturated vectors."""

    def sample(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """theta ~ q_m for each row, ``[B, D]``, inactive coordinates zero."""
        ...

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log q_m(theta) of the active coordinates, ``[B]``."""
        ...


def independence_jump(
    problem: Problem,
    state: ChainState,
    proposal: IndependenceProposal,
    model_to: Tensor,
    log_jump_ratio: Tensor,
    generator: torch.Generator,
) -> tuple[ChainState, Tensor, JumpRecord]:
    """One independence proposal theta' ~ q_m' per chain; returns the new state, accept flags and the record.

    Chains proposed their own model stay put (log alpha 0, not accepted), as in ``transport_jump``.
    """
    m, theta, log_joint = state
    theta_to = proposal.sample(model_to, generator).to(theta.dtype)
    log_q = proposal.log_prob(m, theta) - proposal.log_prob(model_to, theta_to)
    log_joint_to = problem.log_joint(model_to, theta_to)
    log_ratio = (log_joint_to - log_joint) + log_jump_ratio + log_q
    return metropolis_jump(state, model_to, theta_to, log_joint_to, log_ratio, log_jump_ratio, generator)


class GaussianIndependenceProposal:
    """q_m = N(mu_m, c Sigma_m) on model m's active coordinates outside ``exclude``; mu, Sigma from training draws.

    Tables are ``[K, D]`` and ``[K, D, D]`` over an enumerable model space; coordinates outside a model's
    Gaussian block have mean 0 and an identity block in the Cholesky factor, and are ignored.
    """

    def __init__(self, mean: Tensor, chol: Tensor, block: Tensor) -> None:
        self.mean, self.chol, self.block = mean, chol, block
        log_diag = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1))
        self.log_norm = -row_sum(torch.where(block, log_diag + LOG_SQRT_2PI, 0.0))  # [K]

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        cov_scale: float = 1.0,
        exclude: Tensor | None = None,
    ) -> GaussianIndependenceProposal:
        """Mean and ``cov_scale`` x sample covariance (n - 1) of each model's draws, ``exclude [K, D]`` left out."""
        num_models = problem.model_space.num_models
        if num_models is None:
            raise ValueError("independence proposals need an enumerable model space")
        block = problem.mask(problem.model_space.all_indices(theta.device))
        if exclude is not None:
            block = block & ~exclude.to(theta.device)
        count, mean, cov = grouped_moments(model_index, theta, rows(block, model_index), num_models)
        draws = torch.bincount(model_index, minlength=num_models)
        short = (draws < block.sum(-1) + 2).nonzero().flatten().tolist()
        if short:
            names = ", ".join(problem.model_space.identifier(m) for m in short[:5])
            raise ValueError(f"too few draws to fit independence proposals for {len(short)} model(s), e.g. {names}")
        cov = cov_scale * cov * count / (count - 1).clamp_min(1)
        both = block[:, :, None] & block[:, None, :]
        eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
        cov = torch.where(both, cov, eye.expand_as(cov))
        return cls(torch.where(block, mean, 0.0), safe_cholesky(cov, block), block)

    def sample(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """theta = mu_m + L_m eps on the Gaussian block, zero elsewhere."""
        chol = rows(self.chol, model_index)
        eps = torch.randn(chol.shape[:-1], generator=generator, dtype=chol.dtype, device=chol.device)
        theta = rows(self.mean, model_index) + torch.matmul(chol, eps.unsqueeze(-1)).squeeze(-1)
        return torch.where(rows(self.block, model_index), theta, 0.0)

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log N(theta; mu_m, L_m L_m^T) of the Gaussian block."""
        block = rows(self.block, model_index)
        # where() first: slots outside the block may hold anything, even inf.
        centred = torch.where(block, theta - rows(self.mean, model_index), 0.0)
        z = torch.linalg.solve_triangular(rows(self.chol, model_index), centred.unsqueeze(-1), upper=False)
        z = z.squeeze(-1)
        return rows(self.log_norm, model_index) - 0.5 * row_sum(z * z)


def kde_modes(x: Tensor) -> Tensor:
    """For each column of ``x [N, d]``, the value with the highest Gaussian-KDE density (Scott's bandwidth), ``[d]``."""
    num, dim = x.shape
    bandwidth = x.std(0, correction=1) * num ** (-1.0 / 5.0)
    density = torch.empty_like(x)
    step = max(1, KDE_BLOCK // (num * dim))
    for start in range(0, num, step):  # blocks of query rows bound the memory of the pairwise differences
        u = (x[start : start + step, None, :] - x[None, :, :]) / bandwidth
        density[start : start + step] = torch.exp(-0.5 * u * u).sum(1)
    return x.gather(0, density.argmax(0, keepdim=True)).squeeze(0)


def standard_gamma_log(shape: float, size: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype) -> Tensor:
    """log G for G ~ Gamma(shape, 1), ``size``, reproducible from ``generator`` (torch's sampler takes none)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gamma = torch._standard_gamma(torch.full(size, shape, dtype=torch.float64))
    return gamma.log().to(device=generator.device, dtype=dtype)


class LopesWestProposal:
    """Lopes & West (2004): N(mu_k, 2 B_k) on the non-variance coordinates times IG(18, 18 v_k,i) on each lambda_i.

    Our coordinates are log beta_cc, beta_ij and log lambda_i, so the Gaussian needs no Jacobian and the density
    of x = log lambda is IG(e^x) e^x. ``ig_rate [K, D]`` holds 18 v_k,i on variance slots and 0 elsewhere.
    """

    def __init__(self, gaussian: GaussianIndependenceProposal, variance: Tensor, ig_rate: Tensor, shape: float) -> None:
        self.gaussian, self.variance, self.ig_rate, self.shape = gaussian, variance, ig_rate, shape
        log_rate = torch.where(variance, ig_rate, 1.0).log()
        self.ig_norm = row_sum(torch.where(variance, shape * log_rate - math.lgamma(shape), 0.0))  # [K]

    @staticmethod
    def supports(problem: Problem) -> str | None:
        """Why this proposal cannot be fitted to ``problem``, or None."""
        if not callable(getattr(problem, "variance_mask", None)):
            return f"{type(problem).__name__} marks no noise-variance coordinates (no variance_mask)"
        if problem.model_space.num_models is None:
            return "the model space cannot be enumerated"
        return None

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        shape: float = LW_SHAPE,
        cov_scale: float = LW_COV_SCALE,
    ) -> LopesWestProposal:
        """Gaussian moments and KDE modes v_k,i of lambda_i from each model's training draws."""
        reason = cls.supports(problem)
        if reason is not None:
            raise ValueError(reason)
        variance = problem.variance_mask(problem.model_space.all_indices(theta.device))  # [K, D]
        gaussian = GaussianIndependenceProposal.fit(problem, model_index, theta, cov_scale, exclude=variance)
        ig_rate = torch.zeros_like(variance, dtype=theta.dtype)
        for k in range(variance.shape[0]):  # a handful of models; each KDE is vectorised
            columns = variance[k].nonzero().flatten()
            if columns.numel():
                values = theta[model_index == k][:, columns].exp()
                ig_rate[k, columns] = shape * kde_modes(values)
        return cls(gaussian, variance, ig_rate, shape)

    def modes(self) -> Tensor:
        """The mode estimates v_k,i of the noise variances, ``[K, D]`` (zero off the variance slots)."""
        return self.ig_rate / self.shape

    def sample(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """theta ~ q_k: Gaussian block, and log lambda = log(18 v) - log Gamma(18, 1) on variance slots."""
        theta = self.gaussian.sample(model_index, generator)
        variance = rows(self.variance, model_index)
        log_gamma = standard_gamma_log(self.shape, tuple(theta.shape), generator, theta.dtype)
        log_lambda = torch.where(variance, rows(self.ig_rate, model_index), 1.0).log() - log_gamma
        return torch.where(variance, log_lambda, theta)

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log q_k(theta): the Gaussian term plus, per x = log lambda_i, a log b - lgamma(a) - a x - b e^{-x}."""
        variance = rows(self.variance, model_index)
        x = torch.where(variance, theta, 0.0)
        ig = rows(self.ig_norm, model_index) - row_sum(self.shape * x + rows(self.ig_rate, model_index) * torch.exp(-x))
        return self.gaussian.log_prob(model_index, theta) + ig


class ScaledIdentityTransport:
    """z = theta / scale on active coordinates, identity on inactive ones: Brooks et al. (2003) as a transport.

    In a TRJ jump shared coordinates keep their values and newborn ones are drawn from N(0, scale^2).
    ``scale`` is a float or a ``[D]`` tensor of per-coordinate scales.
    """

    def __init__(self, problem: Problem, scale: float | Tensor) -> None:
        self.problem = problem
        self.scale = torch.as_tensor(scale, dtype=torch.float64).expand(problem.dim_max)
        self.log_scale = self.scale.log()

    def _active(self, model_index: Tensor, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Active mask, scales and the log-determinant sum of log scale over active coordinates."""
        active = self.problem.mask(model_index)
        scale = self.scale.to(x.device, x.dtype)
        log_det = row_sum(torch.where(active, self.log_scale.to(x.device, x.dtype), 0.0))
        return active, scale, log_det

    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = theta / scale on active coordinates and log |det| = -sum log scale."""
        active, scale, log_det = self._active(model_index, theta)
        return torch.where(active, theta / scale, theta), -log_det

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = scale z on active coordinates and log |det| = sum log scale."""
        active, scale, log_det = self._active(model_index, z)
        return torch.where(active, z * scale, z), log_det
