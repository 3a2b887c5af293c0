"""The VTI training loop shared by both model samplers (VTI Sec. 3, eqs. 9-11; the code reference's ``step``).

**Time budgets.** A training runs in the run's loop (:mod:`suite.core.loop`, through :class:`RunLink`); in a
budgeted run it runs until the loop says stop. Its learning-rate schedule and the model sampler's warm-up are
those of the preset stretched over a horizon: the iterations the budget is projected to allow, measured once the
first ``CALIBRATION_FRACTION`` of the training's share of the budget is spent. The preset's schedule at
iteration ``t`` of ``num_iterations`` becomes the budgeted one at iteration ``t * horizon / num_iterations``
(cosine restarts, decay and warm-up alike: the warm-up keeps the preset's fraction ``warmup_iterations /
num_iterations``). Until the horizon is known the schedule stays at its starting value (the base learning rate,
the model sampler frozen when there is a warm-up).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from methods.common.flat_parameters import FlatParameters
from methods.vti.balance import ModelLossBalance
from methods.vti.cosmic import CoSMICFlow
from methods.vti.model_samplers import ModelSampler
from suite.core.problem import Problem

if TYPE_CHECKING:
    from suite.core.context import RunningEstimate
    from suite.core.loop import RunLoop

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: Consecutive iterations without a usable loss or gradient after which the run is declared diverged.
MAX_BAD_ITERATIONS = 20
#: A loss above this many nats (per sample) counts as exploded; MAX_BAD_ITERATIONS of them in a row end the run.
EXPLODED_LOSS = 1e12
#: Floor of the cosine restarts (CosineAnnealingWarmRestarts' eta_min).
ETA_MIN = 1e-7
#: Per-step factors of the exponential (surrogate) and multiplicative (MCG) decays chained with the restarts.
DECAY_FACTORS = {"exponential": 1 - 1e-3, "multiplicative": 1 / (1 + 1e-4)}
#: Budgeted runs: the horizon is projected once this fraction of a training's share of the budget is spent ...
CALIBRATION_FRACTION = 0.02
#: ... and at least this many of its iterations are done.
CALIBRATION_ITERATIONS = 5


class DivergenceError(RuntimeError):
    """Training produced NaN or exploding losses; carries the iteration."""

    def __init__(self, iteration: int, why: str) -> None:
        super().__init__(f"diverged at iteration {iteration}: {why}")
        self.iteration = iteration


@dataclass(frozen=True)
class TrainSettings:
    """Optimiser settings of one VTI run."""

    num_iterations: int
    batch_size: int
    flow_lr: float
    grad_clip: float = 20.0
    weight_decay: float = 0.01
    #: "exponential" (surrogate: ExponentialLR(1 - 1e-3)) or "multiplicative" (MCG: factor 1/(1 + 1e-4)).
    decay: str = "exponential"
    restart_period: int = 100
    #: Iterations at the start during which q(m) is frozen at its (prior-shaped) initial state and not updated.
    warmup_iterations: int = 0
    #: Divide each sample's loss by its model's running ELBO spread (:mod:`methods.vti.balance`); needs M models.
    balance_models: bool = False


def make_optimizer(
    flat: FlatParameters, s: TrainSettings
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with cosine warm restarts chained with an exponential or multiplicative decay (the authors' schedules).

    The fused AdamW kernel (one pass over all parameters) took 13% off a CPU iteration against the per-tensor loop;
    it steps the flow's :class:`FlatParameters` as one vector (the same arithmetic per entry).
    """
    optimizer = torch.optim.AdamW([flat.vector], lr=s.flow_lr, weight_decay=s.weight_decay, fused=True)
    cosine = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=s.restart_period, eta_min=ETA_MIN)
    factor = DECAY_FACTORS[s.decay]
    if s.decay == "exponential":
        decay: torch.optim.lr_scheduler.LRScheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, factor)
    else:
        decay = torch.optim.lr_scheduler.MultiplicativeLR(optimizer, lambda _: factor)
    return optimizer, torch.optim.lr_scheduler.ChainedScheduler([cosine, decay])


def scheduled_lr(s: TrainSettings, position: float) -> float:
    """The learning rate :func:`make_optimizer`'s schedule gives after ``position`` steps (a fraction allowed).

    Each chained step sets the cosine restart's value from the base rate, then the decay multiplies that once, so
    the rate after ``t >= 1`` steps is ``cosine(t mod restart_period) * factor`` (equal to the scheduler's).
    """
    if position <= 0:
        return s.flow_lr
    phase = math.fmod(position, s.restart_period)
    cosine = ETA_MIN + (s.flow_lr - ETA_MIN) * (1 + math.cos(math.pi * phase / s.restart_period)) / 2
    return cosine * DECAY_FACTORS[s.decay]


def elbo_terms(
    problem: Problem,
    flow: CoSMICFlow,
    model_index: Tensor,
    z: Tensor,
    context: Tensor,
    log_model_prior: Tensor,
) -> Tensor:
    """Per-sample ell = log p(D, theta | m) - log q(theta | m) with theta = T(z | m) (VTI eq. 9, negated).

    The reference density of the inactive coordinates appears in both the
    saturated target and the saturated flow density and cancels exactly, so
    only active coordinates enter.
    """
    mask = problem.mask(model_index)
    theta, logdet = flow.sample(z, mask, context)
    log_nu = torch.where(mask, -0.5 * z * z - LOG_SQRT_2PI, 0.0).sum(-1)
    return problem.log_joint(model_index, theta) - log_model_prior - (log_nu - logdet)


class Trainer:
    """One VTI optimisation: flow optimiser, schedule and divergence bookkeeping; :meth:`step` is one iteration."""

    def __init__(
        self,
        problem: Problem,
        flow: CoSMICFlow,
        sampler: ModelSampler,
        context_of: Callable[[Tensor], Tensor],
        settings: TrainSettings,
        generator: torch.Generator,
        budgeted: bool = False,
    ) -> None:
        self.problem, self.flow, self.sampler, self.context_of = problem, flow, sampler, context_of
        self.s, self.generator = settings, generator
        #: The flow's parameters as one vector: zeroing, clipping and the AdamW step are one pass each.
        self.flat = FlatParameters(flow)
        self.optimizer, self.scheduler = make_optimizer(self.flat, settings)
        self.device, self.dtype = self.flat.vector.device, self.flat.vector.dtype
        self.bad = 0
        self.trace: dict[str, list[float]] = {"loss": [], "grad_norm": [], "finite_fraction": []}
        #: Budgeted runs: the schedules span ``horizon`` iterations (None until calibrated; see the module doc).
        self.budgeted = budgeted
        self.horizon: int | None = None
        self.schedule_steps = 0
        #: The latest batch's (m, ell, log p(m), log q(m)) for snapshots (references only, never synchronised).
        self.last_batch: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        #: Iterations done when :func:`train` returned.
        self.iteration = 0
        self.balance: ModelLossBalance | None = None
        if settings.balance_models:
            if problem.num_models is None or problem.model_space.index_width != 1:
                raise ValueError("balance_models needs an enumerable model space with single-word model indices")
            self.balance = ModelLossBalance(problem.num_models, self.device)

    def state_dict(self, next_iteration: int) -> dict[str, Any]:
        """Everything needed to continue this optimisation at ``next_iteration`` exactly as if never stopped."""
        return {
            "next_iteration": next_iteration,
            "flow": self.flow.state_dict(),
            "sampler": self.sampler.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "bad": self.bad,
            "trace": {name: list(values) for name, values in self.trace.items()},
            "horizon": self.horizon,
            "schedule_steps": self.schedule_steps,
            "balance": None if self.balance is None else self.balance.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> int:
        """Restore a :meth:`state_dict`; returns the iteration to continue from."""
        self.flow.load_state_dict(state["flow"])
        self.sampler.load_state_dict(state["sampler"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.bad = int(state["bad"])
        self.trace = {name: list(values) for name, values in state["trace"].items()}
        self.horizon = None if state["horizon"] is None else int(state["horizon"])
        self.schedule_steps = int(state["schedule_steps"])
        if self.balance is not None:
            self.balance.load_state_dict(state["balance"])
        return int(state["next_iteration"])

    def set_horizon(self, horizon: int) -> None:
        """Stretch the schedules over ``horizon`` iterations from now on (budgeted runs)."""
        self.horizon = max(int(horizon), 1)

    def _advance_schedule(self) -> None:
        """One step of the learning-rate schedule: the preset's, or in a budgeted run the preset's stretched."""
        if not self.budgeted:
            self.scheduler.step()
            return
        self.schedule_steps += 1
        position = 0.0 if self.horizon is None else self.schedule_steps * self.s.num_iterations / self.horizon
        lr = scheduled_lr(self.s, position)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def sampler_learns(self, iteration: int) -> bool:
        """Whether the model sampler is updated at ``iteration`` (after the warm-up, stretched when budgeted)."""
        s = self.s
        if not self.budgeted or s.warmup_iterations == 0:
            return iteration >= s.warmup_iterations
        return self.horizon is not None and iteration * s.num_iterations >= s.warmup_iterations * self.horizon

    def running_elbo(self) -> float | None:
        """ELBO estimate of the latest batch: mean of ell + log p(m) - log q(m) over its finite draws (None: none).

        q(m) is the distribution the batch was drawn from (for vti-surrogate the UCB action distribution).
        """
        if self.last_batch is None:
            return None
        _, ell, log_prior, log_q = self.last_batch
        terms = ell + log_prior.to(ell.dtype) - log_q.to(ell.dtype)
        finite = torch.isfinite(terms)
        return float(terms[finite].mean()) if bool(finite.any()) else None

    def _skip(self, iteration: int, why: str) -> None:
        self.bad += 1
        if self.bad >= MAX_BAD_ITERATIONS:
            raise DivergenceError(iteration, f"{why} for {self.bad} iterations")
        self.flat.zero_grad()
        self._advance_schedule()

    def step(self, iteration: int) -> float:
        """One iteration: sample (m, z), reparameterised ELBO, flow step, model-sampler update; returns the loss."""
        s = self.s
        self.flat.zero_grad()
        shape = (s.batch_size, self.problem.dim_max)
        z = torch.randn(shape, generator=self.generator, device=self.device, dtype=self.dtype)
        model_index, log_q_model = self.sampler.sample(s.batch_size, self.generator)
        log_prior = self.problem.log_model_prior(model_index).to(self.dtype)
        ell = elbo_terms(self.problem, self.flow, model_index, z, self.context_of(model_index), log_prior)
        self.last_batch = (model_index, ell.detach(), log_prior, log_q_model)
        finite = torch.isfinite(ell)
        num_finite = int(finite.sum())
        weight = None if self.balance is None else self.balance.weights(model_index, ell.detach())
        loss = -torch.where(finite, ell, 0.0).sum() / max(num_finite, 1)
        trained = loss if weight is None else -torch.where(finite, weight * ell, 0.0).sum() / max(num_finite, 1)
        if 0 < num_finite < s.batch_size:
            # A row whose theta or log-determinant overflowed poisons the whole gradient even with zero weight
            # (0 * inf = NaN in its backward), so the loss is recomputed on the finite rows alone.
            keep = finite.nonzero().squeeze(-1)
            m_kept = model_index[keep]
            ell_kept = elbo_terms(self.problem, self.flow, m_kept, z[keep], self.context_of(m_kept), log_prior[keep])
            loss = -ell_kept.sum() / num_finite
            trained = loss if weight is None else -(weight[keep] * ell_kept).sum() / num_finite
        # The trace keeps the plain negative ELBO; the balanced loss only steers the flow's gradient.
        loss_value = float(loss.detach())  # one host sync per iteration: the divergence checks need it
        if num_finite == 0 or not math.isfinite(loss_value):
            self._skip(iteration, "no finite ELBO sample")
            return math.nan
        # An exploded batch (a few draws far out in the flow's tail) still takes its clipped step, which moves the
        # flow away from there, as the authors' loop does; only a run of them ends the training. Aborting at the
        # first one ended a 10,000-iteration dag-mlp run at iteration 4,818 (loss 1.2e12 once, 1.6e4 before).
        exploded = loss_value > EXPLODED_LOSS
        trained.backward()
        grad_norm = self.flat.clip_grad_norm_(s.grad_clip)
        grad_norm_value = float(grad_norm)
        if not math.isfinite(grad_norm_value):
            self._skip(iteration, "non-finite gradients")
            return math.nan
        self.optimizer.step()
        if self.sampler_learns(iteration):
            self.sampler.update(model_index, ell.detach(), self.optimizer)
        self._advance_schedule()
        self.trace["loss"].append(loss_value)
        self.trace["grad_norm"].append(grad_norm_value)
        self.trace["finite_fraction"].append(num_finite / s.batch_size)
        self.bad = self.bad + 1 if exploded else 0
        if self.bad >= MAX_BAD_ITERATIONS:
            raise DivergenceError(
                iteration, f"loss above {EXPLODED_LOSS:.0e} for {self.bad} iterations (last {loss_value:.3g})"
            )
        return loss_value


@dataclass
class RunLink:
    """How one training runs in the run's loop: its place in the run's iterations, its share of a time budget,
    and the running estimate a snapshot takes.

    ``offset`` is the run's iterations before this training (earlier replicates). In a budgeted run the training
    is ``part`` of ``parts`` equal shares of the budget (replicates): it ends at the end of its share (the last at
    the budget's end) and calibrates its horizon over the first ``CALIBRATION_FRACTION`` of the share.
    """

    loop: RunLoop
    estimate: Callable[[Trainer], RunningEstimate | None]
    offset: int = 0
    part: int = 0
    parts: int = 1

    @property
    def budgeted(self) -> bool:
        """Whether the run's length is set by a time budget."""
        return self.loop.budgeted

    def _name(self, base: str) -> str:
        return base if self.part == 0 else f"{base}_{self.part}"

    def stop(self) -> bool:
        """Whether the training ends before its next iteration (budgeted runs: the budget or its share spent)."""
        if self.loop.finished():
            return True
        last = self.part + 1 >= self.parts
        return not last and self.loop.reached(self._name("replicate_end"), 0, (self.part + 1) / self.parts)

    def horizon(self, iteration: int) -> int | None:
        """This training's horizon once its pace is calibrated after ``iteration`` iterations (None before)."""
        if iteration < CALIBRATION_ITERATIONS:
            return None
        if not self.loop.reached(self._name("calibration"), 0, (self.part + CALIBRATION_FRACTION) / self.parts):
            return None
        projected = self.loop.projected(self._name("horizon"))
        return max(1, (projected - self.offset) // (self.parts - self.part))


def train(
    problem: Problem,
    flow: CoSMICFlow,
    sampler: ModelSampler,
    context_of: Callable[[Tensor], Tensor],
    s: TrainSettings,
    generator: torch.Generator,
    link: RunLink,
    resume: dict[str, Any] | None = None,
    save: Callable[[dict[str, Any]], None] | None = None,
    save_every_s: float = math.inf,
) -> Trainer:
    """Optimise the flow and the model sampler jointly; returns the trainer (its ``trace``: per-iteration traces).

    During the first ``warmup_iterations`` the model sampler is not updated,
    so models are drawn from its initial distribution (the model prior, or
    uniform) while the flow learns every model. Without this, the surrogate's
    first ELBO observations of an untrained flow (thousands of nats below the
    optimum on some problems) keep such models from ever being sampled again,
    and the score-function sampler abandons them just as fast. This warm-up is
    our addition; ``warmup_iterations=0`` reproduces the authors' loop.

    The training runs in ``link``'s loop, which takes the run's snapshots after each iteration; in a budgeted run
    it runs until the loop says stop, its schedules stretched over the projected horizon (module doc); without a
    budget it runs ``num_iterations``. ``trainer.iteration`` is the number of iterations done at the end.

    With ``save``, the trainer's :meth:`Trainer.state_dict` is handed to it
    every ``save_every_s`` seconds; ``resume`` (such a state) continues that
    optimisation where it was saved, with the same result as an uninterrupted
    run (the random generators are part of the state).

    Raises DivergenceError when no finite loss or gradient is seen, or the
    loss stays above ``EXPLODED_LOSS``, for ``MAX_BAD_ITERATIONS`` iterations
    in a row, or when the flow's parameters stop being finite.
    """
    budgeted = link.budgeted
    trainer = Trainer(problem, flow, sampler, context_of, s, generator, budgeted=budgeted)
    start = 0 if resume is None else trainer.load_state_dict(resume)
    loop = link.loop
    loop.advance(start)  # a resumed training: the iterations its interrupted attempt made
    iteration = start
    while not (link.stop() if budgeted else iteration >= s.num_iterations):
        loss = trainer.step(iteration)
        if iteration % 50 == 0:
            loop.show(loss=f"{loss:.4g}")
        iteration += 1
        loop.advance()
        if budgeted and trainer.horizon is None:
            horizon = link.horizon(iteration)
            if horizon is not None:
                trainer.set_horizon(horizon)
        loop.maybe_snapshot(lambda: link.estimate(trainer))
        if save is not None and (budgeted or iteration < s.num_iterations) and loop.checkpoint_due(save_every_s):
            save(trainer.state_dict(iteration))
    trainer.iteration = iteration
    if not bool(torch.isfinite(trainer.flat.vector).all()):
        raise DivergenceError(iteration, "flow parameters are not finite")
    return trainer
