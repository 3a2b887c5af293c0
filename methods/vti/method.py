"""The registered VTI methods: ``vti-surrogate`` (Gaussian surrogate, UCB softmax) and ``vti-mcg`` (score function)."""

from __future__ import annotations

import json
import math
import time
import warnings
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.vti.cosmic import CoSMICFlow
from methods.vti.flows import FlowSpec, build_flow
from methods.vti.made_plus import DiscreteVectorSpace, MADEPlusSampler, default_sfe_lr
from methods.vti.model_samplers import CategoricalSampler, MADEBinarySampler, ModelSampler, SurrogateSampler
from methods.vti.training import EXPLODED_LOSS, DivergenceError, TrainSettings, train
from suite import checkpoints as ckpt
from suite.harness import PhaseTimer
from suite.method import RESUMED_TIMING, Budget, Method, Result
from suite.model_space import BinarySpace
from suite.problem import Problem
from suite.registry import register_method
from suite.types import Draws, ModelProbs

CONTEXTS = ("auto", "onehot", "problem")
#: ``context="auto"`` one-hot encodes the model when the space has at most this many models.
MAX_ONEHOT_MODELS = 4096
#: Profile presets shared by both methods (batch sizes differ). ``paper`` is the authors' Affine MAF (5,5) at
#: their learning rate; ``quick`` trades iterations for a 10x learning rate and a sinh-arcsinh output layer
#: (which an affine MAF lacks for one-coordinate models such as ``sas``'s first), measured in the README.
SMOKE: dict[str, Any] = {"flow": "sas(2,2)", "num_iterations": 150, "warmup_iterations": 30, "flow_lr": 1e-2}
QUICK: dict[str, Any] = {"flow": "sas(3,3)", "num_iterations": 1500, "warmup_iterations": 300, "flow_lr": 1e-2}
PAPER: dict[str, Any] = {"flow": "affine(5,5)", "num_iterations": 30000, "warmup_iterations": 3000}
#: Above this saturated dimension a preset ``sas(N,M)`` flow becomes ``affine(N,M)``: on ``dag-mlp`` (549) and
#: ``dag-mlp-sachs`` (385) the sinh-arcsinh layer's context MLP drove its tail weights toward zero within 25
#: iterations (at learning rate 1e-2 and at 1e-3, float32 and float64), and the runs diverged.
SAS_MAX_DIM = 256
#: Rows per chunk when evaluating the flow density (sequential inverse) or drawing samples.
EVAL_CHUNK = 4096


def context_function(problem: Problem, kind: str, dtype: torch.dtype) -> tuple[Callable[[Tensor], Tensor], int]:
    """The flow's context map m -> features and its width."""
    num_models = problem.num_models
    if kind == "auto":
        kind = "onehot" if num_models is not None and num_models <= MAX_ONEHOT_MODELS else "problem"
    if kind == "onehot":
        if num_models is None:
            raise ValueError(f"context='onehot' needs an enumerable model space; {problem.name} has none")
        return (lambda m: F.one_hot(m, num_models).to(dtype)), num_models
    return (lambda m: problem.context(m, dtype)), problem.context_dim


@dataclass
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
    dtype: str = "float64"
    progress: bool = True
    #: Independent trainings per run; the one with the lowest terminal loss is reported (VTI App. F.4).
    replicates: int = 1

    decay: ClassVar[str] = "exponential"
    weight_decay: ClassVar[float] = 0.01
    #: A quick-profile run trains for about a minute; one seed keeps ``run_all.py`` within its 15-minute budget.
    default_seeds: ClassVar[dict[str, int]] = {"quick": 1}

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Profile presets under the constructor's values, checked before any work."""
        s = super().settings(problem, budget)
        spec = FlowSpec.parse(s["flow"])  # raises with the valid names
        if self.flow is None and spec.kind == "sas" and problem.dim_max > SAS_MAX_DIM:
            s["flow"] = f"affine({spec.num_layers},{spec.num_blocks})"
        for key in ("num_iterations", "batch_size"):
            if int(s[key]) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {s[key]}")
        if not 0 <= int(s["warmup_iterations"]) <= int(s["num_iterations"]):
            raise ValueError(f"{self.name}: warmup_iterations must lie in [0, num_iterations]")
        if s["context"] not in CONTEXTS:
            raise ValueError(f"{self.name}: unknown context {s['context']!r}; valid: {', '.join(CONTEXTS)}")
        if s["grad_clip"] <= 0 or (s["flow_lr"] is not None and s["flow_lr"] <= 0):
            raise ValueError(f"{self.name}: grad_clip and flow_lr must be positive")
        if int(s["replicates"]) < 1:
            raise ValueError(f"{self.name}: replicates must be at least 1, got {s['replicates']}")
        return s

    @abstractmethod
    def make_sampler(
        self, problem: Problem, s: dict[str, Any], log_prior: Tensor, device: torch.device
    ) -> ModelSampler:
        """The model sampler q_psi(m) of this method."""

    def run(self, problem: Problem, budget: Budget, seed: int, device: torch.device) -> Result:
        """Train flow and model sampler, then report q(m), draws and log q(m, theta_m).

        With ``replicates=R > 1`` the run trains R times from the seeds :func:`replicate_seed` derives from
        ``seed`` and reports the training with the lowest terminal loss (mean of its last 50 losses), the
        protocol of VTI App. F.4; the walltime covers all R. Replicate 0 is the single run of the same seed.

        When the harness offers a checkpoint slot (:mod:`suite.checkpoints`), the state of the training in
        progress is saved every few minutes and after each replicate, and a later attempt of the same run
        continues from it with the same result as an uninterrupted run.
        """
        s = self.settings(problem, budget)
        timer = PhaseTimer(device)
        attempt_start = time.perf_counter()
        progress = _Progress(ckpt.current_slot(), self._checkpoint_identity(problem, s, seed))
        resumed_s = progress.resumed_s
        chosen = progress.restore_best(lambda r: self._build(problem, s, seed, r, device, timer))
        for replicate in range(len(progress.finished), int(s["replicates"])):
            outcome = self._train(problem, s, seed, replicate, device, timer, progress, attempt_start)
            if isinstance(outcome, DivergenceError):
                progress.finish(replicate, None, str(outcome))
            else:
                progress.finish(replicate, outcome.terminal_loss, None)
                if chosen is None or outcome.terminal_loss < chosen.terminal_loss:
                    chosen = outcome
            if replicate + 1 < int(s["replicates"]):
                progress.save(chosen, None, resumed_s + time.perf_counter() - attempt_start)
        terminal_losses = [loss for loss, _ in progress.finished]
        failures = [why for _, why in progress.finished if why is not None]
        iterations_done = progress.iterations_this_attempt
        resumed = {RESUMED_TIMING: resumed_s} if progress.resumed_from is not None else {}
        if chosen is None:
            reason = (
                failures[0]
                if len(failures) == 1
                else "every replicate diverged: "
                + "; ".join(f"replicate {r}: {why}" for r, (_, why) in enumerate(progress.finished))
            )
            diagnostics = {"iteration": progress.last_failure_iteration}
            return Result.failed(reason, diagnostics=diagnostics, timings={**timer.timings, **resumed})
        flow, sampler, trace, generator = chosen.flow, chosen.sampler, chosen.trace, chosen.generator
        with timer.phase("sample"), torch.no_grad():
            model_probs, log_q_model = _posterior_model_probs(problem, sampler, generator)
            draws = _draw(
                problem, flow, sampler, chosen.context_of, log_q_model, budget.num_draws, generator, self.torch_dtype
            )
        flow.eval()
        iterations = len(trace["loss"])
        train_s = timer.timings.get("train", math.nan)
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
            diagnostics={
                "flow": s["flow"],
                "final_loss": chosen.terminal_loss,
                "loss_trace": trace["loss"][:: max(iterations // 200, 1)],
                # iterations of this attempt (all replicates, diverged ones too) over its training seconds
                "iterations_per_s": iterations_done / train_s if train_s > 0 else math.nan,
                "exploded_iterations": sum(loss > EXPLODED_LOSS for loss in trace["loss"]),
                "num_flow_parameters": sum(p.numel() for p in flow.parameters()),
                **replicate_diagnostics,
                **sampler_diagnostics(sampler),
            },
            timings={**timer.timings, **resumed},
            device=str(device),
            dtype=self.dtype,
        )

    def _checkpoint_identity(self, problem: Problem, s: dict[str, Any], seed: int) -> dict[str, Any]:
        """What a saved state must match to be continued: method, problem, resolved settings (bar the progress bar)."""
        settings = {key: value for key, value in s.items() if key != "progress"}
        identity = {
            "method": self.name,
            "problem": problem.name,
            "config": problem.config(),
            "settings": settings,
            "seed": seed,
        }
        # Plain JSON values, so that the checkpoint stays loadable with weights_only=True (suite.checkpoints).
        return json.loads(json.dumps(identity, sort_keys=True, default=str))

    def _build(
        self, problem: Problem, s: dict[str, Any], seed: int, replicate: int, device: torch.device, timer: PhaseTimer
    ) -> _Training:
        """A fresh flow and sampler for replicate ``replicate`` of ``seed`` (nothing trained yet)."""
        dtype = self.torch_dtype
        seed = replicate_seed(seed, replicate)
        spec = FlowSpec.parse(s["flow"])
        torch.manual_seed(seed)  # parameter initialisation
        generator = torch.Generator(device=device).manual_seed(seed)
        with timer.phase("setup"):
            context_of, context_dim = context_function(problem, s["context"], dtype)
            flow = build_flow(spec, problem.dim_max, context_dim, s["hidden"]).to(device, dtype)
            log_prior = _log_model_prior_table(problem, device)
            sampler = self.make_sampler(problem, s, log_prior, device)
        return _Training(flow, sampler, context_of, {"loss": []}, generator, replicate)

    def _train(
        self,
        problem: Problem,
        s: dict[str, Any],
        seed: int,
        replicate: int,
        device: torch.device,
        timer: PhaseTimer,
        progress: _Progress,
        attempt_start: float,
    ) -> _Training | DivergenceError:
        """One training (replicate ``replicate`` of ``seed``): build flow and sampler, optimise; or the divergence."""
        built = self._build(problem, s, seed, replicate, device, timer)
        spec = FlowSpec.parse(s["flow"])
        train_settings = TrainSettings(
            num_iterations=int(s["num_iterations"]),
            batch_size=int(s["batch_size"]),
            flow_lr=s["flow_lr"] or spec.default_learning_rate(),
            grad_clip=float(s["grad_clip"]),
            weight_decay=self.weight_decay,
            decay=self.decay,
            warmup_iterations=int(s["warmup_iterations"]),
        )
        resume = progress.take_current(replicate)
        start = 0 if resume is None else int(resume["next_iteration"])

        def save(trainer_state: dict[str, Any]) -> None:
            progress.save(None, (replicate, trainer_state), progress.resumed_s + time.perf_counter() - attempt_start)

        try:
            with timer.phase("train"):
                trace = train(
                    problem,
                    built.flow,
                    built.sampler,
                    built.context_of,
                    train_settings,
                    built.generator,
                    s["progress"],
                    self.name,
                    resume=resume,
                    save=save if progress.slot else None,
                    save_every_s=progress.slot.every_s if progress.slot else math.inf,
                )
        except DivergenceError as err:
            progress.count_iterations(err.iteration - start, failed_at=err.iteration)
            return err
        progress.count_iterations(train_settings.num_iterations - start)
        built.trace = trace
        return built


class _Progress:
    """The replicates of one run finished so far and the checkpoint they are saved to (if the harness gave one)."""

    def __init__(self, slot: ckpt.CheckpointSlot | None, identity: dict[str, Any]) -> None:
        self.slot, self.identity = slot, identity
        self.finished: list[tuple[float | None, str | None]] = []  # (terminal loss or None, divergence or None)
        self.resumed_s = 0.0
        self.resumed_from: dict[str, int] | None = None
        self.iterations_this_attempt = 0
        self.last_failure_iteration: int | None = None
        self._best: dict[str, Any] | None = None  # saved final state of the best finished replicate
        self._current: tuple[int, dict[str, Any]] | None = None  # saved state of the replicate in progress
        state = slot.load() if slot is not None else None
        if state is None:
            return
        if state.get("identity") != identity:
            warnings.warn(
                f"checkpoint {slot.path} was saved by a different configuration; starting afresh", stacklevel=3
            )
            return
        self.finished = [tuple(item) for item in state["finished"]]
        self.resumed_s = float(state["elapsed_s"])
        self._best, self._current = state["best"], state["current"]
        next_iteration = 0 if self._current is None else int(self._current[1]["next_iteration"])
        self.resumed_from = {"replicate": len(self.finished), "iteration": next_iteration}

    def restore_best(self, build: Callable[[int], _Training]) -> _Training | None:
        """The best finished replicate of an earlier attempt, rebuilt from its saved state (None: none yet)."""
        if self._best is None:
            return None
        best = build(int(self._best["replicate"]))
        best.flow.load_state_dict(self._best["flow"])
        best.sampler.load_state_dict(self._best["sampler"])
        best.generator.set_state(self._best["generator"])
        best.trace = {name: list(values) for name, values in self._best["trace"].items()}
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

    def finish(self, replicate: int, terminal_loss: float | None, failure: str | None) -> None:
        """Record that ``replicate`` ended, with its terminal loss or why it diverged."""
        assert replicate == len(self.finished)
        self.finished.append((terminal_loss, failure))

    def save(self, best: _Training | None, current: tuple[int, dict[str, Any]] | None, elapsed_s: float) -> None:
        """Save the finished replicates, the best one's final state and the replicate in progress (if any)."""
        if self.slot is None:
            return
        if best is not None:
            self._best = {
                "replicate": best.replicate,
                "flow": best.flow.state_dict(),
                "sampler": best.sampler.state_dict(),
                "generator": best.generator.get_state(),
                "trace": best.trace,
            }
        state = {
            "identity": self.identity,
            "finished": [list(item) for item in self.finished],
            "best": self._best,
            "current": current,
            "elapsed_s": elapsed_s,
        }
        self.slot.save(state)


#: Seed offset between replicates (a large odd number, so replicate seeds of nearby run seeds do not collide).
REPLICATE_SEED_STRIDE = 1_000_003


def replicate_seed(seed: int, replicate: int) -> int:
    """The training seed of replicate ``replicate`` of a run with ``seed`` (replicate 0 is ``seed`` itself)."""
    return seed + REPLICATE_SEED_STRIDE * replicate


@dataclass
class _Training:
    """One finished VTI optimisation: what the reporting step needs, and its terminal loss."""

    flow: CoSMICFlow
    sampler: ModelSampler
    context_of: Callable[[Tensor], Tensor]
    trace: dict[str, list[float]]
    generator: torch.Generator
    replicate: int

    @property
    def terminal_loss(self) -> float:
        """Mean of the last 50 training losses (the trace holds only iterations with a finite loss)."""
        tail = self.trace["loss"][-50:]
        return sum(tail) / len(tail) if tail else math.inf


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
    distinct = torch.unique(model_index, dim=0)
    return ModelProbs(distinct.cpu(), sampler.log_prob(distinct).to("cpu", torch.float64).exp()), None


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
    sampler: ModelSampler,
) -> Callable[[Tensor, Tensor], Tensor]:
    """log q(m, theta_m) = log q(m) + log q(theta_m | m) by the flow's inverse (Prop. 2.2)."""

    def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
        out = []
        with torch.no_grad():
            for start in range(0, model_index.shape[0], EVAL_CHUNK):
                m = model_index[start : start + EVAL_CHUNK]
                mask = problem.mask(m)
                th = torch.where(mask, theta[start : start + EVAL_CHUNK], 0.0)
                log_qm = log_q_model.to(m.device)[m] if log_q_model is not None else sampler.log_prob(m)
                out.append(log_qm.to(th.dtype) + flow.log_prob(th, mask, context_of(m)))
        return torch.cat(out)

    return log_density


@register_method("vti-surrogate")
@dataclass
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

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {**SMOKE, "batch_size": 128},
        "quick": {**QUICK, "batch_size": 256},
        "paper": {**PAPER, "batch_size": 256},
    }

    def make_sampler(
        self, problem: Problem, s: dict[str, Any], log_prior: Tensor | None, device: torch.device
    ) -> ModelSampler:
        """The surrogate UCB sampler (enumerable model spaces only)."""
        if log_prior is None:
            raise ValueError("vti-surrogate needs an enumerable model space")
        return SurrogateSampler(
            num_models=problem.num_models,
            log_model_prior=log_prior,
            device=device,
            dtype=self.torch_dtype,
            prior_variance=s["prior_variance"],
            obs_variance=s["obs_variance"],
            f_coupling=s["f_coupling"],
            obs_beta=s["obs_beta"],
            max_entropy_gain=s["max_entropy_gain"],
            squish=s["squish"],
            posterior=s["posterior"],
        )

    def supports(self, problem: Problem) -> str | None:
        """The surrogate keeps one belief per model, so the space must be enumerable."""
        if problem.num_models == 1:
            return "a single model: VTI reduces to one fixed-dimension flow, left to mif, fr-vip, fr, mf and iaf"
        return None if problem.num_models is not None else "needs an enumerable model space"


MODEL_DISTRIBUTIONS = ("auto", "categorical", "made")


@register_method("vti-mcg")
@dataclass
class VTIMCG(_VTIMethod):
    """VTI with CoSMIC flows and a model distribution trained by score-function (Monte Carlo) gradients.

    ``model_distribution="categorical"`` learns logits over an enumerable
    space; ``"made"`` an autoregressive MADE over the bits of a binary model
    space (any size), or MADE+ (App. F.7-F.8) over the mixed categorical and
    binary variables of a space such as the (permutation, edge bits) DAGs;
    ``"auto"`` picks categorical when the space has at most 2^16 models. The
    running-mean control variate (VTI App. D.1) and the information-gain step
    control by halving (App. D.2-D.3) stabilise it. ``sfe_lr=None`` takes the
    authors' rate: 0.1, or on DAG spaces their rate by node count (1e-4 for 10
    nodes, 1e-5 above).
    """

    model_distribution: str = "auto"
    sfe_lr: float | None = None
    ig_threshold: float = 5e-3
    grad_clip: float = 50.0

    decay: ClassVar[str] = "multiplicative"
    weight_decay: ClassVar[float] = 1e-7

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {**SMOKE, "batch_size": 256},
        # Twice the surrogate's iterations at its batch: the score-function sampler needs steps more than samples
        # per step (README, "MADE vs categorical"); the AdamW of the flow is the fused kernel, so this costs ~30%
        # more than 1,500 iterations at batch 512.
        "quick": {**QUICK, "batch_size": 256, "num_iterations": 3000},
        "paper": {**PAPER, "batch_size": 1024},
    }

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """As the base, plus the model distribution's name."""
        s = super().settings(problem, budget)
        if s["model_distribution"] not in MODEL_DISTRIBUTIONS:
            raise ValueError(
                f"{self.name}: unknown model_distribution {s['model_distribution']!r}; "
                f"valid: {', '.join(MODEL_DISTRIBUTIONS)}"
            )
        return s

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
        self, problem: Problem, s: dict[str, Any], log_prior: Tensor | None, device: torch.device
    ) -> ModelSampler:
        """Categorical logits or a MADE over bits."""
        reason = self.supports(problem)
        if reason is not None:
            raise ValueError(f"{self.name} on {problem.name}: {reason}")
        space = problem.model_space
        sfe_lr = s["sfe_lr"]
        if sfe_lr is None:
            num_nodes = getattr(space, "num_nodes", None)
            sfe_lr = default_sfe_lr(num_nodes) if isinstance(space, DiscreteVectorSpace) and num_nodes else 0.1
        common = {"device": device, "dtype": self.torch_dtype, "sfe_lr": sfe_lr, "ig_threshold": s["ig_threshold"]}
        if self._distribution(problem) == "categorical":
            return CategoricalSampler(num_models=problem.num_models, log_model_prior=log_prior, **common)
        if not isinstance(space, BinarySpace):
            return MADEPlusSampler(space, log_model_prior_fn=problem.log_model_prior, **common)
        return MADEBinarySampler(
            num_bits=space.num_bits, log_model_prior_fn=problem.log_model_prior, log_model_prior=log_prior, **common
        )
