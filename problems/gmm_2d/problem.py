"""2-D Gaussian mixture with an unknown number k of equally weighted components ([GMM-ref]: VTI's ``gmm_2d_k100.py``).

Model k in {1, ..., K_max} (``model_index = k - 1``) explains N points y_j in R^2 as
y_j ~ (1/k) sum_{i<k} N(mu_i, sigma^2 I_2) with sigma known; the log-likelihood is a logsumexp over components,
never divided by N. theta in R^{2 K_max} holds the x then y coordinates of the means, slot i active iff i < k,
mapped into a box (data range + 20% per side) through a sigmoid with its floored log-Jacobian; the prior is uniform
on the box, the model prior a BIC-style penalty normalised over k. The likelihood runs in chunks of data points
with a hand-written gradient, so memory stays O(B chunk K_max) whatever N.

The exact formulas, the differences from [GMM-ref], the data-generating process, the two instances (``gmm-2d``,
``gmm-2d-k100``) and the chunking's measured cost: docs/problems.md, "gmm-2d in detail".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from suite.core.model_space import CategoricalSpace
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, row_sum, rows
from suite.core.types import Draws, Estimate, ModelProbs

#: True means are drawn uniformly on [0, MEAN_RANGE]^2.
MEAN_RANGE = 10.0
#: The prior box is the data range widened by this fraction of it on each side.
BOX_MARGIN = 0.2
#: [GMM-ref] clamps the argument of each log-Jacobian log at this value.
JACOBIAN_FLOOR = 1e-30
#: Logit offset of inactive components; after the shift by the largest logit and the floor below, their terms are
#: e^-700 (float64) or e^-79 (float32) beside a largest term of 1, which changes no sum.
INACTIVE_LOGIT = -1e30
#: Shifted logits are floored at log(smallest normal number) + this before exp(): exp() of values whose result
#: would be subnormal or zero takes a slow path on CPU (5-15x slower), and the floored terms, at most
#: K_max e^-700 (float64) or K_max e^-79 (float32) beside the largest term 1, do not change a sum of terms.
EXP_FLOOR_MARGIN = 8.0
#: Data points per likelihood chunk: max(CHUNK_MIN, CHUNK_BUDGET // K_max), as in [GMM-ref].
CHUNK_BUDGET = 12000
CHUNK_MIN = 8


class MixtureData(NamedTuple):
    """A simulated data set: the true means, each point's true component, and the points."""

    true_means: Tensor  # float64 [k_true, 2]
    labels: Tensor  # int64 [N]
    y: Tensor  # float64 [N, 2]


def generate(num_components: int, num_observations: int, noise_sd: float, seed: int) -> MixtureData:
    """Simulate the data-generating process of [GMM-ref] from ``torch.Generator().manual_seed(seed)``."""
    gen = torch.Generator().manual_seed(seed)
    true_means = torch.rand(num_components, 2, generator=gen, dtype=torch.float64) * MEAN_RANGE
    labels = torch.randint(0, num_components, (num_observations,), generator=gen)
    noise = torch.randn(num_observations, 2, generator=gen, dtype=torch.float64) * noise_sd
    return MixtureData(true_means, labels, true_means[labels] + noise)


class _MixtureLogLikelihood(torch.autograd.Function):
    """sum_j logsumexp_i(a_ji) with a_ji = (y_j . mu_i - |mu_i|^2 / 2) / sigma^2 + bias_i, in data chunks.

    a_ji is the part of -|y_j - mu_i|^2 / (2 sigma^2) that depends on the means (y and mu relative to the box
    centre); the caller adds the rest, -|y_j|^2 / (2 sigma^2). Forward and gradient share one pass over the data.
    """

    @staticmethod
    def forward(
        ctx: Any, mu_x: Tensor, mu_y: Tensor, bias: Tensor, y_aug: Tensor, inv_var: float, chunk: int
    ) -> Tensor:
        """Float64 ``[B]`` log-likelihood cores from means ``[B, K]`` and data rows ``[y_x, y_y, 1]``."""
        # logits[b, j, i] = y_jx ax_bi + y_jy ay_bi + a0_bi: two fused multiply-adds over [B, c, K] per chunk
        # (faster on CPU than a batched matmul with inner dimension 3).
        ax, ay = (mu_x * inv_var)[:, None, :], (mu_y * inv_var)[:, None, :]
        a0 = (bias - (0.5 * inv_var) * (mu_x * mu_x + mu_y * mu_y))[:, None, :]
        total = torch.zeros(mu_x.shape[0], dtype=torch.float64, device=mu_x.device)
        floor = math.log(torch.finfo(mu_x.dtype).tiny) + EXP_FLOOR_MARGIN
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        # moments[b, :, i] = sum_j r_ji (y_jx, y_jy, 1) with responsibilities r_ji = softmax_i(a_ji)
        moments = torch.zeros(mu_x.shape[0], 3, mu_x.shape[1], dtype=torch.float64, device=mu_x.device)
        moments = moments if need_grad else None
        for y_chunk in y_aug.split(chunk):
            logits = torch.addcmul(a0, y_chunk[None, :, 0:1], ax).addcmul_(y_chunk[None, :, 1:2], ay)  # [B, c, K]
            top = logits.amax(-1, keepdim=True)
            # in place (the logits are not needed again); the floor keeps exp() out of its slow subnormal path
            weights = logits.sub_(top).clamp_min_(floor).exp_()
            norm = weights.sum(-1, keepdim=True)  # [B, c, 1], in [1, K]
            total += (top + norm.log()).sum((-2, -1), dtype=torch.float64)
            if moments is not None:
                moments += torch.matmul((y_chunk / norm).transpose(1, 2), weights).to(torch.float64)  # [B, 3, K]
        if moments is not None:
            # d/dmu_i sum_j log sum_i' exp(a_ji') = sum_j r_ji (y_j - mu_i) / sigma^2
            grad_x = inv_var * (moments[:, 0] - mu_x.to(torch.float64) * moments[:, 2])
            grad_y = inv_var * (moments[:, 1] - mu_y.to(torch.float64) * moments[:, 2])
            ctx.save_for_backward(grad_x, grad_y)
            ctx.dtypes = (mu_x.dtype, mu_y.dtype)
        return total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        """Chain rule with the stored gradients; rows with zero incoming gradient get exactly zero (never NaN)."""
        grad_x, grad_y = ctx.saved_tensors
        scale = grad_out.to(torch.float64)[:, None]
        used = scale != 0
        out_x = torch.where(used, scale * grad_x, 0.0).to(ctx.dtypes[0])
        out_y = torch.where(used, scale * grad_y, 0.0).to(ctx.dtypes[1])
        return out_x, out_y, None, None, None, None


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in [low, high], else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an int {bounds}; got {value!r}")
    return value


def _check_real(name: str, value: Any, positive: bool) -> float:
    """``value`` as a float if it is a finite real number (positive, or non-negative), else ValueError."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (value <= 0 if positive else value < 0):
        raise ValueError(f"{name} must be a finite {'positive' if positive else 'non-negative'} number; got {value!r}")
    return float(value)


@register_problem("gmm-2d")
class GaussianMixture2D(Problem):
    """2-D Gaussian mixture with unknown k <= 8 (true k = 5, N = 150): a quick-profile version of [GMM-ref]."""

    main_metric: ClassVar[str] = "k_abs_error"
    higher_is_better: ClassVar[frozenset[str]] = frozenset({"q_true_k"})
    #: Left out of the default quick run (its ten methods take ~5 minutes of the 15-minute budget); named
    #: explicitly (``--problems gmm-2d``) it runs in any profile.
    planned_in: ClassVar[tuple[str, ...]] = ("smoke", "paper")
    #: Named in the quick profile, a minute per method: VTI's flows need a few hundred iterations with every k in
    #: the batch before q(k) may concentrate (issue 32; the suite's default 10 s gave ~300 iterations in all).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 60.0}
    #: No ground truth beyond the data-generating k (``true_k``): the per-model engine would need a JAX log joint
    #: and, for K_max = 100, 100 SMC runs on up to 200 dimensions; an RJMCMC run would not be independent of the
    #: methods it judges. Results are scored on q(k) against the true k (``task_metrics``).
    reference_settings: ClassVar[dict] = {
        "evidence": "none",
        "why": "no ground truth beyond the data-generating k; methods are scored on q(k) against the true k",
    }
    #: Grid points per axis of the predictive-density plot.
    plot_grid: ClassVar[int] = 100
    #: At most this many draws per model enter the plotted predictive density.
    plot_draws_per_model: ClassVar[int] = 500

    def __init__(
        self,
        max_components: int = 8,
        true_components: int = 5,
        num_observations: int = 150,
        noise_sd: float = 0.5,
        complexity_penalty: float = 2.0,
        data_seed: int = 21,
    ) -> None:
        max_components = _check_int("max_components", max_components, 1)
        true_components = _check_int("true_components", true_components, 1, max_components)
        num_observations = _check_int("num_observations", num_observations, 2)
        noise_sd = _check_real("noise_sd", noise_sd, positive=True)
        complexity_penalty = _check_real("complexity_penalty", complexity_penalty, positive=False)
        if isinstance(data_seed, bool) or not isinstance(data_seed, int):
            raise ValueError(f"data_seed must be an int; got {data_seed!r}")
        self._config = {
            "max_components": max_components,
            "true_components": true_components,
            "num_observations": num_observations,
            "noise_sd": noise_sd,
            "complexity_penalty": complexity_penalty,
            "data_seed": data_seed,
        }
        self.max_components = max_components
        self.num_observations = num_observations
        self.true_k = true_components
        self.noise_sd = noise_sd
        self.complexity_penalty = complexity_penalty
        self.model_space = CategoricalSpace([f"k={k}" for k in range(1, max_components + 1)])
        self.dim_max = 2 * max_components
        data = generate(true_components, num_observations, noise_sd, data_seed)
        self.true_means, self.labels, self.y = data
        low, high = self.y.amin(0), self.y.amax(0)
        if not bool((high > low).all()):
            raise ValueError("the simulated data have zero range on an axis; the prior box would be empty")
        margin = BOX_MARGIN * (high - low)
        #: The prior box: lower and upper corners, float64 [2] each (x, y).
        self.box_low, self.box_high = low - margin, high + margin
        #: Data points per likelihood chunk (may be changed; the result does not depend on it).
        self.data_chunk = max(CHUNK_MIN, CHUNK_BUDGET // max_components)
        self._device = self._constants()

    def _constants(self) -> DeviceCache:
        """Masks, per-model offsets and centred data on the CPU in float64 (copied per device/dtype on use)."""
        k_max, n = self.max_components, self.y.shape[0]
        ks = torch.arange(1, k_max + 1, dtype=torch.float64)
        penalty = -self.complexity_penalty * 0.5 * math.log(n) * (ks - 1.0)
        log_model_prior = penalty - torch.logsumexp(penalty, 0)
        center, width = 0.5 * (self.box_low + self.box_high), self.box_high - self.box_low
        y_centered = self.y - center
        inv_var = 1.0 / self.noise_sd**2
        self._inv_var = inv_var
        # log-likelihood terms outside the logsumexp: -N log k - N log(2 pi sigma^2) - sum_j |y_j - c|^2 / (2 sigma^2)
        log_lik_offset = (
            -n * ks.log()
            - n * math.log(2.0 * math.pi * self.noise_sd**2)
            - 0.5 * inv_var * float(y_centered.square().sum())
        )
        slots = torch.arange(k_max)
        component_masks = slots[None, :] < (slots[:, None] + 1)  # [model, component]: component i < k
        ones = torch.ones(n, 1, dtype=torch.float64)
        # The prior per active coordinate is max(log s(t) + log s(-t), log(1e-30) - log w): the -log w of the
        # uniform prior cancels the log w of the Jacobian except inside the floor.
        floor = math.log(JACOBIAN_FLOOR) - width.log()
        return DeviceCache(
            masks=torch.cat([component_masks, component_masks], 1),
            log_model_prior=log_model_prior,
            log_lik_offset=log_lik_offset,
            offset=log_model_prior + log_lik_offset,
            y_aug=torch.cat([y_centered, ones], 1),
            half_width=(0.5 * width).repeat_interleave(k_max),
            prior_floor=floor.repeat_interleave(k_max),
            center=center,
        )

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return dict(self._config)

    def mask(self, model_index: Tensor) -> Tensor:
        """Slot i of each half (x means, then y means) is active iff i < k = model_index + 1."""
        return rows(self._device.get("masks", model_index.device), model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Normalised BIC-style prior: log p(k) = -lambda 0.5 log(N) (k - 1) - logsumexp over k of the same."""
        return rows(self._device.get("log_model_prior", model_index.device), model_index)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log p(k) + log p(theta_k | k) + log p(y | theta_k, k) in theta's dtype; -inf where not finite."""
        active, unconstrained = self._active(model_index, theta)
        total = rows(self._device.get("offset", theta.device), model_index)
        total = total + self._log_prior_terms(active, unconstrained) + self._log_lik_core(active, unconstrained)
        return self._finish(total, unconstrained, theta.dtype)

    # ------------------------------------------------------------------ pieces
    def log_likelihood(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """Data log-likelihood sum_j log((1/k) sum_{i<k} N(y_j; mu_i, sigma^2 I)), float64 ``[B]``."""
        active, unconstrained = self._active(model_index, theta)
        total = rows(self._device.get("log_lik_offset", theta.device), model_index)
        return self._finish(total + self._log_lik_core(active, unconstrained), unconstrained, torch.float64)

    def log_param_prior(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log p(theta_k | k): uniform means on the box with the floored sigmoid Jacobian, float64 ``[B]``."""
        active, unconstrained = self._active(model_index, theta)
        return self._finish(self._log_prior_terms(active, unconstrained), unconstrained, torch.float64)

    def decode_means(self, theta: Tensor) -> Tensor:
        """Component means mu = lo + w sigmoid(theta) of every slot, ``[B, K_max, 2]`` (x, y), theta's dtype."""
        centered = self._centered_means(theta)
        center = self._device.get("center", theta.device, theta.dtype)
        return torch.stack([centered[:, : self.max_components], centered[:, self.max_components :]], -1) + center

    def _active(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The mask and theta with inactive entries set to 0 (so NaN/inf there cannot leak)."""
        active = rows(self._device.get("masks", theta.device), model_index)
        return active, torch.where(active, theta, 0.0)

    def _centered_means(self, unconstrained: Tensor) -> Tensor:
        """mu - c = w (sigmoid(t) - 1/2) = (w / 2) tanh(t / 2) per slot, relative to the box centre c, ``[B, 2 K]``."""
        half_width = self._device.get("half_width", unconstrained.device, unconstrained.dtype)
        return half_width * torch.tanh(0.5 * unconstrained)

    def _log_prior_terms(self, active: Tensor, unconstrained: Tensor) -> Tensor:
        """sum over active coordinates of max(log sigmoid(t) + log sigmoid(-t), log(1e-30 / w)), float64 ``[B]``."""
        size = unconstrained.abs()
        log_logistic = -size - 2.0 * torch.log1p(torch.exp(-size))  # log s(t) + log s(-t), exact for all t
        floor = self._device.get("prior_floor", unconstrained.device, unconstrained.dtype)
        terms = torch.where(active, torch.maximum(log_logistic, floor), 0.0)
        return row_sum(terms).to(torch.float64)

    def _log_lik_core(self, active: Tensor, unconstrained: Tensor) -> Tensor:
        """sum_j logsumexp_{i<k} of -|mu_i - c|^2/(2 sigma^2) + (y_j - c).(mu_i - c)/sigma^2, float64 ``[B]``."""
        k_max, dtype, device = self.max_components, unconstrained.dtype, unconstrained.device
        centered = self._centered_means(unconstrained)
        bias = torch.where(active[:, :k_max], 0.0, INACTIVE_LOGIT).to(dtype)
        y_aug = self._device.get("y_aug", device, dtype)
        return _MixtureLogLikelihood.apply(
            centered[:, :k_max], centered[:, k_max:], bias, y_aug, self._inv_var, self.data_chunk
        )

    @staticmethod
    def _finish(total: Tensor, unconstrained: Tensor, dtype: torch.dtype) -> Tensor:
        """-inf where an active coordinate or the result is not finite (NaN included); cast to ``dtype``."""
        finite = torch.isfinite(unconstrained).all(-1)
        total = torch.where(finite, total, -math.inf)
        return torch.nan_to_num(total, nan=-math.inf, posinf=math.inf, neginf=-math.inf).to(dtype)

    # --------------------------------------------------------------- ground truth
    def stored_reference(self) -> None:
        """None: there is no reference (see ``reference_settings``), so no reference probabilities or draws either."""
        return None

    # ------------------------------------------------- problem-specific scores and pictures
    def _model_weights(self, model_probs: ModelProbs) -> Tensor:
        """q(k) as a dense float64 vector over k = 1..K_max, normalised by the estimate's total."""
        q = model_probs.dense(self.max_components)
        total = float(q.sum())
        if not total > 0:
            raise ValueError("model_probs has no mass")
        return q / total

    def task_metrics(self, model_probs: ModelProbs | None, draws: Draws | None) -> dict[str, Estimate]:
        """q(k_true) (higher is better), E_q[k], and |E_q[k] - k_true| (the main metric, lower is better).

        q is normalised by its total (1 for a complete estimate). The standard error of q(k_true) is the
        estimate's own where it reports one; the others have none (the errors of q(k) are correlated).
        """
        if model_probs is None:
            return {}
        q = self._model_weights(model_probs)
        expected_k = float(q @ torch.arange(1, self.max_components + 1, dtype=torch.float64))
        se = None
        if model_probs.se is not None:
            hit = (model_probs.index == self.true_k - 1).nonzero()
            se = float(model_probs.se[hit[0, 0]]) / model_probs.total() if len(hit) else None
        return {
            "q_true_k": Estimate(float(q[self.true_k - 1]), se),
            "expected_k": Estimate(expected_k),
            "k_abs_error": Estimate(abs(expected_k - self.true_k)),
        }

    def predictive_density(self, grid: Tensor, draws: Draws) -> Tensor:
        """Posterior predictive density at ``grid`` [G, 2]: the mixture density averaged over ``draws``, float64 [G].

        p_hat(y*) = (1/S) sum_s (1/k_s) sum_{i<k_s} N(y*; mu_i^(s), sigma^2 I), vectorised over grid points and
        draws (blocks of draws bound the memory to about 2^23 elements per intermediate).
        """
        if len(draws) == 0:
            raise ValueError("predictive_density needs at least one draw")
        grid = grid.to(torch.float64)
        model_index = draws.model_index.to(grid.device)
        active, unconstrained = self._active(model_index, draws.theta.to(grid.device, torch.float64))
        k_used = int(model_index.max()) + 1  # slots beyond the largest k among the draws are inactive everywhere
        means = self.decode_means(unconstrained)[:, :k_used]  # [S, k_used, 2]
        log_k = (model_index + 1).to(torch.float64).log()
        log_weight = torch.where(active[:, :k_used], -log_k[:, None], -math.inf)  # [S, k_used]
        log_norm = math.log(2.0 * math.pi * self.noise_sd**2)
        block = max(1, 2**23 // (grid.shape[0] * k_used))
        density = torch.zeros(grid.shape[0], dtype=torch.float64, device=grid.device)
        for mu, lw in zip(means.split(block), log_weight.split(block), strict=True):
            sq = (grid[None, :, None, :] - mu[:, None, :, :]).square().sum(-1)  # [s, G, k]
            log_mix = torch.logsumexp(lw[:, None, :] - (0.5 * self._inv_var) * sq, -1) - log_norm  # [s, G]
            density += log_mix.exp().sum(0)
        return density / len(draws)

    def plot_result(self, model_probs: ModelProbs | None, draws: Draws | None, path: Path) -> Path | None:
        """Posterior predictive density (Bayesian model average over k) over the data, and q(k) with the true k.

        q(k) is ``model_probs`` (else the frequencies of ``draws``); p_BMA(y*) = sum_k q(k) p_hat(y* | k) over
        the models with q(k) >= 1e-4 that have draws (at most 500 each), renormalised over those models.
        """
        from problems.gmm_2d.plots import plot_gmm_result

        if model_probs is None and (draws is None or len(draws) == 0):
            return None
        if model_probs is None:
            model_probs = ModelProbs.from_indices(draws.model_index)
        return plot_gmm_result(self, self._model_weights(model_probs), draws, Path(path))


@register_problem("gmm-2d-k100")
class GaussianMixture2DK100(GaussianMixture2D):
    """2-D Gaussian mixture with unknown k <= 100 (true k = 50, N = 4000): the [GMM-ref] configuration."""

    planned_in: ClassVar[tuple[str, ...]] = ("paper",)

    def __init__(
        self,
        max_components: int = 100,
        true_components: int = 50,
        num_observations: int = 4000,
        noise_sd: float = 0.5,
        complexity_penalty: float = 2.0,
        data_seed: int = 42,
    ) -> None:
        super().__init__(max_components, true_components, num_observations, noise_sd, complexity_penalty, data_seed)
