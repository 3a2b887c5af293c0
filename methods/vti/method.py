"""The registered VTI methods: ``vti-surrogate`` (Gaussian surrogate, UCB softmax) and ``vti-mcg`` (score function).

**Running estimates.** A snapshot holds q(m) as the model sampler defines it, computed as the final result is
(:func:`_posterior_model_probs`: the surrogate's, the logits' or the MADE's q over every model; on spaces too
large to enumerate, exact q at the distinct models of the latest training batch, which were drawn from q: the
result's 2^16 fresh draws would cost a snapshot as much as dozens of iterations), and the ELBO estimate of that
batch (no extra target evaluations). With replicates it is the replicate the run would report if stopped there:
the one in progress or the best finished one, whichever has the lower terminal loss. The last snapshot is the
returned estimate.

**Time budgets.** A budgeted run trains until the run context's clock says stop, with the schedules (cosine
learning rate, model-sampler warm-up) stretched over the iterations projected after a calibration of 2% of the
budget (:mod:`methods.vti.training`); replicates share the budget equally. ``num_iterations`` then only sets the
shape of the schedule (the warm-up's fraction, the restarts per run). The final q(m), draws and density are
computed from the state at the stop, as without a budget. A budget that ends before the first iteration gives
:class:`suite.core.context.BudgetTooSmall`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from methods.vti.cosmic import CoSMICFlow
from methods.vti.flows import FlowSpec, build_flow
from methods.vti.made_plus import DiscreteVectorSpace, MADEPlusSampler, default_sfe_lr
from methods.vti.model_samplers import CategoricalSampler, MADEBinarySampler, ModelSampler, SurrogateSampler
from methods.vti.training import EXPLODED_LOSS, DivergenceError, RunLink, Trainer, TrainSettings, elbo_terms, train
from suite.core.context import BudgetTooSmall, RunContext, RunningEstimate
from suite.core.loop import RunLoop
from suite.core.method import Method, Result
from suite.core.model_space import BinarySpace
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.tensor_ops import unique_rows
from suite.core.types import Draws, ModelProbs

CONTEXTS = ("auto", "onehot", "problem")
#: ``context="auto"`` one-hot encodes the model when the space has at most this many models.
MAX_ONEHOT_MODELS = 4096
#: Profile presets shared by both methods (batch sizes differ). ``paper`` is the authors' Affine MAF (5,5) at
#: their learning rate; ``quick`` trades iterations for a 10x learning rate and a sinh-arcsinh output layer
#: (which an affine MAF lacks for one-coordinate models such as ``sas``'s first), measured in the README.
SMOKE: dict[str, Any] = {
    "flow": "sas(2,2)",
    "num_iterations": 150,
    "warmup_iterations": 30,
    "flow_lr": 1e-2,
    "balance_models": True,
}
QUICK: dict[str, Any] = {
    "flow": "sas(3,3)",
    "num_iterations": 1500,
    "warmup_iterations": 300,
    "flow_lr": 1e-2,
    "balance_models": True,
}
PAPER: dict[str, Any] = {
    "flow": "affine(5,5)",
    "num_iterations": 30000,
    "warmup_iterations": 3000,
    "balance_models": False,
}
#: Above this saturated dimension a preset ``sas(N,M)`` flow becomes ``affine(N,M)``: on ``dag-mlp`` (549) and
#: ``dag-mlp-sachs`` (385) the sinh-arcsinh layer's context MLP drove its tail weights toward zero within 25
#: iterations (at learning rate 1e-2 and at 1e-3, float32 and float64), and the runs diverged.
SAS_MAX_DIM = 256
#: Rows per chunk when evaluating the flow density (sequential inverse) or drawing samples.
EVAL_CHUNK = 4096
#: Snapshots of a finished replicate on a space too large to enumerate list q at the distinct models of this many
#: draws, made on a generator seeded from the run's seed and the snapshot's number (never the training's).
SNAPSHOT_MODEL_DRAWS = 2**8
SNAPSHOT_SEED_STRIDE = 7919
#: Running snapshots enumerate q(m) only up to this many models; above it (a MADE on 2^17..2^20 models, where one
#: enumeration takes seconds to tens of seconds on a CPU and a 60-s run took over 9 minutes of snapshots) they list
#: q at the distinct models of the latest batch, as on spaces too large to enumerate. The final estimate still
#: enumerates.
SNAPSHOT_ENUMERATION_LIMIT = 2**16


#: Choices of the ``model_probs`` option.
MODEL_PROBS = ("sampler", "importance")
#: model_probs="importance": the fewest flow draws per model, the draws in all that small spaces share out (2
#: models: 16,384 each; 128 and more: 256 each), and the largest model space it enumerates.
IMPORTANCE_DRAWS = 256
IMPORTANCE_TOTAL_DRAWS = 2**15
IMPORTANCE_MODEL_LIMIT = 2**12


def importance_draws_per_model(num_models: int) -> int:
    """Flow draws per model for model_probs="importance": IMPORTANCE_TOTAL_DRAWS shared out, at least IMPORTANCE_DRAWS.

    The estimate's error in log Z_m falls as one over the square root of the draws, and with few models the
    pass over IMPORTANCE_TOTAL_DRAWS rows costs what 128 models at 256 draws cost (0.3 s on robust-vs).
    """
    return max(IMPORTANCE_DRAWS, IMPORTANCE_TOTAL_DRAWS // max(num_models, 1))


def _can_weigh_models(problem: Problem) -> bool:
    """Whether model_probs="importance" applies: an enumerable one-word space of at most IMPORTANCE_MODEL_LIMIT."""
    return _can_balance(problem) and int(problem.num_models) <= IMPORTANCE_MODEL_LIMIT


def _can_balance(problem: Problem) -> bool:
    """Whether per-model loss statistics can be tabled: an enumerable space with one-word model indices."""
    return problem.num_models is not None and problem.model_space.index_width == 1


def context_function(problem: Problem, kind: str, dtype: torch.dtype) -> tuple[Callable[[Tensor], Tensor], int]:
    """The flow's context map m -> features and its width."""
    num_models = problem.num_models
    if kind == "auto":
        kind = "onehot" if num_models is not None and num_models <= MAX_ONEHOT_MODELS else "problem"
    if kind == "onehot":
        if num_models is None:
            raise ValueError(f"context='onehot' needs an enumerable model space; {problem.name} has none")
        # The model index itself, which the flow reads as its one-hot code (methods.vti.cosmic, "Contexts").
        return (lambda m: m), num_models
    return (lambda m: problem.context(m, dtype)), problem.context_dim


@dataclass(frozen=True)
class _VTIMethod(Method):
    """Shared options and run logic of the VTI methods (subclasses choose the model sampler)."""

    flow: str | None = None
    num_iterations: int | None = None
    batch_size: int | None = None
    flow_lr: float | None = None
    grad_clip: float = 20.0
    warmup_iterations: int | None = None
    hidden: int | None = None
    context: str = "auto"
    #: Independent trainings per run; the one with the lowest terminal loss is reported (VTI App. F.4).
    replicates: int = 1
    #: Weigh each sample's flow loss by 1 / its model's running ELBO spread (methods.vti.balance): smoke and quick
    #: (on enumerable one-word spaces); False is the authors' loop (paper, and every space without a model table).
    balance_models: bool | None = None
    #: The reported q(m): "sampler" (the model sampler's, as the authors report it) or "importance" (q(m) from
    #: per-model importance-sampling evidence estimates with the trained flow as proposal; see
    #: :func:`_importance_model_probs`), on enumerable spaces of at most IMPORTANCE_MODEL_LIMIT models. None: the
    #: profile's (``vti-mcg`` smoke and quick: "importance" where it applies), else "sampler".
    model_probs: str | None = None

    decay: ClassVar[str] = "exponential"
    weight_decay: ClassVar[float] = 0.01

    def resolve(self, problem: Problem, profile: str) -> _VTIMethod:
        """As :meth:`Method.resolve`; a preset ``sas(N,M)`` flow (none asked for) becomes ``affine(N,M)`` on
        problems above ``SAS_MAX_DIM`` coordinates (a flow asked for is kept), and a preset ``balance_models``
        is off where the space has no per-model table."""
        method = self
        if self.balance_models is None and not _can_balance(problem):
            method = dataclasses.replace(self, balance_models=False)
        if self.model_probs is None and not _can_weigh_models(problem):
            method = dataclasses.replace(method, model_probs="sampler")
        resolved = super(_VTIMethod, method).resolve(problem, profile)
        assert isinstance(resolved, _VTIMethod)
        if self.flow is None:
            spec = FlowSpec.parse(resolved.flow)
            if spec.kind == "sas" and problem.dim_max > SAS_MAX_DIM:
                resolved = dataclasses.replace(resolved, flow=f"affine({spec.num_layers},{spec.num_blocks})")
        return resolved

    def finalise(self, problem: Problem) -> _VTIMethod:
        """Check the resolved options before any work (ValueError naming the valid choices)."""
        if self.model_probs is None:  # no profile preset: the authors' report
            return dataclasses.replace(self, model_probs="sampler").finalise(problem)
        FlowSpec.parse(self.flow)  # raises with the valid names
        for key in ("num_iterations", "batch_size"):
            value = getattr(self, key)
            if value is None or int(value) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {value}")
        if self.warmup_iterations is None or not 0 <= int(self.warmup_iterations) <= int(self.num_iterations):
            raise ValueError(f"{self.name}: warmup_iterations must lie in [0, num_iterations]")
        if self.context not in CONTEXTS:
            raise ValueError(f"{self.name}: unknown context {self.context!r}; valid: {', '.join(CONTEXTS)}")
        if self.grad_clip <= 0 or (self.flow_lr is not None and self.flow_lr <= 0):
            raise ValueError(f"{self.name}: grad_clip and flow_lr must be positive")
        if int(self.replicates) < 1:
            raise ValueError(f"{self.name}: replicates must be at least 1, got {self.replicates}")
        if self.model_probs not in MODEL_PROBS:
            raise ValueError(f"{self.name}: unknown model_probs {self.model_probs!r}; valid: {', '.join(MODEL_PROBS)}")
        if self.model_probs == "importance" and not _can_weigh_models(problem):
            raise ValueError(
                f"{self.name}: model_probs=importance draws from every model, so it needs an enumerable space of at "
                f"most {IMPORTANCE_MODEL_LIMIT} models with one-word indices; {problem.name} has "
                f"{problem.num_models or 'unboundedly many'} (use model_probs=sampler)"
            )
        if self.balance_models and not _can_balance(problem):
            raise ValueError(
                f"{self.name}: balance_models keeps statistics per model, so it needs an enumerable model space "
                f"with one-word indices; {problem.name} has neither (use balance_models=false)"
            )
        return self

    @abstractmethod
    def make_sampler(
        self, problem: Problem, log_prior: Tensor | None, device: torch.device, dtype: torch.dtype
    ) -> ModelSampler:
        """The model sampler q_psi(m) of this method."""

    def train_settings(self) -> TrainSettings:
        """The optimiser settings of one training."""
        return TrainSettings(
            num_iterations=int(self.num_iterations),
            batch_size=int(self.batch_size),
            flow_lr=self.flow_lr or FlowSpec.parse(self.flow).default_learning_rate(),
            grad_clip=float(self.grad_clip),
            weight_decay=self.weight_decay,
            decay=self.decay,
            warmup_iterations=int(self.warmup_iterations),
            balance_models=bool(self.balance_models),
        )

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Train flow and model sampler, then report q(m), draws and log q(m, theta_m).

        With ``replicates=R > 1`` the run trains R times from the seeds :func:`replicate_seed` derives from
        the run's seed and reports the training with the lowest terminal loss (mean of its last 50 losses), the
        protocol of VTI App. F.4; the walltime covers all R (a time budget is shared equally). Replicate 0 is
        the single run of the same seed.

        Snapshots (module doc) are taken after every iteration where the run context asks for one, numbered by
        the iterations of all replicates so far. When the run context has a checkpoint slot
        (:mod:`suite.core.checkpoint`), the state of the training in progress and the run context's (clock, counts,
        trace) are saved every few minutes and after each replicate, and a later attempt of the same run
        continues from it with the same result and trace as an uninterrupted run.
        """
        device, dtype = context.device, context.dtype
        progress = _Progress(context, self._checkpoint_identity(problem, context))
        chosen = progress.restore_best(lambda r: self.untrained(problem, context, r))

        def estimate(trainer: Trainer) -> RunningEstimate:
            """What the run would return if stopped now: the best of the finished replicates and this one."""
            sampler, elbo, batch = trainer.sampler, trainer.running_elbo, trainer.last_batch
            if chosen is not None and not _tail_mean(trainer.trace["loss"]) < chosen.terminal_loss:
                sampler, elbo, batch = chosen.sampler, (lambda: chosen.elbo), None
            with torch.no_grad():
                small = problem.num_models is not None and problem.num_models <= SNAPSHOT_ENUMERATION_LIMIT
                if small and sampler.can_enumerate:
                    probs, _ = _posterior_model_probs(problem, sampler, trainer.generator)  # draws nothing
                else:
                    if batch is None:
                        seed = context.seed + SNAPSHOT_SEED_STRIDE * len(context.snapshots)
                        generator = torch.Generator(device=device).manual_seed(seed)
                        models = sampler.sample(SNAPSHOT_MODEL_DRAWS, generator)[0]
                    else:
                        models = batch[0]
                    probs = _listed_model_probs(sampler, models)
            return RunningEstimate(probs, elbo())

        loop = context.loop(f"{self.name} {problem.name}", start=progress.iterations_done)
        with loop:
            for replicate in range(len(progress.finished), int(self.replicates)):
                if loop.budgeted and loop.finished():
                    break
                outcome = self._train(problem, context, loop, replicate, progress, estimate)
                if isinstance(outcome, DivergenceError):
                    progress.finish(replicate, None, str(outcome), outcome.iteration)
                else:
                    progress.finish(replicate, outcome.terminal_loss, None, outcome.iterations)
                    if outcome.iterations > 0 and (chosen is None or outcome.terminal_loss < chosen.terminal_loss):
                        chosen = outcome
                if replicate + 1 < int(self.replicates):
                    progress.save(chosen, None)
        terminal_losses = [item[0] for item in progress.finished]
        failures = [item[1] for item in progress.finished if item[1] is not None]
        if chosen is None:
            if not failures:
                raise BudgetTooSmall("no VTI training iteration finished within the time budget")
            reason = (
                failures[0]
                if len(failures) == 1
                else "every replicate diverged: "
                + "; ".join(f"replicate {r}: {item[1]}" for r, item in enumerate(progress.finished))
            )
            return Result.failed(reason, diagnostics={"iteration": progress.last_failure_iteration})
        flow, sampler, trace, generator = chosen.flow, chosen.sampler, chosen.trace, chosen.generator
        with context.timer.phase("sample"), torch.no_grad():
            if self.model_probs == "importance":
                weighed = _importance_model_probs(problem, flow, chosen.context_of, generator, dtype)
                if weighed is None:
                    return Result.failed("model_probs=importance: no model has a finite evidence estimate")
                model_probs, log_q_model = weighed
            else:
                model_probs, log_q_model = _posterior_model_probs(problem, sampler, generator)
            draws = _draw(problem, flow, sampler, chosen.context_of, log_q_model, context.num_draws, generator, dtype)
        flow.eval()
        context.snapshot(progress.iterations_done, lambda: RunningEstimate(model_probs, chosen.elbo))
        iterations = len(trace["loss"])
        train_s = context.timer.timings.get("train", math.nan)
        replicate_diagnostics: dict[str, Any] = {}
        if len(terminal_losses) > 1:
            replicate_diagnostics = {
                "replicate_chosen": chosen.replicate,
                "replicate_terminal_losses": terminal_losses,  # None: diverged
                "replicate_failures": failures,
            }
        if progress.resumed_from is not None:
            replicate_diagnostics["resumed_from"] = progress.resumed_from
        return Result(
            model_probs=model_probs,
            draws=draws,
            log_density=_log_density(problem, flow, chosen.context_of, log_q_model, sampler),
            conditional_log_density=_log_density(problem, flow, chosen.context_of, None, None),
            diagnostics={
                "flow": self.flow,
                "final_loss": chosen.terminal_loss,
                "loss_trace": trace["loss"][:: max(iterations // 200, 1)],
                "iterations": progress.iterations_done,
                # iterations of this attempt (all replicates, diverged ones too) over its training seconds
                "iterations_per_s": progress.iterations_this_attempt / train_s if train_s > 0 else math.nan,
                "exploded_iterations": sum(loss > EXPLODED_LOSS for loss in trace["loss"]),
                "num_flow_parameters": sum(p.numel() for p in flow.parameters()),
                **replicate_diagnostics,
                **sampler_diagnostics(sampler),
            },
        )

    def _checkpoint_identity(self, problem: Problem, context: RunContext) -> dict[str, Any]:
        """What a saved state must match to be continued: method, problem, resolved options, seed, dtype, budget."""
        identity = {
            "method": self.name,
            "problem": problem.name,
            "config": problem.config(),
            "options": self.options(),
            "seed": context.seed,
            "dtype": context.dtype_name,
            "time_budget_s": context.time_budget_s,
            "replay": context.replay,
            # Checkpoints of the per-tensor optimiser and nflows-layout MADEs (before issue 32's packing) differ.
            "state_format": 2,
        }
        # Plain JSON values, so that the checkpoint stays loadable with weights_only=True (suite.core.checkpoint).
        return json.loads(json.dumps(identity, sort_keys=True, default=str))

    def untrained(self, problem: Problem, context: RunContext, replicate: int = 0) -> Training:
        """A fresh flow and model sampler for replicate ``replicate`` of the run's seed, nothing trained yet (the
        start of every training; public for diagnostics that train them another way)."""
        device, dtype = context.device, context.dtype
        seed = replicate_seed(context.seed, replicate)
        spec = FlowSpec.parse(self.flow)
        torch.manual_seed(seed)  # parameter initialisation
        generator = torch.Generator(device=device).manual_seed(seed)
        with context.timer.phase("setup"):
            context_of, context_dim = context_function(problem, self.context, dtype)
            flow = build_flow(spec, problem.dim_max, context_dim, self.hidden).to(device, dtype)
            log_prior = _log_model_prior_table(problem, device)
            sampler = self.make_sampler(problem, log_prior, device, dtype)
        return Training(flow, sampler, context_of, {"loss": []}, generator, replicate)

    def _train(
        self,
        problem: Problem,
        context: RunContext,
        loop: RunLoop,
        replicate: int,
        progress: _Progress,
        estimate: Callable[[Trainer], RunningEstimate],
    ) -> Training | DivergenceError:
        """One training (replicate ``replicate``): build flow and sampler, optimise; or the divergence."""
        built = self.untrained(problem, context, replicate)
        resume = progress.take_current(replicate)
        start = 0 if resume is None else int(resume["next_iteration"])
        offset = progress.iterations_done
        loop.plan(offset + (int(self.replicates) - replicate) * int(self.num_iterations))
        link = RunLink(loop, estimate, offset=offset, part=replicate, parts=int(self.replicates))

        def save(trainer_state: dict[str, Any]) -> None:
            progress.save(None, (replicate, trainer_state))

        try:
            with context.timer.phase("train"):
                trainer = train(
                    problem,
                    built.flow,
                    built.sampler,
                    built.context_of,
                    self.train_settings(),
                    built.generator,
                    link,
                    resume=resume,
                    save=save if progress.slot else None,
                    save_every_s=progress.slot.every_s if progress.slot else math.inf,
                )
        except DivergenceError as err:
            progress.count_iterations(err.iteration - start, failed_at=err.iteration)
            return err
        progress.count_iterations(trainer.iteration - start)
        built.trace = trainer.trace
        built.iterations = trainer.iteration
        built.elbo = trainer.running_elbo()
        return built


class _Progress:
    """The replicates of one run finished so far and the checkpoint they are saved to (if the run context has one).

    A checkpoint holds the finished replicates, the best one's final state, the replicate in progress and the run
    context's :meth:`~suite.core.context.RunContext.state_dict` (clock, counts and trace), restored on resuming.
    """

    def __init__(self, context: RunContext, identity: dict[str, Any]) -> None:
        self.context, self.slot, self.identity = context, context.checkpoint, identity
        #: (terminal loss or None, divergence or None, iterations) per finished replicate.
        self.finished: list[tuple[float | None, str | None, int]] = []
        self.resumed_from: dict[str, int] | None = None
        self.iterations_this_attempt = 0
        self.last_failure_iteration: int | None = None
        self._best: dict[str, Any] | None = None  # saved final state of the best finished replicate
        self._current: tuple[int, dict[str, Any]] | None = None  # saved state of the replicate in progress
        state = self.slot.load() if self.slot is not None else None
        if state is None:
            return
        if state.get("identity") != identity:
            warnings.warn(
                f"checkpoint {self.slot.path} was saved by a different configuration; starting afresh", stacklevel=3
            )
            return
        self.finished = [(item[0], item[1], int(item[2])) for item in state["finished"]]
        self._best, self._current = state["best"], state["current"]
        context.load_state_dict(state["context"])
        next_iteration = 0 if self._current is None else int(self._current[1]["next_iteration"])
        self.resumed_from = {"replicate": len(self.finished), "iteration": next_iteration}

    @property
    def iterations_done(self) -> int:
        """Training iterations of the finished replicates (where the next one's count starts)."""
        return sum(item[2] for item in self.finished)

    def restore_best(self, build: Callable[[int], Training]) -> Training | None:
        """The best finished replicate of an earlier attempt, rebuilt from its saved state (None: none yet)."""
        if self._best is None:
            return None
        best = build(int(self._best["replicate"]))
        best.flow.load_state_dict(self._best["flow"])
        best.sampler.load_state_dict(self._best["sampler"])
        best.generator.set_state(self._best["generator"])
        best.trace = {name: list(values) for name, values in self._best["trace"].items()}
        best.iterations, best.elbo = int(self._best["iterations"]), self._best["elbo"]
        return best

    def take_current(self, replicate: int) -> dict[str, Any] | None:
        """The saved trainer state of ``replicate`` if an earlier attempt was part way through it (used once)."""
        current, self._current = self._current, None
        return current[1] if current is not None and current[0] == replicate else None

    def count_iterations(self, iterations: int, failed_at: int | None = None) -> None:
        """Book the iterations this attempt ran (and where a replicate diverged)."""
        self.iterations_this_attempt += max(iterations, 0)
        if failed_at is not None:
            self.last_failure_iteration = failed_at

    def finish(self, replicate: int, terminal_loss: float | None, failure: str | None, iterations: int) -> None:
        """Record that ``replicate`` ended after ``iterations``, with its terminal loss or why it diverged."""
        assert replicate == len(self.finished)
        self.finished.append((terminal_loss, failure, int(iterations)))

    def save(self, best: Training | None, current: tuple[int, dict[str, Any]] | None) -> None:
        """Save the finished replicates, the best one's final state, the replicate in progress and the context's."""
        if self.slot is None:
            return
        if best is not None:
            self._best = {
                "replicate": best.replicate,
                "flow": best.flow.state_dict(),
                "sampler": best.sampler.state_dict(),
                "generator": best.generator.get_state(),
                "trace": best.trace,
                "iterations": best.iterations,
                "elbo": best.elbo,
            }
        state = {
            "identity": self.identity,
            "finished": [list(item) for item in self.finished],
            "best": self._best,
            "current": current,
            "context": self.context.state_dict(),
        }
        self.slot.save(state)


#: Seed offset between replicates (a large odd number, so replicate seeds of nearby run seeds do not collide).
REPLICATE_SEED_STRIDE = 1_000_003


def replicate_seed(seed: int, replicate: int) -> int:
    """The training seed of replicate ``replicate`` of a run with ``seed`` (replicate 0 is ``seed`` itself)."""
    return seed + REPLICATE_SEED_STRIDE * replicate


def _tail_mean(losses: list[float]) -> float:
    """Mean of the last 50 training losses (infinite when there are none)."""
    tail = losses[-50:]
    return sum(tail) / len(tail) if tail else math.inf


@dataclass
class Training:
    """One VTI optimisation (fresh from :meth:`untrained`, or finished): what the reporting step needs, and its
    terminal loss."""

    flow: CoSMICFlow
    sampler: ModelSampler
    context_of: Callable[[Tensor], Tensor]
    trace: dict[str, list[float]]
    generator: torch.Generator
    replicate: int
    #: Iterations it ran, and the running ELBO of its last batch (None: none finite).
    iterations: int = 0
    elbo: float | None = None

    @property
    def terminal_loss(self) -> float:
        """Mean of the last 50 training losses (the trace holds only iterations with a finite loss)."""
        return _tail_mean(self.trace["loss"])


def sampler_diagnostics(sampler: ModelSampler) -> dict[str, Any]:
    """Scalar diagnostics the sampler exposes (if any)."""
    getter = getattr(sampler, "diagnostics", None)
    return dict(getter()) if callable(getter) else {}


def _log_model_prior_table(problem: Problem, device: torch.device) -> Tensor | None:
    if problem.num_models is None:
        return None
    return problem.log_model_prior(problem.model_space.all_indices(device)).to(torch.float64)


def _posterior_model_probs(
    problem: Problem, sampler: ModelSampler, generator: torch.Generator
) -> tuple[ModelProbs, Tensor | None]:
    """q(m) over all models when the sampler can enumerate them, else q(m) of the distinct models in 2^16 draws
    (2^12 for multi-word model spaces).

    In the second case the listed probabilities are exact values of q at those models (not draw frequencies);
    the models q never drew carry the rest of its mass, and no dense table is kept.
    """
    if problem.num_models is not None and sampler.can_enumerate:
        log_q = sampler.posterior_log_probs().to(torch.float64)
        return ModelProbs.from_dense(log_q.exp()), log_q
    # Multi-word spaces (DAGs) take one MADE+ pass per variable (54 for 10 nodes) per draw, hence fewer draws.
    model_index, _ = sampler.sample(2**16 if problem.model_space.index_width == 1 else 2**12, generator)
    return _listed_model_probs(sampler, model_index), None


def _importance_model_probs(
    problem: Problem,
    flow: CoSMICFlow,
    context_of: Callable[[Tensor], Tensor],
    generator: torch.Generator,
    dtype: torch.dtype,
    num_draws: int | None = None,
) -> tuple[ModelProbs, Tensor] | None:
    """q(m) proportional to p(m) Z_m, with Z_m = mean_s exp(ell_s) over ``num_draws`` draws theta_s ~ q(theta | m)
    (None: :func:`importance_draws_per_model`).

    ell = log p(D, theta | m) - log q(theta | m) is the training's per-sample ELBO term; its mean is the ELBO, a
    lower bound of log Z_m short by KL(q(theta | m) || p(theta | m, D)), and that gap differs between models, so
    q(m) proportional to p(m) exp(ELBO_m) (what the samplers converge to) carries it. The log-mean-exp is the
    importance-sampling estimate of log Z_m with the flow as proposal, biased by only O(1 / num_draws) (its
    variance over log Z_m). Models whose draws are all non-finite get q = 0; None when no model has a finite one.
    """
    device = generator.device
    models = problem.model_space.all_indices(device)
    if num_draws is None:
        num_draws = importance_draws_per_model(models.shape[0])
    log_prior = problem.log_model_prior(models).to(device, torch.float64)
    # Row r holds draw r % num_draws of model r // num_draws; EVAL_CHUNK rows a pass, whatever num_draws is.
    rows = models.repeat_interleave(num_draws, dim=0)
    row_log_prior = log_prior.to(dtype).repeat_interleave(num_draws)
    ell = torch.empty(rows.shape[0], device=device, dtype=torch.float64)
    for start in range(0, rows.shape[0], EVAL_CHUNK):
        m = rows[start : start + EVAL_CHUNK]
        z = torch.randn(m.shape[0], problem.dim_max, generator=generator, device=device, dtype=dtype)
        ell[start : start + m.shape[0]] = elbo_terms(
            problem, flow, m, z, context_of(m), row_log_prior[start : start + EVAL_CHUNK]
        ).to(torch.float64)
    ell = torch.nan_to_num(ell, nan=-math.inf, posinf=-math.inf).view(-1, num_draws)
    log_joint_m = log_prior + torch.logsumexp(ell, dim=1) - math.log(num_draws)
    if not bool(torch.isfinite(log_joint_m).any()):
        return None
    log_q = (log_joint_m - torch.logsumexp(log_joint_m, 0)).cpu()
    return ModelProbs.from_dense(log_q.exp()), log_q


def _listed_model_probs(sampler: ModelSampler, model_index: Tensor) -> ModelProbs:
    """Exact q(m) at the distinct models of ``model_index`` (draws of q)."""
    distinct = unique_rows(model_index)
    return ModelProbs(distinct.cpu(), sampler.log_prob(distinct).to("cpu", torch.float64).exp())


def _draw(
    problem: Problem,
    flow: CoSMICFlow,
    sampler: ModelSampler,
    context_of: Callable[[Tensor], Tensor],
    log_q_model: Tensor | None,
    num: int,
    generator: torch.Generator,
    dtype: torch.dtype,
) -> Draws:
    """(m, theta_m) ~ q: m from the reported q(m), theta = T(z | m); inactive coordinates zero."""
    device = generator.device
    if log_q_model is not None:
        model_index = torch.multinomial(log_q_model.exp().to(device), num, replacement=True, generator=generator)
    else:
        model_index, _ = sampler.sample(num, generator)
    thetas = []
    for start in range(0, num, EVAL_CHUNK):
        m = model_index[start : start + EVAL_CHUNK]
        z = torch.randn(m.shape[0], problem.dim_max, generator=generator, device=device, dtype=dtype)
        mask = problem.mask(m)
        theta, _ = flow.sample(z, mask, context_of(m))
        thetas.append(torch.where(mask, theta, 0.0))
    return Draws(model_index, torch.cat(thetas))


def _log_density(
    problem: Problem,
    flow: CoSMICFlow,
    context_of: Callable[[Tensor], Tensor],
    log_q_model: Tensor | None,
    sampler: ModelSampler | None,
) -> Callable[[Tensor, Tensor], Tensor]:
    """log q(m, theta_m) = log q(m) + log q(theta_m | m) by the flow's inverse (Prop. 2.2).

    With ``sampler`` None (and no ``log_q_model``) it is the conditional log q(theta_m | m) alone.
    """

    def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
        out = []
        with torch.no_grad():
            for start in range(0, model_index.shape[0], EVAL_CHUNK):
                m = model_index[start : start + EVAL_CHUNK]
                mask = problem.mask(m)
                th = torch.where(mask, theta[start : start + EVAL_CHUNK], 0.0)
                log_q_theta = flow.log_prob(th, mask, context_of(m))
                if log_q_model is None and sampler is None:
                    out.append(log_q_theta)
                    continue
                log_qm = log_q_model.to(m.device)[m] if log_q_model is not None else sampler.log_prob(m)
                out.append(log_qm.to(th.dtype) + log_q_theta)
        return torch.cat(out)

    return log_density


#: Named option sets of ``vti-surrogate``. ``gmm-reference``: the GMM code reference's configuration
#: (``../shared/papers/vti-gmm2d-code-reference.md``): ``SoftmaxSurrogateSampler`` with squished UCB reported as
#: q (the action distribution), a surrogate with prior variance 1e4, observation variance 10 and coupling 100 that
#: observes ELBO / N (N: the problem's ``num_observations``), exp(UCB) actions without the model prior, affine MAF
#: (5,5) at learning rate 1e-3, batch 256, and the authors' plain flow loss. Their flow's zero-initialised last
#: layers are every flow's start here.
SURROGATE_PRESETS: dict[str, dict[str, Any]] = {
    "gmm-reference": {
        "squish": True,
        "posterior": "action",
        "prior_variance": 1e4,
        "obs_variance": 10.0,
        "f_coupling": 1e2,
        "elbo_scale": "num_observations",
        "action_prior": False,
        "flow": "affine(5,5)",
        "flow_lr": 1e-3,
        "batch_size": 256,
        "balance_models": False,
    }
}


@register_method("vti-surrogate")
@dataclass(frozen=True)
class VTISurrogate(_VTIMethod):
    """VTI with CoSMIC flows and a diagonal Gaussian surrogate of the per-model ELBO, sampled by UCB softmax.

    Each iteration draws m from q(m) proportional to p(m) exp(UCB(m)), trains the
    flow on the reparameterised ELBO (AdamW, cosine restarts chained with an
    exponential decay, gradient clipping) and feeds the per-sample ELBOs to
    the surrogate (conjugate updates, vectorised over the batch; Adam-coupled
    variance inflation). After training q(m) proportional to p(m) exp(mean(m))
    is reported (``posterior="mean"``, VTI eq. 13) or the UCB action
    distribution itself (``posterior="action"``, the authors' code).
    """

    prior_variance: float = 1e2
    obs_variance: float = 1.0
    f_coupling: float = 1e2
    obs_beta: float = 0.2
    max_entropy_gain: float = 0.01
    squish: bool = False
    posterior: str = "mean"
    #: The surrogate observes ELBO / elbo_scale (the GMM code reference divides by the number of data points).
    elbo_scale: float = 1.0
    #: Whether the action distribution carries the model prior, p(m) exp(UCB) (VTI eq. 14: paper); the authors'
    #: code samples exp(UCB) alone (smoke, quick), so that the warm-up draws every model equally (on gmm-2d the
    #: prior-shaped warm-up drew k = 1 99% of the time and no other flow was fitted).
    action_prior: bool | None = None
    #: A named set of options (:data:`SURROGATE_PRESETS`) that replaces the options left at their defaults and the
    #: profile's presets; an option given beside it with a value other than its default wins.
    preset: str | None = None

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {**SMOKE, "batch_size": 128, "action_prior": False},
        "quick": {**QUICK, "batch_size": 256, "action_prior": False},
        "paper": {**PAPER, "batch_size": 256, "action_prior": True},
    }

    def resolve(self, problem: Problem, profile: str) -> _VTIMethod:
        """As the base, after the ``preset``'s values replace the options left at their defaults."""
        method = self
        if self.preset is not None:
            values = self.named_preset(SURROGATE_PRESETS, self.preset)
            if values.pop("elbo_scale") == "num_observations":
                if problem.num_observations is None:
                    raise ValueError(
                        f"{self.name}: preset {self.preset!r} divides ELBOs by the number of observations, "
                        f"which {problem.name} does not state"
                    )
                values["elbo_scale"] = float(problem.num_observations)
            method = self.with_preset(values)
        return super(VTISurrogate, method).resolve(problem, profile)

    def make_sampler(
        self, problem: Problem, log_prior: Tensor | None, device: torch.device, dtype: torch.dtype
    ) -> ModelSampler:
        """The surrogate UCB sampler (enumerable model spaces only)."""
        if log_prior is None:
            raise ValueError("vti-surrogate needs an enumerable model space")
        return SurrogateSampler(
            num_models=problem.num_models,
            log_model_prior=log_prior,
            device=device,
            dtype=dtype,
            prior_variance=self.prior_variance,
            obs_variance=self.obs_variance,
            f_coupling=self.f_coupling,
            obs_beta=self.obs_beta,
            max_entropy_gain=self.max_entropy_gain,
            squish=self.squish,
            posterior=self.posterior,
            scale=self.elbo_scale,
            include_prior=bool(self.action_prior),
        )

    def supports(self, problem: Problem) -> str | None:
        """The surrogate keeps one belief per model, so the space must be enumerable."""
        if problem.num_models == 1:
            return "a single model: VTI reduces to one fixed-dimension flow, left to mif, fr-vip, fr, mf and iaf"
        return None if problem.num_models is not None else "needs an enumerable model space"


MODEL_DISTRIBUTIONS = ("auto", "categorical", "made")
#: Step rules of the categorical score-function sampler: (sfe_lr, ig_threshold) and, for ``natural``, the natural
#: gradient (:class:`~methods.vti.model_samplers.CategoricalSampler`). ``authors``: their code's values and the
#: plain gradient (``paper``); ``natural``: the natural gradient at the authors' cap and rate 0.1 without the
#: log2 M factor (``smoke``, ``quick``); ``large``: the plain gradient at ten times the rate and twenty times the
#: cap. On ``conjugate-vs-p8`` (60 s) the natural rule takes TV from 0.66 to 0.032; on problems it was not tuned on
#: it wins on ``robust-vs`` and ties elsewhere, where ``large`` commits early on ``factor-analysis``
#: (docs/methods.md, "VTI's model distribution"). MADE and MADE+ samplers keep the authors' values under any rule
#: (the binary MADE's cap aside: :data:`MADE_WIDE_CAP`).
CATEGORICAL_STEPS: dict[str, tuple[float, float]] = {
    "authors": (0.1, 5e-3),
    "large": (1.0, 0.1),
    "natural": (0.1, 5e-3),
}
#: The binary MADE's information-gain cap in ``smoke`` and ``quick`` (``paper``: the authors' 5e-3). At 5e-3 the
#: cap halves nearly every step (to 1/32-1/64 of the SGD step after 1,100 iterations on 2^16 models), so q(m)
#: moves only as fast as the cap lets it; measured in docs/methods.md ("The MADE's information-gain cap").
MADE_WIDE_CAP: dict[str, float] = {"made_ig_threshold": 0.05}


@register_method("vti-mcg")
@dataclass(frozen=True)
class VTIMCG(_VTIMethod):
    """VTI with CoSMIC flows and a model distribution trained by score-function (Monte Carlo) gradients.

    ``model_distribution="categorical"`` learns logits over an enumerable
    space; ``"made"`` an autoregressive MADE over the bits of a binary model
    space (any size), or MADE+ (App. F.7-F.8) over the mixed categorical and
    binary variables of a space such as the (permutation, edge bits) DAGs;
    ``"auto"`` picks categorical when the space has at most 2^16 models. The
    running-mean control variate (VTI App. D.1) and the information-gain step
    control by halving (App. D.2-D.3) stabilise it.

    ``steps`` is the categorical sampler's step rule, with its learning rate and information-gain cap where
    ``sfe_lr`` and ``ig_threshold`` are not given (:data:`CATEGORICAL_STEPS`): ``"authors"`` (``paper``) is their
    code's plain score-function gradient at 0.1 x log2 M and 5e-3; ``"natural"`` (``smoke``, ``quick``) the
    natural gradient (each drawn model's logit moves by its mean centred loss) at 0.1 and 5e-3; ``"large"`` the
    plain gradient at 1.0 x log2 M and 0.1. After 60 s on ``conjugate-vs-p8`` the authors' rule leaves q(m) at TV
    0.66 from the exact answer, the natural one at 0.032 (docs/methods.md). MADE and MADE+ samplers take the
    authors' values under any rule: ``sfe_lr`` 0.1, or on DAG spaces their rate by node count (1e-4 for 10
    nodes, 1e-5 above), and ``ig_threshold`` 5e-3; except that the binary MADE takes ``made_ig_threshold`` as its
    cap where it is set and ``ig_threshold`` is not (:data:`MADE_WIDE_CAP` in ``smoke`` and ``quick``).
    """

    model_distribution: str = "auto"
    sfe_lr: float | None = None
    ig_threshold: float | None = None
    steps: str | None = None
    made_ig_threshold: float | None = None
    grad_clip: float = 50.0

    decay: ClassVar[str] = "multiplicative"
    weight_decay: ClassVar[float] = 1e-7

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {**SMOKE, "batch_size": 256, "steps": "natural", "model_probs": "importance", **MADE_WIDE_CAP},
        # Twice the surrogate's iterations at its batch: the score-function sampler needs steps more than samples
        # per step (README, "MADE vs categorical"); the AdamW of the flow is the fused kernel, so this costs ~30%
        # more than 1,500 iterations at batch 512.
        "quick": {
            **QUICK,
            "batch_size": 256,
            "num_iterations": 3000,
            "steps": "natural",
            "model_probs": "importance",
            **MADE_WIDE_CAP,
        },
        "paper": {**PAPER, "batch_size": 1024, "steps": "authors"},
    }

    def finalise(self, problem: Problem) -> VTIMCG:
        """As the base, plus the model distribution's name."""
        resolved = super().finalise(problem)
        if self.steps is not None and self.steps not in CATEGORICAL_STEPS:
            raise ValueError(f"{self.name}: unknown steps {self.steps!r}; valid: {', '.join(CATEGORICAL_STEPS)}")
        for name in ("ig_threshold", "made_ig_threshold"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{self.name}: {name} must be non-negative, got {value}")
        if self.model_distribution not in MODEL_DISTRIBUTIONS:
            raise ValueError(
                f"{self.name}: unknown model_distribution {self.model_distribution!r}; "
                f"valid: {', '.join(MODEL_DISTRIBUTIONS)}"
            )
        return resolved

    def _distribution(self, problem: Problem) -> str:
        kind = self.model_distribution
        if kind == "auto":
            enumerable = problem.num_models is not None and problem.num_models <= 2**16
            kind = "categorical" if enumerable else "made"
        return kind

    def supports(self, problem: Problem) -> str | None:
        """MADE needs a binary model space; categorical an enumerable one."""
        if problem.num_models == 1:
            return "a single model: VTI reduces to one fixed-dimension flow, left to mif, fr-vip, fr, mf and iaf"
        kind = self._distribution(problem)
        space = problem.model_space
        if kind == "made" and not isinstance(space, BinarySpace | DiscreteVectorSpace):
            return "model_distribution='made' needs a binary model space or one of discrete variables (MADE+)"
        if kind == "categorical" and problem.num_models is None:
            return "model_distribution='categorical' needs an enumerable model space"
        return None

    def make_sampler(
        self, problem: Problem, log_prior: Tensor | None, device: torch.device, dtype: torch.dtype
    ) -> ModelSampler:
        """Categorical logits or a MADE over bits."""
        self.require_support(problem)
        space = problem.model_space
        categorical = self._distribution(problem) == "categorical"
        preset_lr, preset_threshold = CATEGORICAL_STEPS[self.steps if categorical and self.steps else "authors"]
        sfe_lr = self.sfe_lr
        if sfe_lr is None:
            num_nodes = getattr(space, "num_nodes", None)
            dag = isinstance(space, DiscreteVectorSpace) and num_nodes
            sfe_lr = default_sfe_lr(num_nodes) if dag else preset_lr
        threshold = preset_threshold if self.ig_threshold is None else self.ig_threshold
        binary_made = not categorical and isinstance(space, BinarySpace)
        if binary_made and self.ig_threshold is None and self.made_ig_threshold is not None:
            threshold = self.made_ig_threshold
        common = {"device": device, "dtype": dtype, "sfe_lr": sfe_lr, "ig_threshold": threshold}
        if categorical:
            natural = self.steps == "natural"
            return CategoricalSampler(
                num_models=problem.num_models, log_model_prior=log_prior, natural=natural, **common
            )
        if not isinstance(space, BinarySpace):
            return MADEPlusSampler(space, log_model_prior_fn=problem.log_model_prior, **common)
        return MADEBinarySampler(
            num_bits=space.num_bits, log_model_prior_fn=problem.log_model_prior, log_model_prior=log_prior, **common
        )
