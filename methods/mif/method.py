"""Per-model variational inference: ``mif``, ``fr-vip``, ``fr``, ``mf`` and ``iaf``.

For every model of an enumerable space, a variational family is fitted to
pi(theta_m | m) by maximising the ELBO with reparameterised gradients (Adam,
all models as one batched optimisation). The evidence of each model is then
estimated by importance sampling with the fitted density,
``p(m) Z_m ~ mean_j pi~(m, theta_j) / q_m(theta_j)`` (with its delta-method
standard error), and ``q(m)`` is proportional to it. The method's density is
``log q(m) + log q_m(theta_m)``; it also gives the suite a sampler of fresh
draws, from which the suite measures the negative ELBO.

The per-model ELBO itself would give ``q(m) ~ p(m) exp(ELBO_m)`` (VTI eq. 13
for fixed flows); importance sampling removes the KL gap from each model's
weight, which matters whenever the families fit some models better than others
(``evidence='elbo'`` selects the ELBO weights instead).
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from tqdm.auto import tqdm

from methods.mif.families import GaussianVIP, ModelInformedFlow, VariationalFamily, num_parameters
from suite.harness import PhaseTimer
from suite.method import Budget, Method, Result
from suite.problem import Problem
from suite.registry import register_method
from suite.types import Draws, ModelProbs

ORDERS = ("topological", "reversed")
EVIDENCE = ("importance", "elbo")
SCHEDULES = ("constant", "cosine")
INITS = ("paper", "zero-z")

_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "num_iterations": 40,
        "batch_size": 32,
        "learning_rates": (1e-2,),
        "evidence_draws": 512,
        "hidden": 4,
        "max_draws_per_step": 1024,
        "schedule": "cosine",
        "init": "zero-z",
        "clip_grad_norm": 10.0,
    },
    "quick": {
        "num_iterations": 1000,
        "batch_size": 256,
        "learning_rates": (1e-2,),
        "evidence_draws": 8192,
        "hidden": 16,
        "max_draws_per_step": 1024,
        "schedule": "cosine",
        "init": "zero-z",
        "clip_grad_norm": 10.0,
    },
    # MIF paper App. D: 100,000 Adam iterations, 256 draws per gradient, best of six learning rates 1e-1..1e-6,
    # h = 2^10 hidden units (Table 3).
    "paper": {
        "num_iterations": 100_000,
        "batch_size": 256,
        "learning_rates": (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6),
        "evidence_draws": 100_000,
        "hidden": 1024,
        "max_draws_per_step": 1_000_000,
        "schedule": "constant",
        "init": "paper",
        "clip_grad_norm": None,
    },
}


@dataclass
class _PerModelVI(Method):
    """Options shared by the per-model variational methods."""

    num_iterations: int | None = None
    #: Draws per model per ELBO gradient (the paper: 256).
    batch_size: int | None = None
    #: Adam learning rates tried; each model keeps the fit with the best final ELBO.
    learning_rates: tuple[float, ...] | None = None
    #: Fresh draws per model for the importance-sampling evidence and the learning-rate choice.
    evidence_draws: int | None = None
    evidence: str = "importance"
    #: Clip the gradient's norm to this (None: no clipping, as the paper).
    clip_grad_norm: float | None = None
    #: Learning-rate schedule: "constant" (the paper's) or "cosine" (decay to 0: less gradient noise at the end).
    schedule: str | None = None
    #: Hidden units of each MIF/IAF conditioner's ReLU MLP (0: affine conditioners; unused by the Gaussians).
    hidden: int | None = None
    #: Cap on draws per gradient step over all models together (batch_size is lowered to fit, to at least 8).
    max_draws_per_step: int | None = None
    #: Largest model space accepted (a fit per model).
    max_models: int = 256
    dtype: str = "float64"
    progress: bool = True

    profiles: ClassVar[dict[str, dict[str, Any]]] = _PROFILES
    default_seeds: ClassVar[dict[str, int]] = {"quick": 1}

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Profile presets under the constructor's values, checked for sense."""
        s = super().settings(problem, budget)
        for key in ("num_iterations", "batch_size", "evidence_draws", "max_models", "max_draws_per_step"):
            if key in s and int(s[key]) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {s[key]}")
        rates = tuple(float(r) for r in s["learning_rates"])
        if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
            raise ValueError(f"{self.name}: learning_rates must be positive numbers, got {s['learning_rates']}")
        s["learning_rates"] = rates
        if s.get("init", "paper") not in INITS:
            raise ValueError(f"{self.name}: unknown init {s['init']!r}; valid: {', '.join(INITS)}")
        if s["schedule"] not in SCHEDULES:
            raise ValueError(f"{self.name}: unknown schedule {s['schedule']!r}; valid: {', '.join(SCHEDULES)}")
        if s["evidence"] not in EVIDENCE:
            raise ValueError(f"{self.name}: unknown evidence {s['evidence']!r}; valid: {', '.join(EVIDENCE)}")
        return s

    def supports(self, problem: Problem) -> str | None:
        """Enumerable spaces of at most ``max_models`` models."""
        k = problem.num_models
        if k is None:
            return "needs an enumerable model space (a fit per model)"
        if k > self.max_models:
            return f"{k} models: more than max_models={self.max_models} per-model fits"
        return None

    # ----------------------------------------------------------------- family
    def _order(self, problem: Problem) -> Tensor:
        order = problem.latent_order()
        return torch.arange(problem.dim_max) if order is None else order

    @abstractmethod
    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, s: dict[str, Any], generator: torch.Generator
    ) -> VariationalFamily:
        """The family for these models."""

    def _uses_prior(self) -> bool:
        return True

    # -------------------------------------------------------------------- run
    def run(self, problem: Problem, budget: Budget, seed: int, device: torch.device) -> Result:
        """Fit a family per model, weigh the models by importance-sampled evidence."""
        reason = self.supports(problem)
        if reason:
            raise ValueError(f"{self.name} cannot run on {problem.name}: {reason}")
        s = self.settings(problem, budget)
        dtype = self.torch_dtype
        timer = PhaseTimer(device)
        generator = torch.Generator(device=device).manual_seed(seed)
        models = problem.model_space.all_indices(device)
        order = self._order(problem).to(device)
        inverse = torch.argsort(order)
        active = problem.mask(models)[:, order]
        with_prior = self._uses_prior() and problem.has_prior_location_scale
        prior_fn = _prior_function(problem, models, order, inverse) if with_prior else None
        target = _Target(problem, models, inverse)

        best: dict[str, Tensor] | None = None
        best_elbo = torch.full((len(models),), -math.inf, dtype=torch.float64, device=device)
        best_rate = torch.zeros(len(models), dtype=torch.float64)
        history: dict[str, list[float]] = {}
        skipped_total = 0
        with timer.phase("train"):
            for rate in s["learning_rates"]:
                family = self._family(problem, active, prior_fn, s, generator).to(device)
                curve, skipped = _fit(family, target, rate, s, generator, f"{self.name} lr={rate:g}")
                skipped_total += skipped
                history[f"{rate:g}"] = curve
                with torch.no_grad():
                    elbo = _elbo(family, target, int(s["evidence_draws"]), generator)
                better = elbo > best_elbo
                best_elbo = torch.where(better, elbo, best_elbo)
                best_rate = torch.where(better.cpu(), torch.tensor(rate, dtype=torch.float64), best_rate)
                state = {k: v.detach().clone() for k, v in family.state_dict().items()}
                best = state if best is None else _merge_rows(best, state, better, len(models))
            assert best is not None
            family.load_state_dict(best)
            family.eval()
        if not bool(torch.isfinite(best_elbo).any()):
            return Result.failed("every model's fit diverged (non-finite ELBO)", device=str(device), dtype=self.dtype)

        with timer.phase("evidence"), torch.no_grad():
            log_weight, log_weight_se, ess = _importance_evidence(family, target, int(s["evidence_draws"]), generator)
            if s["evidence"] == "elbo":
                log_weight, log_weight_se = best_elbo.clone(), torch.zeros_like(best_elbo)
            probs, probs_se = _normalise(log_weight, log_weight_se)
        log_q_model = torch.log(probs).to(device, dtype)

        density = _MixtureDensity(family, log_q_model, order, problem.dim_max)
        with timer.phase("sample"), torch.no_grad():
            draws = density.sample(budget.num_draws, generator)
        diagnostics = {
            "family": type(family).__name__,
            "prior_inputs": with_prior,
            "prior_note": None
            if with_prior or not self._uses_prior()
            else f"{problem.name} gives no prior location/scale functions: fitted without prior inputs",
            "order": "problem" if problem.latent_order() is not None else "saturated coordinate order",
            "num_parameters": num_parameters(family),
            "final_elbo": best_elbo.tolist() if len(models) <= 256 else None,
            "log_evidence": log_weight.tolist() if len(models) <= 256 else None,
            "log_evidence_se": log_weight_se.tolist() if len(models) <= 256 else None,
            "importance_ess": ess.tolist() if len(models) <= 256 else None,
            "chosen_learning_rate": best_rate.tolist() if len(models) <= 256 else None,
            "skipped_steps": skipped_total,
            "loss_curves": history,
        }
        return Result(
            model_probs=ModelProbs.from_dense(probs, probs_se),
            draws=Draws(draws.model_index.cpu(), draws.theta.cpu()),
            log_density=density.log_prob,
            sample_q=density.sample,
            diagnostics=diagnostics,
            timings=dict(timer.timings),
            device=str(device),
            dtype=self.dtype,
        )


# ------------------------------------------------------------------ pieces
class _Target:
    """log pi~(m, theta) for ordered draws [M', n, D] of the model rows ``rows``."""

    def __init__(self, problem: Problem, models: Tensor, inverse: Tensor) -> None:
        self.problem, self.models, self.inverse = problem, models, inverse

    def __call__(self, z: Tensor, rows: Tensor | None = None) -> Tensor:
        m_rows = self.models if rows is None else self.models[rows]
        k, n, d = z.shape
        theta = z[..., self.inverse].reshape(k * n, d)
        return self.problem.log_joint(m_rows.repeat_interleave(n), theta).reshape(k, n)


def _prior_function(problem: Problem, models: Tensor, order: Tensor, inverse: Tensor) -> Any:
    """The problem's (f, log g) on ordered draws [M', n, D]."""

    def prior_fn(z: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        m_rows = models if rows is None else models[rows]
        k, n, d = z.shape
        theta = z[..., inverse].reshape(k * n, d)
        f, log_g = problem.prior_location_scale(m_rows.repeat_interleave(n), theta)
        return f.reshape(k, n, d)[..., order], log_g.reshape(k, n, d)[..., order]

    return prior_fn


def _fit(
    family: VariationalFamily, target: _Target, rate: float, s: dict[str, Any], generator: torch.Generator, label: str
) -> tuple[list[float], int]:
    """Adam on the summed negative ELBOs of all models; returns a thinned loss curve and the skipped steps."""
    optimiser = torch.optim.Adam(family.parameters(), lr=rate)
    iterations = int(s["num_iterations"])
    batch = max(8, min(int(s["batch_size"]), int(s["max_draws_per_step"]) // family.num_models))
    schedule = None
    if s["schedule"] == "cosine":
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=iterations)
    curve: list[float] = []
    skipped = 0
    bar = tqdm(total=iterations, desc=label, disable=not s["progress"], leave=False, mininterval=1.0)
    record_every = max(1, iterations // 200)
    last = time.perf_counter()
    for step in range(iterations):
        z, log_q = family.sample(batch, generator)
        per_model = (target(z) - log_q).mean(-1)  # ELBO estimate per model
        loss = -per_model.sum()
        optimiser.zero_grad(set_to_none=True)
        if not bool(torch.isfinite(loss)):
            skipped += 1  # a draw in a region where the target or q overflows; the step is dropped
            continue
        loss.backward()
        if s.get("clip_grad_norm"):
            torch.nn.utils.clip_grad_norm_(family.parameters(), float(s["clip_grad_norm"]))
        optimiser.step()
        if schedule is not None:
            schedule.step()
        if step % record_every == 0:
            curve.append(float(loss.detach()) / per_model.numel())
        bar.update(1)
        if s["progress"] and time.perf_counter() - last > 1.0:
            bar.set_postfix(neg_elbo=f"{float(loss.detach()) / per_model.numel():.4g}")
            last = time.perf_counter()
    bar.close()
    return curve, skipped


def _elbo(family: VariationalFamily, target: _Target, num: int, generator: torch.Generator) -> Tensor:
    """Per-model ELBO estimates from ``num`` fresh draws (non-finite fits: -inf)."""
    values = []
    for chunk in _chunks(num):
        z, log_q = family.sample(chunk, generator)
        values.append(target(z) - log_q)
    elbo = torch.cat(values, dim=-1).to(torch.float64).mean(-1)
    return torch.where(torch.isfinite(elbo), elbo, -math.inf)


def _importance_evidence(
    family: VariationalFamily, target: _Target, num: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """log(p(m) Z_m) by importance sampling with q_m, its delta-method SE, and the effective sample size."""
    values = []
    for chunk in _chunks(num):
        z, log_q = family.sample(chunk, generator)
        values.append(target(z) - log_q)
    log_w = torch.cat(values, dim=-1).to(torch.float64)
    log_w = torch.where(torch.isnan(log_w), -math.inf, log_w)
    top = log_w.max(-1, keepdim=True).values
    w = torch.exp(log_w - top)
    mean = w.mean(-1)
    log_z = top.squeeze(-1) + torch.log(mean)
    se = w.std(-1) / (mean * math.sqrt(num))
    ess = w.sum(-1) ** 2 / (w * w).sum(-1)
    return log_z, se, ess


def _normalise(log_weight: Tensor, log_weight_se: Tensor) -> tuple[Tensor, Tensor]:
    """q(m) from log weights, and its SE treating the log weights' errors as independent."""
    probs = torch.softmax(log_weight, dim=0)
    var = probs**2 * ((1 - 2 * probs) * log_weight_se**2 + (probs**2 * log_weight_se**2).sum())
    return probs, var.clamp_min(0).sqrt()


def _merge_rows(best: dict[str, Tensor], new: dict[str, Tensor], better: Tensor, num_models: int) -> dict[str, Tensor]:
    """Per-model rows of ``new`` where ``better``, else ``best`` (tensors without a model dim are kept)."""
    out = {}
    for key, value in best.items():
        if value.ndim and value.shape[0] == num_models:
            pick = better.view(-1, *([1] * (value.ndim - 1)))
            out[key] = torch.where(pick, new[key], value)
        else:
            out[key] = value
    return out


def _chunks(num: int, size: int = 4096) -> list[int]:
    return [min(size, num - start) for start in range(0, num, size)]


class _MixtureDensity:
    """q(m, theta) = q(m) q_m(theta) over the saturated space, from the fitted family."""

    def __init__(self, family: VariationalFamily, log_q_model: Tensor, order: Tensor, dim_max: int) -> None:
        self.family, self.log_q_model = family, log_q_model
        self.order, self.inverse = order, torch.argsort(order)
        self.dim_max = dim_max

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log q(m) + log q_m(theta_m), one model group at a time."""
        out = torch.empty(len(model_index), dtype=theta.dtype, device=theta.device)
        z = theta[:, self.order]
        with torch.no_grad():
            for m in torch.unique(model_index).tolist():
                rows = (model_index == m).nonzero().flatten()
                models = torch.tensor([m], device=theta.device)
                log_q = self.family.log_prob(z[rows].unsqueeze(0), models).squeeze(0)
                out[rows] = log_q.to(theta.dtype) + self.log_q_model[m].to(theta.dtype)
        return out

    def sample(self, num: int, generator: torch.Generator) -> Draws:
        """Fresh draws: m ~ q(m), then theta ~ q_m."""
        probs = torch.exp(self.log_q_model.to(torch.float64))
        device = self.log_q_model.device
        model_index = torch.multinomial(probs.to(generator.device), num, replacement=True, generator=generator)
        model_index = model_index.to(device)
        theta = torch.zeros(num, self.dim_max, dtype=self.log_q_model.dtype, device=device)
        with torch.no_grad():
            for m in torch.unique(model_index).tolist():
                rows = (model_index == m).nonzero().flatten()
                models = torch.tensor([m], device=device)
                for start in range(0, len(rows), 65_536):
                    part = rows[start : start + 65_536]
                    z, _ = self.family.sample(len(part), generator, models)
                    theta[part] = z.squeeze(0)[:, self.inverse]
        return Draws(model_index, theta)


# ------------------------------------------------------------------ methods
@register_method("mif")
@dataclass
class MIF(_PerModelVI):
    """Model-informed flow per model (MIF paper, Algorithm 1), models weighed by importance-sampled evidence."""

    translation: bool = True
    prior_inputs: bool = True
    conditioning: str = "z"
    order: str = "topological"
    #: "paper": every weight from N(0, 0.1^2); "zero-z": weights on the conditioning inputs start at 0 (see docs).
    init: str | None = None

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """As the shared rule; ``hidden`` >= 0, known conditioning and order."""
        s = super().settings(problem, budget)
        if int(s["hidden"]) < 0:
            raise ValueError(f"{self.name}: hidden must be >= 0, got {s['hidden']}")
        if s["conditioning"] not in ("z", "eps"):
            raise ValueError(f"{self.name}: unknown conditioning {s['conditioning']!r}; valid: z, eps")
        if s["order"] not in ORDERS:
            raise ValueError(f"{self.name}: unknown order {s['order']!r}; valid: {', '.join(ORDERS)}")
        return s

    def _order(self, problem: Problem) -> Tensor:
        order = super()._order(problem)
        return order.flip(0) if self.order == "reversed" else order

    def _uses_prior(self) -> bool:
        # Reversed, a latent comes before its parents, so f_i and g_i cannot be inputs (MIF w/o Order).
        return self.prior_inputs and self.order == "topological"

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, s: dict[str, Any], generator: torch.Generator
    ) -> VariationalFamily:
        return ModelInformedFlow(
            active,
            prior_fn,
            hidden=int(s["hidden"]),
            translation=bool(s["translation"]),
            prior_inputs=prior_fn is not None,
            conditioning=s["conditioning"],
            dtype=self.torch_dtype,
            generator=generator,
            zero_z_weights=s["init"] == "zero-z",
        )


@register_method("iaf")
@dataclass
class IAF(_PerModelVI):
    """Inverse autoregressive flow per model: z_i = m_i(eps_<i) + s_i(eps_<i) eps_i (one layer, MIF's conditioners)."""

    def _uses_prior(self) -> bool:
        return False

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, s: dict[str, Any], generator: torch.Generator
    ) -> VariationalFamily:
        return ModelInformedFlow.inverse_autoregressive(
            active, hidden=int(s["hidden"]), dtype=self.torch_dtype, generator=generator
        )


class _GaussianFamily:
    """Mixin: the Gaussian families (full-rank unless ``full_rank`` is False; VIP map if ``vip``)."""

    full_rank: ClassVar[bool] = True
    vip: ClassVar[bool] = False
    torch_dtype: torch.dtype

    def _uses_prior(self) -> bool:
        return self.vip

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, s: dict[str, Any], generator: torch.Generator
    ) -> VariationalFamily:
        return GaussianVIP(
            active, prior_fn, full_rank=self.full_rank, vip=self.vip, dtype=self.torch_dtype, generator=generator
        )


@register_method("fr-vip")
@dataclass
class FRVIP(_GaussianFamily, _PerModelVI):
    """Full-rank Gaussian through the VIP map with a learnable centring lambda per latent (MIF paper, Algorithm 2)."""

    vip: ClassVar[bool] = True


@register_method("fr")
@dataclass
class FullRank(_GaussianFamily, _PerModelVI):
    """Full-rank Gaussian per model."""


@register_method("mf")
@dataclass
class MeanField(_GaussianFamily, _PerModelVI):
    """Mean-field (diagonal) Gaussian per model."""

    full_rank: ClassVar[bool] = False
