"""``example-is``: importance sampling, then a Gaussian per model fitted to the weighted draws.

The Method contract in one small class: options as dataclass fields with presets per profile, ``finalise``
checking them, ``supports``, steps run in the run's loop (``context.loop``: the time budget, running estimates
and the progress bar), phase timings, and a ``Result`` with q(m), draws, and a
density q(m, theta_m) it can also sample afresh (``log_density``, ``sample_q``: cross-entropy and -ELBO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from suite import Draws, Method, ModelProbs, Problem, Result, RunContext
from suite.core.context import BudgetTooSmall

#: Largest model space the sampler enumerates (it keeps statistics per model).
MAX_MODELS = 256
#: Smallest variance of a fitted Gaussian coordinate (a model seen through a few heavy weights).
MIN_VARIANCE = 1e-4
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class ExampleImportanceSampler(Method):
    """Importance sampling from uniform models and N(0, scale^2) parameters; q(m) from the evidence estimates,
    q(theta | m) a Gaussian matched to each model's weighted draws."""

    num_iterations: int | None = None  # None: the profile's preset below
    batch_size: int | None = None
    scale: float = 2.0
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_iterations": 50, "batch_size": 256},
        "quick": {"num_iterations": 2_000, "batch_size": 1_024},
        "paper": {"num_iterations": 20_000, "batch_size": 4_096},
    }

    def finalise(self, problem: Problem) -> ExampleImportanceSampler:
        """Refuse options that make no sense, naming the valid range (before any run starts)."""
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")
        if self.batch_size < 1 or self.num_iterations < 1:
            sizes = f"batch_size {self.batch_size}, num_iterations {self.num_iterations}"
            raise ValueError(f"batch_size and num_iterations must be at least 1, got {sizes}")
        return self

    def supports(self, problem: Problem) -> str | None:
        """It keeps statistics per model: enumerable spaces of at most MAX_MODELS models only."""
        if problem.num_models is None or problem.num_models > MAX_MODELS:
            return f"needs an enumerable model space of at most {MAX_MODELS} models"
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Sample, weigh and fit until the budget (or the profile's iteration count) is spent."""
        generator = torch.Generator(context.device).manual_seed(context.seed)
        fit = WeightedFit(problem.num_models, problem.dim_max, context.device)
        with context.loop("example-is", planned=self.num_iterations) as loop, context.timer.phase("train"):
            while not loop.finished():
                model_index = problem.model_space.sample_uniform(self.batch_size, generator).to(context.device)
                mask = problem.mask(model_index)
                z = torch.randn(mask.shape, generator=generator, dtype=context.dtype, device=context.device)
                theta = torch.where(mask, self.scale * z, 0.0)
                log_proposal = (mask * (-0.5 * z * z - math.log(self.scale) - LOG_SQRT_2PI)).sum(-1)
                fit.add(model_index, theta, (problem.log_joint(model_index, theta) - log_proposal).double())
                # The estimate is made only when a snapshot is due, with the clock paused.
                loop.advance(estimate=fit.model_probs)
        probs = fit.model_probs()
        if probs is None:
            raise BudgetTooSmall("no batch finished within the time budget")
        loop.snapshot(lambda: probs)  # the trace ends at the result
        density = fit.density(problem, self.scale)
        with context.timer.phase("sample"):
            draws = density.sample(context.num_draws, generator)
        return Result(
            model_probs=probs,
            draws=draws,
            log_density=density.log_density,
            sample_q=density.sample,
            diagnostics={"iterations": loop.iteration, "proposal_scale": self.scale},
        )


class WeightedFit:
    """Per model: the log of the summed importance weights, the draw count, and weighted first and second moments."""

    def __init__(self, num_models: int, dim: int, device: torch.device) -> None:
        self.log_total = torch.full((num_models,), -math.inf, dtype=torch.float64, device=device)
        self.count = torch.zeros(num_models, dtype=torch.float64, device=device)
        self.mean = torch.zeros(num_models, dim, dtype=torch.float64, device=device)
        self.second = torch.zeros(num_models, dim, dtype=torch.float64, device=device)

    def add(self, model_index: Tensor, theta: Tensor, log_w: Tensor) -> None:
        """Fold in a batch of draws and their log importance weights."""
        models = torch.arange(len(self.count), device=model_index.device)
        one_hot = model_index[:, None] == models  # [B, M]
        log_w_m = torch.where(one_hot, log_w[:, None], -math.inf)
        batch_total = log_w_m.logsumexp(0)  # [M]
        seen = torch.isfinite(batch_total)
        weights = torch.where(seen, (log_w_m - batch_total).exp(), 0.0)  # each model's batch weights sum to 1
        theta = theta.double()
        new_total = torch.logaddexp(self.log_total, batch_total)
        share = torch.where(seen, (batch_total - new_total).exp(), 0.0)[:, None]  # the batch's part of the total
        self.mean = (1 - share) * self.mean + share * (weights.T @ theta)
        self.second = (1 - share) * self.second + share * (weights.T @ (theta * theta))
        self.log_total = torch.where(seen, new_total, self.log_total)
        self.count += one_hot.sum(0)

    def model_probs(self) -> ModelProbs | None:
        """q(m) proportional to each model's evidence estimate (mean weight); None before the first batch."""
        if self.count.sum() == 0:
            return None
        log_evidence = torch.where(self.count > 0, self.log_total - self.count.clamp(min=1).log(), -math.inf)
        return ModelProbs.from_dense(torch.softmax(log_evidence, 0))

    def density(self, problem: Problem, scale: float) -> ModelGaussians:
        """q(m) times a Gaussian per model with the weighted moments (the proposal where a model has no draws)."""
        probs = self.model_probs()
        assert probs is not None
        seen = (self.count > 0)[:, None]
        mean = torch.where(seen, self.mean, 0.0)
        variance = torch.where(seen, (self.second - self.mean**2).clamp(min=MIN_VARIANCE), scale**2)
        return ModelGaussians(problem, probs.dense(len(self.count)).to(self.mean.device), mean, 0.5 * variance.log())


class ModelGaussians:
    """q(m, theta_m) = q(m) N(theta_m; mean_m, diag(exp(2 log_sd_m))) on each model's active coordinates."""

    def __init__(self, problem: Problem, prob: Tensor, mean: Tensor, log_sd: Tensor) -> None:
        self.problem, self.prob, self.mean, self.log_sd = problem, prob, mean, log_sd

    def log_density(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log q(m, theta_m) for saturated theta (inactive coordinates ignored), in theta's dtype."""
        mask = self.problem.mask(model_index)
        mean, log_sd = self.mean[model_index].to(theta.dtype), self.log_sd[model_index].to(theta.dtype)
        z = (theta - mean) / log_sd.exp()
        per = torch.where(mask, -0.5 * z * z - log_sd - LOG_SQRT_2PI, 0.0)
        return self.prob[model_index].log().to(theta.dtype) + per.sum(-1)

    def sample(self, num: int, generator: torch.Generator) -> Draws:
        """Fresh draws (m, theta_m) from q, zero in inactive coordinates."""
        model_index = torch.multinomial(self.prob, num, replacement=True, generator=generator)
        z = torch.randn(num, self.mean.shape[1], generator=generator, dtype=torch.float64, device=self.mean.device)
        theta = self.mean[model_index] + self.log_sd[model_index].exp() * z
        return Draws(model_index, torch.where(self.problem.mask(model_index), theta, 0.0))
