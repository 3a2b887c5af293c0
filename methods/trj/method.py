"""Methods ``trj`` (a transport per model) and ``ctrj`` (one conditional transport), TRJ paper sec. 3-5.

Both learn their transports from per-model posterior draws, as in the paper: the problem's
``training_draws``, which never overlap the gold-standard draws the suite scores methods on. They start
their chains at training draws, run the batched sampler of :mod:`methods.trj.sampler`, and estimate the
model probabilities with the Bartolucci bridge estimator from every across-model proposal after burn-in
(visit frequencies with ``estimator="visits"``). Their density for cross-entropy is
log q(m) + log q_m(theta_m), q_m the density the transport pulls back from N(0, I).

The run's work count (its ``iteration`` in the run context) is the flow training steps, then the sampler's
iterations (burn-in included). Snapshots are the running bridge estimate (the ``estimator`` on the statistics so
far); there is none before the first iteration after burn-in. With a time budget, training the spline flows ends
at ``FIT_FRACTION`` of the budget (milestone ``transports_fitted``; trj's per-model flows, trained one after the
other, each end at an equal share of it, so time one flow leaves unused by stopping early goes to the next),
burn-in takes the preset's share of what is left (:func:`methods.trj.sampler.run_chains`) and sampling runs
until the budget is spent. Transports fitted in one step (affine, exact, standard, Lopes & West) take what they
take.
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from methods.common.chains import ChainState
from methods.trj.flows import ConditionalSplineTransport, SplineTransport
from methods.trj.kernels import saturated_jump, transport_jump
from methods.trj.proposals import LopesWestProposal, ScaledIdentityTransport, independence_jump
from methods.trj.sampler import (
    JUMP_CHOICES,
    ChainRun,
    JumpChooser,
    bridge_model_probs,
    random_walk_factors,
    run_chains,
)
from methods.trj.transports import AffineTransport, transport_log_prob
from suite.core.method import Method, Result
from suite.core.problem import ExactTransport, Problem
from suite.core.registry import register_method
from suite.core.types import Draws, ModelProbs

if TYPE_CHECKING:
    from suite.core.context import RunContext
    from suite.core.loop import RunLoop

TRANSPORTS = ("rq", "affine", "exact", "standard", "lopes-west")
ESTIMATORS = ("bbe", "visits")
#: Auxiliary draws per point for the CTRJ density (the marginal of its saturated flow, by importance sampling).
CTRJ_DENSITY_AUX_DRAWS = 32
#: Most values (rows x auxiliary draws x dimension) the CTRJ density passes to its flow at once: the flow's
#: intermediates are tens of times its input (the unchunked 65,536 x 32 x 61 took 5.3 GB on coal-mining).
CTRJ_DENSITY_CHUNK_ELEMENTS = 2**22
#: Budgeted runs: training the spline flows ends at this fraction of the time budget (milestone ``FITTED``).
FIT_FRACTION = 0.4
FITTED = "transports_fitted"
#: Budgeted runs: a flow trains until its share of the budget is spent, its validation loss stops improving (the
#: early stopping of runs without a budget) or for max(flow_iterations, this) steps. The cap bounds memory (the
#: batch doubles every 250 steps: 16,384 rows at 2,000), and by then the learning rate has decayed to ~1e-6.
BUDGETED_FLOW_ITERATIONS = 2000
#: Budgeted runs keep at most max(num_iterations // thin, this x num_draws / num_chains) thinned iterations of
#: the chains' states (thinned further as the run goes on), from which the returned draws are spread.
KEPT_DRAWS_FACTOR = 2

_SHARED_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "num_chains": 128,
        "burn_in": 20,
        "num_iterations": 100,
        "thin": 2,
        "num_training_draws": 2000,
        "flow_iterations": 60,
        "flow_hidden": 32,
        "flow_layers": 1,
    },
    # Chains start at posterior (training) draws, so a short run already makes tens of thousands of across-model
    # proposals for the bridge estimate. The spline inverse, one conditioner pass per layer and coordinate, sets
    # the cost (0.35 s an iteration with three layers on factor analysis): one layer keeps the quick profile
    # inside its budget; the paper profile has the paper's three.
    "quick": {
        "num_chains": 256,
        "burn_in": 20,
        "num_iterations": 100,
        "thin": 1,
        "num_training_draws": 5000,
        "flow_iterations": 300,
        "flow_hidden": 64,
        "flow_layers": 1,
    },
    # TRJ App. B: three spline layers, 1,000 (per model) to 3,000 (FA) flow iterations; long chains.
    "paper": {
        "num_chains": 1024,
        "burn_in": 1000,
        "num_iterations": 20_000,
        "thin": 20,
        "num_training_draws": 100_000,
        "flow_iterations": 3000,
        "flow_hidden": 256,
        "flow_layers": 3,
    },
}


class _FitSteps:
    """The flow training steps, the first iterations of the run's loop: ``stop`` for the flows' ``fit``.

    In a budgeted run flow ``part`` of ``parts`` trained one after the other stops at the milestone at
    ``FIT_FRACTION * (part + 1) / parts`` of the budget, the last one at ``FITTED``.
    """

    def __init__(self, loop: RunLoop) -> None:
        self.loop = loop

    @property
    def steps(self) -> int:
        """Training steps so far."""
        return self.loop.iteration

    def __call__(self, part: int, parts: int) -> bool:
        self.loop.advance()
        if not self.loop.budgeted:
            return False
        name = FITTED if part == parts - 1 else f"transport_{part + 1}_of_{parts}_fitted"
        return self.loop.reached(name, self.loop.iteration, FIT_FRACTION * (part + 1) / parts)


@dataclass(frozen=True)
class _TransportRJ(Method):
    """Options shared by ``trj`` and ``ctrj``."""

    num_chains: int | None = None
    burn_in: int | None = None
    num_iterations: int | None = None
    thin: int | None = None
    num_training_draws: int | None = None
    flow_iterations: int | None = None
    #: Cap on the width of the flows' MADE conditioners (the paper: 32 x dimension).
    flow_hidden: int | None = None
    #: Spline layers per flow (the paper: 3). The inverse costs one conditioner pass per layer and coordinate.
    flow_layers: int | None = None
    within_moves: int = 1
    jumps: str = "auto"
    estimator: str = "bbe"
    #: Largest model space the method accepts (it fits and tables something per model).
    max_models: int = 256

    profiles: ClassVar[dict[str, dict[str, Any]]] = _SHARED_PROFILES

    def finalise(self, problem: Problem) -> Method:
        """Check the resolved options for sense."""
        for key in (
            "num_chains",
            "num_iterations",
            "thin",
            "num_training_draws",
            "within_moves",
            "max_models",
            "flow_hidden",
            "flow_layers",
        ):
            value = getattr(self, key)
            if value is None or value <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {value}")
        if self.burn_in is None or self.flow_iterations is None or self.burn_in < 0 or self.flow_iterations < 0:
            raise ValueError(f"{self.name}: burn_in and flow_iterations must be >= 0")
        if self.num_iterations < self.thin:
            raise ValueError(f"{self.name}: num_iterations must be at least thin")
        for key, valid in (("jumps", JUMP_CHOICES), ("estimator", ESTIMATORS)):
            if getattr(self, key) not in valid:
                raise ValueError(f"{self.name}: unknown {key} {getattr(self, key)!r}; valid: {', '.join(valid)}")
        return self

    def fit_iterations(self, context: RunContext) -> int:
        """Training steps per flow: ``flow_iterations``, or in a budgeted run the cap its budget share works under."""
        if context.budgeted and self.flow_iterations > 0:
            return max(self.flow_iterations, BUDGETED_FLOW_ITERATIONS)
        return self.flow_iterations

    def supports(self, problem: Problem) -> str | None:
        """Enumerable spaces of at most ``max_models`` models whose problem provides posterior draws."""
        k = problem.num_models
        if k is None:
            return "needs an enumerable model space (a transport per model)"
        if k > self.max_models:
            return f"{k} models: more than max_models={self.max_models} transports and bridge-estimate cells"
        if k < 2:
            return "a single model: nothing to jump between"
        if problem.stored_reference() is None and type(problem).reference_draws is Problem.reference_draws:
            return "no per-model posterior draws to learn transports from (no reference)"
        return None

    # ------------------------------------------------------------------ steps
    @abstractmethod
    def _fit(
        self, problem: Problem, train: Draws, generator: torch.Generator, context: RunContext, steps: _FitSteps
    ) -> tuple[Any, dict]:
        """The transport and its fit diagnostics (flows count their training steps in ``steps``)."""

    @abstractmethod
    def _jump(self, problem: Problem, transport: Any) -> Any:
        """The across-model proposal."""

    @abstractmethod
    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        """log q(m, theta_m) for cross-entropy."""

    refresh_auxiliaries: ClassVar[bool] = False

    def _fit_flow(
        self,
        flow_class: Any,
        problem: Problem,
        train: Draws,
        generator: torch.Generator,
        context: RunContext,
        steps: _FitSteps,
    ) -> Any:
        """Fit a spline transport (per model or conditional) to the training draws with the run's flow settings."""
        return flow_class.fit(
            problem,
            train.model_index,
            train.theta,
            iterations=self.fit_iterations(context),
            max_hidden=self.flow_hidden,
            num_layers=self.flow_layers,
            generator=generator,
            progress=False,  # the run's loop shows the steps
            stop=steps,
        )

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Learn transports from training draws, run the chains, estimate q(m)."""
        with context.loop(f"{self.name} {problem.name}") as loop:
            return self._run(problem, context, loop)

    def _run(self, problem: Problem, context: RunContext, loop: RunLoop) -> Result:
        dtype, device = context.dtype, context.device
        timer = context.timer
        generator = torch.Generator(device=device).manual_seed(context.seed)
        cpu_generator = torch.Generator().manual_seed(context.seed)
        k = int(problem.num_models)
        with timer.phase("setup"):
            train = problem.training_draws(self.num_training_draws, cpu_generator)
            if train is None:
                return Result.failed("the problem provides no training draws")
            train = Draws(train.model_index.to(device), train.theta.to(device, dtype))
            counts = torch.bincount(train.model_index, minlength=k)
        steps = _FitSteps(loop)
        with timer.phase("train"):
            transport, fit_info = self._fit(problem, train, generator, context, steps)
            fit_steps = steps.steps
            rw_chol = random_walk_factors(problem, (train.model_index, train.theta), dtype)
        with timer.phase("sample"), torch.no_grad():
            start = torch.randint(len(train), (self.num_chains,), generator=cpu_generator).to(device)
            m0, theta0 = train.model_index[start], train.theta[start]
            state = ChainState(m0, theta0, problem.log_joint(m0, theta0))
            if not bool(torch.isfinite(state.log_joint).any()):
                return Result.failed(f"target log density is non-finite at all {len(m0)} initial points")
            estimate = (counts.to(torch.float64) + 1.0) / (counts.sum() + k)
            chooser = JumpChooser(problem, self.jumps, estimate)
            chains = run_chains(
                problem,
                state,
                self._jump(problem, transport),
                chooser,
                rw_chol,
                burn_in=self.burn_in,
                iterations=self.num_iterations,
                thin=self.thin,
                within_moves=self.within_moves,
                generator=generator,
                loop=loop,
                refresh_auxiliaries=self.refresh_auxiliaries,
                estimator=self.estimator,
                kept_capacity=max(
                    self.num_iterations // self.thin, math.ceil(KEPT_DRAWS_FACTOR * context.num_draws / self.num_chains)
                ),
            )
            if chains.accept_between == 0 and chains.accept_within == 0:
                # The kept draws are the chains' burn-in end points (at the start: training draws), which would
                # score well without saying anything about this run.
                return Result.failed(
                    f"no proposal accepted in the {chains.sampled} iterations after burn-in "
                    f"(neither between- nor within-model, {chains.num_chains} chains)"
                )
            model_probs, unreached = self._model_probs(chains, self.estimator)
            log_q_m = model_probs.dense(k).clamp_min(0).log().to(device, dtype)
            log_density = self._log_density(problem, transport, log_q_m)
        loop.snapshot(lambda: model_probs)
        if context.budgeted and chains.running["iteration"][-1:] != [chains.sampled]:  # end the running estimate
            chains.running["iteration"].append(chains.sampled)
            chains.running["prob"].append(model_probs.dense(k).tolist() if k <= 64 else None)
        kept_m, kept_theta = chains.kept
        kept_theta = torch.where(problem.mask(kept_m), kept_theta, torch.zeros_like(kept_theta))
        pick = torch.linspace(0, len(kept_m) - 1, min(context.num_draws, len(kept_m)), device=device).long()
        visits = chains.visits / chains.visits.sum()
        diagnostics = {
            "accept_between": chains.accept_between,
            "accept_within": chains.accept_within,
            # Whole run, burn-in included: the suite fails a run whose chains never moved between models.
            "between_proposals": chains.between_proposed_run,
            "between_accepted": chains.between_accepted_run,
            "between_proposals_per_s": chains.proposals_per_s,
            "estimator": self.estimator,
            # Models outside the bridge graph: those visited get their visit frequency, the others probability 0.
            "models_without_bridge_estimate": unreached,
            "visit_frequencies": visits.tolist() if k <= 64 else None,
            "training_draws_per_model": counts.tolist() if k <= 64 else None,
            "running_estimate": chains.running,
            "flow_training_steps": fit_steps,
            "burn_in_iterations": chains.iterations - chains.sampled,
            "sampling_iterations": chains.sampled,
            **fit_info,
        }
        return Result(
            model_probs=model_probs,
            draws=Draws(kept_m[pick].cpu(), kept_theta[pick].cpu()),
            log_density=log_density,
            diagnostics=diagnostics,
        )

    @staticmethod
    def _model_probs(chains: ChainRun, estimator: str) -> tuple[ModelProbs, list[int]]:
        return bridge_model_probs(chains.stats, chains.visits, chains.num_chains, estimator)


@register_method("trj")
@dataclass(frozen=True)
class TRJ(_TransportRJ):
    """Transport reversible jump (TRJ paper, Algorithm 1): a transport per model, fitted to posterior draws.

    ``transport``: ``rq`` (rational-quadratic spline flows in the sigmoid sandwich of App. B; models with few
    training draws, or every model beyond ``max_flow_models``, fall back to ``affine``), ``affine`` (mean and
    Cholesky factor: the paper's "Affine NF"), ``exact`` (the problem's own exact transports, e.g. ``sas``),
    ``standard`` (the Brooks et al. 2003 independent-auxiliary proposal: shared coordinates kept, new ones
    drawn from N(0, aux_scale^2); the TRJ paper's "standard" comparison), or ``lopes-west`` (Lopes & West's
    independence proposal for factor models, TRJ sec. 4.2). q(m) is the Bartolucci bridge
    estimate from every proposal after burn-in, with jackknife standard errors over 32 groups of chains.
    """

    transport: str | None = None
    aux_scale: float = 1.0
    max_flow_models: int = 16

    # Quick: the affine transports (the paper's "Affine NF"), since ctrj already puts a spline flow on the quick
    # leaderboard within its budget; ``--option trj.transport=rq`` gives the spline flows.
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {**_SHARED_PROFILES["smoke"], "transport": "affine"},
        "quick": {**_SHARED_PROFILES["quick"], "transport": "affine"},
        "paper": {**_SHARED_PROFILES["paper"], "transport": "rq"},
    }

    def finalise(self, problem: Problem) -> Method:
        """Checks the transport too."""
        super().finalise(problem)
        if self.transport not in TRANSPORTS:
            raise ValueError(f"{self.name}: unknown transport {self.transport!r}; valid: {', '.join(TRANSPORTS)}")
        if self.aux_scale <= 0:
            raise ValueError(f"{self.name}: aux_scale must be positive")
        return self

    def supports(self, problem: Problem) -> str | None:
        """As the shared rule; ``exact`` needs a problem with exact transports, ``lopes-west`` a factor model."""
        if self.transport == "exact" and not isinstance(problem, ExactTransport):
            return "transport='exact' needs a problem with exact transport maps"
        if self.transport == "lopes-west":
            reason = LopesWestProposal.supports(problem)
            if reason:
                return f"transport='lopes-west': {reason}"
        return super().supports(problem)

    def _fit(
        self, problem: Problem, train: Draws, generator: torch.Generator, context: RunContext, steps: _FitSteps
    ) -> tuple[Any, dict]:
        kind = self.transport
        if kind == "exact":
            if not isinstance(problem, ExactTransport):
                raise ValueError(f"{problem.name} has no exact transports")
            return problem, {"transport": "exact"}
        if kind == "lopes-west":
            return LopesWestProposal.fit(problem, train.model_index, train.theta), {"transport": "lopes-west"}
        if kind == "standard":
            scale = float(self.aux_scale)
            return ScaledIdentityTransport(problem, scale), {"transport": f"standard (scale {scale})"}
        if kind == "rq" and int(problem.num_models) <= self.max_flow_models and self.flow_iterations > 0:
            transport = self._fit_flow(SplineTransport, problem, train, generator, context, steps)
            return transport, {"transport": "rq", "flow_fit": [dataclasses.asdict(r) for r in transport.records]}
        note = "affine" if kind == "affine" else f"affine (rq asked for; {problem.num_models} models > max_flow_models)"
        return AffineTransport.fit(problem, train.model_index, train.theta, shrink=True), {"transport": note}

    def _jump(self, problem: Problem, transport: Any) -> Any:
        if hasattr(transport, "sample"):  # an independence proposal (Lopes & West)
            return lambda state, to, log_ratio, gen: independence_jump(problem, state, transport, to, log_ratio, gen)
        return lambda state, to, log_ratio, gen: transport_jump(problem, state, transport, to, log_ratio, gen)

    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
            if hasattr(transport, "sample"):
                return log_q_m[model_index] + transport.log_prob(model_index, theta)
            return log_q_m[model_index] + transport_log_prob(transport, problem, model_index, theta)

        return log_density


@register_method("ctrj")
@dataclass(frozen=True)
class CTRJ(_TransportRJ):
    """Conditional transport reversible jump (TRJ paper, Algorithm 2): one conditional RQ flow over the
    saturated space, its inactive coordinates auxiliary N(0, 1) variables (refreshed by a Gibbs step before
    each jump), standardised per coordinate as in App. B.1. q(m) is the Bartolucci bridge estimate; the
    density for cross-entropy integrates the auxiliaries out by importance sampling (32 draws per point).
    """

    refresh_auxiliaries: ClassVar[bool] = True

    def _fit(
        self, problem: Problem, train: Draws, generator: torch.Generator, context: RunContext, steps: _FitSteps
    ) -> tuple[Any, dict]:
        transport = self._fit_flow(ConditionalSplineTransport, problem, train, generator, context, steps)
        fit = None if transport.record is None else dataclasses.asdict(transport.record)
        return transport, {"transport": "conditional rq", "flow_fit": fit}

    def _jump(self, problem: Problem, transport: Any) -> Any:
        return lambda state, to, log_ratio, gen: saturated_jump(problem, state, transport, to, log_ratio, gen)

    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        generator = torch.Generator(device=log_q_m.device).manual_seed(0)

        def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
            log_w = saturated_log_weights(problem, transport, model_index, theta, generator)
            return log_q_m[model_index] + torch.logsumexp(log_w, 0) - math.log(CTRJ_DENSITY_AUX_DRAWS)

        return log_density


def saturated_log_weights(
    problem: Problem,
    transport: Any,
    model_index: Tensor,
    theta: Tensor,
    generator: torch.Generator,
    max_elements: int | None = None,
) -> Tensor:
    """Importance log weights log q~(theta_m, u | m) - log nu(u), ``[CTRJ_DENSITY_AUX_DRAWS, n]``, in chunks.

    q(theta_m | m) = E_u[q~(theta_m, u | m) / nu(u)], u ~ N(0, I) on the inactive coordinates. Each auxiliary draw k
    is one ``[n, d]`` draw of ``generator``, in order, so the weights do not depend on ``max_elements``; the flow sees
    at most ``max_elements`` (rows x auxiliary draws x dimension) values at a time (whole draws while they fit, else
    row blocks of one draw); None: ``CTRJ_DENSITY_CHUNK_ELEMENTS``.
    """
    n, d = theta.shape
    draws = CTRJ_DENSITY_AUX_DRAWS
    cap = CTRJ_DENSITY_CHUNK_ELEMENTS if max_elements is None else max_elements
    rows = max(1, cap // max(d, 1))
    per_chunk = max(1, min(draws, rows // max(n, 1)))  # auxiliary draws evaluated together
    rows = min(rows, n)
    active = problem.mask(model_index)
    log_w = torch.empty(draws, n, dtype=theta.dtype, device=theta.device)
    for first in range(0, draws, per_chunk):
        last = min(draws, first + per_chunk)
        u_all = torch.stack(
            [torch.randn(n, d, generator=generator, dtype=theta.dtype, device=theta.device) for _ in range(first, last)]
        )
        for start in range(0, n, rows):
            block = slice(start, start + rows)
            u = u_all[:, block]
            on = active[block].expand_as(u)
            xi = torch.where(on, theta[block].expand_as(u), u).reshape(-1, d)
            m = model_index[block].repeat(last - first)
            log_nu = torch.where(on, 0.0, -0.5 * u * u - 0.5 * math.log(2 * math.pi)).sum(-1)
            log_w[first:last, block] = transport.log_prob_saturated(m, xi).view_as(log_nu) - log_nu
    return log_w
