"""Per-model variational inference: ``mif``, ``fr-vip``, ``fr``, ``mf`` and ``iaf``.

For every model of an enumerable space, a variational family is fitted to pi(theta_m | m) by maximising the ELBO
with reparameterised gradients (Adam, all models as one batched optimisation). The evidence of each model is then
estimated by importance sampling with the fitted density, ``p(m) Z_m ~ mean_j pi~(m, theta_j) / q_m(theta_j)``
(with its delta-method standard error), and ``q(m)`` is proportional to it. The method's density is
``log q(m) + log q_m(theta_m)``; it also gives the suite a sampler of fresh draws, from which the suite measures the
negative ELBO.

The per-model ELBO itself would give ``q(m) ~ p(m) exp(ELBO_m)`` (VTI eq. 13 for fixed flows); importance sampling
removes the KL gap from each model's weight, which matters whenever the families fit some models better than others
(``evidence='elbo'`` selects the ELBO weights instead).

Running estimates weigh the models by the same estimator, from importance weights the training steps already
computed: a snapshot draws nothing, and the last snapshot is the returned estimate itself. Under a time budget the
learning rates share the first ``SCORED_FRACTION`` of it in turn (each trains for ``TRAIN_SHARE`` of its share, then
scores its fit; the rest is kept for the returned draws); the run fails with ``BudgetTooSmall`` if not one gradient
step fits.
Details: docs/methods.md, "Running estimates and time budgets (`methods/mif/method.py`)".
"""

from __future__ import annotations

import dataclasses
import math
import time
from abc import abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from methods.mif.families import GaussianVIP, ModelInformedFlow, VariationalFamily, num_parameters
from suite.core.context import BudgetTooSmall, RunContext, RunningEstimate
from suite.core.loop import RunLoop
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.types import Draws, ModelProbs

ORDERS = ("topological", "reversed")
EVIDENCE = ("importance", "elbo")
SCHEDULES = ("constant", "cosine")
INITS = ("paper", "zero-z")

#: Budgeted runs: the learning rates share this fraction of the time budget equally, in turn (the rest is kept for
#: the returned draws); each trains for ``TRAIN_SHARE`` of its share and scores its fit (ELBO and evidence from one
#: sample, in chunks of at least ``SCORING_CHUNK`` draws per model) for the rest.
SCORED_FRACTION = 0.95
TRAIN_SHARE = 0.9
SCORING_CHUNK = 64
#: Budgeted cosine schedules: the pace of the steps is measured from ``PACE_FROM`` to ``CALIBRATION_SHARE`` of a
#: learning rate's share (each at least ``CALIBRATION_STEPS`` steps on), leaving out the setup and the first
#: steps, and the schedule is then stretched over the steps that pace projects for the rest of the training part.
PACE_FROM = 0.02
CALIBRATION_SHARE = 0.1
CALIBRATION_STEPS = 5
#: A training step is undone (parameters and Adam's moments back to before it, learning rate halved) when a model's
#: negative ELBO estimate afterwards exceeds its lowest so far by more than ``DIVERGENCE_RATIO`` times the larger of
#: that lowest value's magnitude and ``DIVERGENCE_FLOOR`` nats: a jump no sampling noise of a converging fit makes.
DIVERGENCE_RATIO = 10.0
DIVERGENCE_FLOOR = 1000.0
#: Importance weights per model a snapshot uses (at least one step's): the latest training steps' since the last one.
SNAPSHOT_DRAWS = 128

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
        "undo_divergent_steps": True,
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
        "undo_divergent_steps": True,
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
        "undo_divergent_steps": False,
    },
}
#: The presets of the methods without an ``init`` option (only MIF has one).
_SHARED_PROFILES = {name: {k: v for k, v in preset.items() if k != "init"} for name, preset in _PROFILES.items()}


@dataclass(frozen=True)
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
    #: Undo a step after which a model's fit diverged, at half the learning rate (``DIVERGENCE_RATIO``; False: the
    #: paper's plain Adam, and no copy of the parameters and Adam's state per step).
    undo_divergent_steps: bool | None = None
    #: Learning-rate schedule: "constant" (the paper's) or "cosine" (decay to 0: less gradient noise at the end).
    schedule: str | None = None
    #: Hidden units of each MIF/IAF conditioner's ReLU MLP (0: affine conditioners; unused by the Gaussians).
    hidden: int | None = None
    #: Cap on draws per gradient step over all models together (batch_size is lowered to fit, to at least 8).
    max_draws_per_step: int | None = None
    #: Largest model space accepted (a fit per model).
    max_models: int = 256

    profiles: ClassVar[dict[str, dict[str, Any]]] = _SHARED_PROFILES

    def finalise(self, problem: Problem) -> _PerModelVI:
        """Check the resolved options for sense; the learning rates become a tuple of floats."""
        for key in ("num_iterations", "batch_size", "evidence_draws", "max_models", "max_draws_per_step"):
            value = getattr(self, key)
            if value is None or int(value) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {value}")
        if self.learning_rates is None:
            raise ValueError(f"{self.name}: learning_rates must be positive numbers, got None")
        rates = tuple(float(r) for r in self.learning_rates)
        if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
            raise ValueError(f"{self.name}: learning_rates must be positive numbers, got {self.learning_rates}")
        init = getattr(self, "init", "paper")
        if init not in INITS:
            raise ValueError(f"{self.name}: unknown init {init!r}; valid: {', '.join(INITS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{self.name}: unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"{self.name}: unknown evidence {self.evidence!r}; valid: {', '.join(EVIDENCE)}")
        return self if rates == self.learning_rates else dataclasses.replace(self, learning_rates=rates)

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
        self, problem: Problem, active: Tensor, prior_fn: Any, dtype: torch.dtype, generator: torch.Generator
    ) -> VariationalFamily:
        """The family for these models."""

    def _uses_prior(self) -> bool:
        return True

    # -------------------------------------------------------------------- run
    def run(self, problem: Problem, context: RunContext) -> Result:
        """Fit a family per model, weigh the models by importance-sampled evidence."""
        self.require_support(problem)
        device, dtype = context.device, context.dtype
        generator = torch.Generator(device=device).manual_seed(context.seed)
        models = problem.model_space.all_indices(device)
        order = self._order(problem).to(device)
        inverse = torch.argsort(order)
        active = problem.mask(models)[:, order]
        with_prior = self._uses_prior() and problem.has_prior_location_scale
        prior_fn = _prior_function(problem, models, order, inverse) if with_prior else None
        target = _Target(problem, models, inverse)
        assert self.learning_rates is not None and self.evidence_draws is not None

        best: dict[str, Tensor] | None = None
        best_elbo = torch.full((len(models),), -math.inf, dtype=torch.float64, device=device)
        best_rate = torch.zeros(len(models), dtype=torch.float64)
        #: Budgeted: the chosen fits' evidence (log weight, its SE, ESS) from their scoring draws.
        best_scored: tuple[Tensor, Tensor, Tensor] | None = None
        history: dict[str, list[float]] = {}
        skipped_total = undone_total = 0
        steps: list[int] = []
        scored_draws: list[int] = []
        running = _RunningEvidence(self.evidence)
        # The loop counts gradient steps and (budgeted) scoring chunks over all learning rates.
        with context.loop(self.name, planned=int(self.num_iterations) * len(self.learning_rates)) as loop:
            for index, rate in enumerate(self.learning_rates):
                with context.timer.phase("train"):
                    family = self._family(problem, active, prior_fn, dtype, generator).to(device)
                    running.start(self._batch(family))
                    curve, skipped, undone, done = self._fit(family, target, rate, index, generator, loop, running)
                    steps.append(done)
                    if done and not loop.budgeted:
                        with torch.no_grad():
                            elbo, log_z = _elbo(family, target, self.evidence_draws, generator)
                if done == 0:  # budgeted: this rate's share of the time ended before its first step
                    continue
                scored = None
                if loop.budgeted:  # the ELBO and the evidence from one sample, as long as the rate's share lasts
                    with context.timer.phase("evidence"), torch.no_grad():
                        log_w = self._score(family, target, index, generator, loop)
                    scored_draws.append(log_w.shape[-1])
                    elbo, scored = _finite_mean(log_w), _evidence_from_log_weights(log_w)
                    log_z = scored[0]
                skipped_total += skipped
                undone_total += undone
                history[f"{rate:g}"] = curve
                better = elbo > best_elbo
                best_elbo = torch.where(better, elbo, best_elbo)
                best_rate = torch.where(better.cpu(), torch.tensor(rate, dtype=torch.float64), best_rate)
                state = {k: v.detach().clone() for k, v in family.state_dict().items()}
                best = state if best is None else _merge_rows(best, state, better, len(models))
                if scored is not None:
                    best_scored = scored if best_scored is None else _where_better(better, scored, best_scored)
                running.keep_best(better, elbo, log_z)  # later rates' snapshots weigh against the best so far
        if best is None:
            raise BudgetTooSmall("the budget ended before the first gradient step of the per-model fits")
        family.load_state_dict(best)
        family.eval()
        if not bool(torch.isfinite(best_elbo).any()):
            return Result.failed("every model's fit diverged (non-finite ELBO)")

        with context.timer.phase("evidence"), torch.no_grad():
            if best_scored is None:  # without a budget: a fresh sample of evidence_draws per model
                log_weight, log_weight_se, ess = _importance_evidence(family, target, self.evidence_draws, generator)
            else:
                log_weight, log_weight_se, ess = best_scored
            if self.evidence == "elbo":
                log_weight, log_weight_se = best_elbo.clone(), torch.zeros_like(best_elbo)
            probs, probs_se = _normalise(log_weight, log_weight_se)
        log_q_model = torch.log(probs).to(device, dtype)

        density = _MixtureDensity(family, log_q_model, order, problem.dim_max)
        with context.timer.phase("sample"), torch.no_grad():
            draws = density.sample(context.num_draws, generator)
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
            "undone_steps": undone_total,
            "training_steps": steps,
            "scoring_draws": scored_draws if context.budgeted else None,
            "loss_curves": history,
        }
        model_probs = ModelProbs.from_dense(probs, probs_se)
        final_elbo = _mixture_elbo(probs, best_elbo)
        loop.snapshot(lambda: RunningEstimate(model_probs, elbo=final_elbo))
        return Result(
            model_probs=model_probs,
            draws=Draws(draws.model_index.cpu(), draws.theta.cpu()),
            log_density=density.log_prob,
            sample_q=density.sample,
            diagnostics=diagnostics,
        )

    def _batch(self, family: VariationalFamily) -> int:
        """Draws per model per gradient step: ``batch_size``, lowered to fit ``max_draws_per_step`` (at least 8)."""
        assert self.batch_size is not None and self.max_draws_per_step is not None
        return max(8, min(self.batch_size, self.max_draws_per_step // family.num_models))

    def _score(
        self,
        family: VariationalFamily,
        target: _Target,
        rate_index: int,
        generator: torch.Generator,
        loop: RunLoop,
    ) -> Tensor:
        """Budgeted: log weights [M, n] of fresh draws, in chunks, until this rate's share of the time ends.

        At least one chunk, at most ``evidence_draws`` per model; each chunk is an iteration of the run's loop.
        """
        assert self.evidence_draws is not None and self.learning_rates is not None
        chunk = min(self.evidence_draws, max(self._batch(family), SCORING_CHUNK))
        share_end = SCORED_FRACTION * (rate_index + 1) / len(self.learning_rates)
        values: list[Tensor] = []
        drawn = chunks = 0
        while drawn < self.evidence_draws:
            if chunks and (loop.finished() or loop.reached(f"scored_lr{rate_index}", 0, share_end)):
                break
            num = min(chunk, self.evidence_draws - drawn)
            z, log_q = family.sample(num, generator)
            values.append((target(z) - log_q).to(torch.float64))
            drawn += num
            chunks += 1
            loop.advance()
        return torch.cat(values, dim=-1)

    def _fit(
        self,
        family: VariationalFamily,
        target: _Target,
        rate: float,
        rate_index: int,
        generator: torch.Generator,
        loop: RunLoop,
        running: _RunningEvidence,
    ) -> tuple[list[float], int, int, int]:
        """Adam on the summed negative ELBOs of all models; returns a thinned loss curve, skipped, undone, taken steps.

        Without a budget: ``num_iterations`` steps (a cosine schedule spans them). With one: until the training
        part of this rate's share of the budget is spent (see the module docstring), or the projected steps of a
        cosine schedule are done. The run's loop counts the steps on over the rates.
        """
        assert self.num_iterations is not None and self.learning_rates is not None
        optimiser = torch.optim.Adam(family.parameters(), lr=rate)
        planned = self.num_iterations
        num_rates = len(self.learning_rates)
        batch = self._batch(family)
        budgeted = loop.budgeted
        schedule = None
        if self.schedule == "cosine" and not budgeted:
            schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=planned)
        horizon = None if budgeted else planned  # steps of this fit (budgeted: projected after calibration)
        share_end = SCORED_FRACTION * (rate_index + TRAIN_SHARE) / num_rates
        paced_at = SCORED_FRACTION * (rate_index + PACE_FROM) / num_rates
        calibrated_at = SCORED_FRACTION * (rate_index + CALIBRATION_SHARE) / num_rates
        paced: tuple[int, float] | None = None  # (step, fraction of the budget used) where the pace is measured from
        curve: list[float] = []
        skipped = 0
        guard = _StepGuard(family, optimiser) if self.undo_divergent_steps else None
        record_every = 1 if budgeted else max(1, planned // 200)
        last = time.perf_counter()
        step = 0
        while True:
            if budgeted:
                if (
                    (horizon is not None and step >= horizon)
                    or loop.finished()
                    or loop.reached(f"trained_lr{rate_index}", 0, share_end)
                ):
                    break
                if self.schedule == "cosine":
                    if horizon is None and step >= CALIBRATION_STEPS:
                        if paced is None:
                            if loop.reached(f"paced_lr{rate_index}", 0, paced_at):
                                paced = (step, _budget_used(loop, f"paced_projection_lr{rate_index}"))
                        elif step >= paced[0] + CALIBRATION_STEPS and loop.reached(
                            f"calibrated_lr{rate_index}", 0, calibrated_at
                        ):
                            used = _budget_used(loop, f"projected_lr{rate_index}")
                            pace = (step - paced[0]) / max(used - paced[1], 1e-12)  # steps per budget fraction
                            horizon = step + max(1, int(pace * (share_end - used)))
                    fraction = 0.0 if horizon is None else step / horizon
                    factor = 1.0 if guard is None else guard.lr_factor
                    for group in optimiser.param_groups:
                        group["lr"] = rate * factor * 0.5 * (1.0 + math.cos(math.pi * fraction))
            elif step >= planned:
                break
            z, log_q = family.sample(batch, generator)
            log_w = target(z) - log_q
            per_model = log_w.mean(-1)  # ELBO estimate per model
            loss = -per_model.sum()
            optimiser.zero_grad(set_to_none=True)
            if not bool(torch.isfinite(loss)):
                skipped += 1  # a draw in a region where the target or q overflows; the step is dropped
            elif guard is not None and guard.diverged(per_model.detach()):
                guard.undo()  # the previous step sent a fit off (see DIVERGENCE_RATIO): back to before it
            else:
                if guard is not None:
                    guard.keep(per_model.detach())
                running.record(log_w.detach())
                loss.backward()
                if self.clip_grad_norm:
                    torch.nn.utils.clip_grad_norm_(family.parameters(), float(self.clip_grad_norm))
                optimiser.step()
                if schedule is not None:
                    schedule.step()
                if step % record_every == 0:
                    curve.append(float(loss.detach()) / per_model.numel())
                if loop.context.progress and time.perf_counter() - last > 1.0:
                    loop.show(lr=f"{rate:g}", neg_elbo=f"{float(loss.detach()) / per_model.numel():.4g}")
                    last = time.perf_counter()
            step += 1
            loop.advance(estimate=running)
        if budgeted and len(curve) > 200:
            curve = curve[:: len(curve) // 200]
        return curve, skipped, 0 if guard is None else guard.undone, step


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


class _StepGuard:
    """Undoes a training step after which a model's negative ELBO jumped (see ``DIVERGENCE_RATIO``).

    :meth:`keep` stores the parameters and Adam's state that gave an accepted loss, before the step from them;
    :meth:`undo` restores them and halves the learning rate (``lr_factor``, also for budgeted schedules, which set
    the rate each step). Fits that never jump are untouched, bit for bit.
    """

    def __init__(self, family: VariationalFamily, optimiser: torch.optim.Optimizer) -> None:
        self.family, self.optimiser = family, optimiser
        self.lowest: Tensor | None = None  # per model, the lowest negative ELBO estimate of an accepted step
        self.saved: tuple[list[Tensor], dict[int, dict[str, Any]]] | None = None
        self.lr_factor = 1.0
        self.undone = 0

    def diverged(self, elbo: Tensor) -> bool:
        """Whether any model's negative ELBO estimate is that far above its lowest so far."""
        if self.lowest is None or self.saved is None:
            return False
        allowed = DIVERGENCE_RATIO * self.lowest.abs().clamp_min(DIVERGENCE_FLOOR)
        return bool((-elbo - self.lowest > allowed).any())

    def keep(self, elbo: Tensor) -> None:
        """An accepted step's per-model ELBO estimates; saves the state the next step starts from."""
        self.lowest = -elbo if self.lowest is None else torch.minimum(self.lowest, -elbo)
        params = [p.detach().clone() for p in self.family.parameters()]
        state = {
            i: {k: v.clone() if isinstance(v, Tensor) else v for k, v in self.optimiser.state[p].items()}
            for i, p in enumerate(self.family.parameters())
        }
        self.saved = (params, state)

    def undo(self) -> None:
        """Back to the saved parameters and Adam state, at half the learning rate."""
        assert self.saved is not None
        params, state = self.saved
        with torch.no_grad():
            for i, (p, old) in enumerate(zip(self.family.parameters(), params, strict=True)):
                p.copy_(old)
                self.optimiser.state[p] = {k: v.clone() if isinstance(v, Tensor) else v for k, v in state[i].items()}
        self.lr_factor *= 0.5
        for group in self.optimiser.param_groups:
            group["lr"] *= 0.5
        self.undone += 1


def _prior_function(problem: Problem, models: Tensor, order: Tensor, inverse: Tensor) -> Any:
    """The problem's (f, log g) on ordered draws [M', n, D]."""

    def prior_fn(z: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        m_rows = models if rows is None else models[rows]
        k, n, d = z.shape
        theta = z[..., inverse].reshape(k * n, d)
        f, log_g = problem.prior_location_scale(m_rows.repeat_interleave(n), theta)
        return f.reshape(k, n, d)[..., order], log_g.reshape(k, n, d)[..., order]

    return prior_fn


def _elbo(family: VariationalFamily, target: _Target, num: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Per-model ELBO estimates from ``num`` fresh draws (non-finite fits: -inf), and log(p(m) Z_m) from the same."""
    values = []
    for chunk in _chunks(num):
        z, log_q = family.sample(chunk, generator)
        values.append(target(z) - log_q)
    log_w = torch.cat(values, dim=-1).to(torch.float64)
    elbo = log_w.mean(-1)
    return torch.where(torch.isfinite(elbo), elbo, -math.inf), _log_mean_exp(log_w)


def _importance_evidence(
    family: VariationalFamily, target: _Target, num: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """log(p(m) Z_m) by importance sampling with q_m, its delta-method SE, and the effective sample size."""
    values = []
    for chunk in _chunks(num):
        z, log_q = family.sample(chunk, generator)
        values.append(target(z) - log_q)
    return _evidence_from_log_weights(torch.cat(values, dim=-1).to(torch.float64))


def _evidence_from_log_weights(log_w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """log(p(m) Z_m), its delta-method SE and the effective sample size from log weights [M, num]."""
    num = log_w.shape[-1]
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


def _where_better(better: Tensor, new: tuple[Tensor, ...], old: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """Per model, ``new`` where ``better``, else ``old`` (each a tuple of per-model tensors)."""
    a, b, c = (torch.where(better, n, o) for n, o in zip(new, old, strict=True))
    return a, b, c


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


class _RunningEvidence:
    """A snapshot's estimate: q(m) from the importance weights of the latest training steps (no fresh draws).

    :meth:`record` keeps each step's weights ``log pi~ - log q_m`` [M, batch] (the latest steps', about
    ``SNAPSHOT_DRAWS`` per model, at least one step's); a snapshot uses those since the previous one. After a
    learning rate, :meth:`keep_best` holds the best fit per model so far with the ELBO and evidence of its scoring
    sample; a model keeps it while the current fit's ELBO is not higher (as the run does when it merges the rates).
    """

    def __init__(self, evidence: str) -> None:
        self.evidence = evidence
        self.window: deque[Tensor] = deque()
        self.best_elbo: Tensor | None = None
        self.best_log_z: Tensor | None = None

    def start(self, batch: int) -> None:
        """A new fit, of ``batch`` draws per model per step (the previous fit's weights are dropped)."""
        self.window = deque(maxlen=max(1, SNAPSHOT_DRAWS // batch))

    def record(self, log_w: Tensor) -> None:
        """The importance weights of one (finite) training step."""
        self.window.append(log_w)

    def keep_best(self, better: Tensor, elbo: Tensor, log_z: Tensor) -> None:
        """After a fit: per model, its ELBO and evidence where ``better`` than the best so far."""
        if self.best_elbo is None or self.best_log_z is None:
            self.best_elbo, self.best_log_z = elbo.clone(), log_z.clone()
        else:
            self.best_elbo = torch.where(better, elbo, self.best_elbo)
            self.best_log_z = torch.where(better, log_z, self.best_log_z)

    def __call__(self) -> RunningEstimate | None:
        if not self.window:
            return None
        log_w = torch.cat(list(self.window), dim=-1).to(torch.float64)
        self.window.clear()
        elbo, log_z = log_w.mean(-1), _log_mean_exp(log_w)
        if self.best_elbo is not None and self.best_log_z is not None:
            keep = elbo <= self.best_elbo.to(elbo.device)
            elbo = torch.where(keep, self.best_elbo.to(elbo.device), elbo)
            log_z = torch.where(keep, self.best_log_z.to(elbo.device), log_z)
        weight = elbo if self.evidence == "elbo" else log_z
        if not bool(torch.isfinite(weight).any()):
            return None  # every fit diverged so far: no estimate
        probs = torch.softmax(weight, dim=0)
        return RunningEstimate(ModelProbs.from_dense(probs), elbo=_mixture_elbo(probs, elbo))


def _log_mean_exp(log_w: Tensor) -> Tensor:
    """log of the mean of exp(log_w) over the last dim (NaN weights count as 0)."""
    log_w = torch.where(torch.isnan(log_w), -math.inf, log_w)
    return torch.logsumexp(log_w, dim=-1) - math.log(log_w.shape[-1])


def _budget_used(loop: RunLoop, name: str) -> float:
    """The fraction of the time budget used so far, as the loop's projection (recorded as ``name``)."""
    return loop.iteration / loop.projected(name)


def _finite_mean(log_w: Tensor) -> Tensor:
    """Per-model means of log weights (the ELBO estimates); non-finite ones are -inf."""
    mean = log_w.mean(-1)
    return torch.where(torch.isfinite(mean), mean, -math.inf)


def _mixture_elbo(probs: Tensor, elbo: Tensor) -> float | None:
    """ELBO of q(m) q_m(theta): sum_m q(m) (ELBO_m - log q(m)) over the models q weighs (None if not finite)."""
    kept = probs > 0
    value = float((probs[kept] * (elbo[kept] - torch.log(probs[kept]))).sum())
    return value if math.isfinite(value) else None


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
@dataclass(frozen=True)
class MIF(_PerModelVI):
    """Model-informed flow per model (MIF paper, Algorithm 1), models weighed by importance-sampled evidence."""

    translation: bool = True
    prior_inputs: bool = True
    conditioning: str = "z"
    order: str = "topological"
    #: "paper": every weight from N(0, 0.1^2); "zero-z": weights on the conditioning inputs start at 0 (see docs).
    init: str | None = None

    profiles: ClassVar[dict[str, dict[str, Any]]] = _PROFILES

    def finalise(self, problem: Problem) -> _PerModelVI:
        """As the shared rule; ``hidden`` >= 0, known conditioning and order."""
        resolved = super().finalise(problem)
        if self.hidden is None or self.hidden < 0:
            raise ValueError(f"{self.name}: hidden must be >= 0, got {self.hidden}")
        if self.conditioning not in ("z", "eps"):
            raise ValueError(f"{self.name}: unknown conditioning {self.conditioning!r}; valid: z, eps")
        if self.order not in ORDERS:
            raise ValueError(f"{self.name}: unknown order {self.order!r}; valid: {', '.join(ORDERS)}")
        return resolved

    def _order(self, problem: Problem) -> Tensor:
        order = super()._order(problem)
        return order.flip(0) if self.order == "reversed" else order

    def _uses_prior(self) -> bool:
        # Reversed, a latent comes before its parents, so f_i and g_i cannot be inputs (MIF w/o Order).
        return self.prior_inputs and self.order == "topological"

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, dtype: torch.dtype, generator: torch.Generator
    ) -> VariationalFamily:
        assert self.hidden is not None
        return ModelInformedFlow(
            active,
            prior_fn,
            hidden=self.hidden,
            translation=self.translation,
            prior_inputs=prior_fn is not None,
            conditioning=self.conditioning,
            dtype=dtype,
            generator=generator,
            zero_z_weights=self.init == "zero-z",
        )


@register_method("iaf")
@dataclass(frozen=True)
class IAF(_PerModelVI):
    """Inverse autoregressive flow per model: z_i = m_i(eps_<i) + s_i(eps_<i) eps_i (one layer, MIF's conditioners)."""

    def _uses_prior(self) -> bool:
        return False

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, dtype: torch.dtype, generator: torch.Generator
    ) -> VariationalFamily:
        assert self.hidden is not None
        return ModelInformedFlow.inverse_autoregressive(active, hidden=self.hidden, dtype=dtype, generator=generator)


class _GaussianFamily:
    """Mixin: the Gaussian families (full-rank unless ``full_rank`` is False; VIP map if ``vip``)."""

    full_rank: ClassVar[bool] = True
    vip: ClassVar[bool] = False

    def _uses_prior(self) -> bool:
        return self.vip

    def _family(
        self, problem: Problem, active: Tensor, prior_fn: Any, dtype: torch.dtype, generator: torch.Generator
    ) -> VariationalFamily:
        return GaussianVIP(active, prior_fn, full_rank=self.full_rank, vip=self.vip, dtype=dtype, generator=generator)


@register_method("fr-vip")
@dataclass(frozen=True)
class FRVIP(_GaussianFamily, _PerModelVI):
    """Full-rank Gaussian through the VIP map with a learnable centring lambda per latent (MIF paper, Algorithm 2)."""

    vip: ClassVar[bool] = True


@register_method("fr")
@dataclass(frozen=True)
class FullRank(_GaussianFamily, _PerModelVI):
    """Full-rank Gaussian per model."""


@register_method("mf")
@dataclass(frozen=True)
class MeanField(_GaussianFamily, _PerModelVI):
    """Mean-field (diagonal) Gaussian per model."""

    full_rank: ClassVar[bool] = False
