"""Methods ``trj`` (a transport per model) and ``ctrj`` (one conditional transport), TRJ paper sec. 3-5.

Both learn their transports from per-model posterior draws, as in the paper: the problem's
``training_draws``, which never overlap the gold-standard draws the suite scores methods on. They start
their chains at training draws, run the batched sampler of :mod:`methods.trj.sampler`, and estimate the
model probabilities with the Bartolucci bridge estimator from every across-model proposal after burn-in
(visit frequencies with ``estimator="visits"``). Their density for cross-entropy is
log q(m) + log q_m(theta_m), q_m the density the transport pulls back from N(0, I).
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from methods.rjmcmc.kernels import ChainState
from methods.trj.kernels import saturated_jump, transport_jump
from methods.trj.sampler import JUMP_CHOICES, ChainRun, JumpChooser, random_walk_factors, run_chains
from methods.trj.transports import AffineTransport, transport_log_prob
from suite.harness import PhaseTimer
from suite.method import Budget, Method, Result
from suite.problem import ExactTransport, Problem
from suite.registry import register_method
from suite.types import Draws, ModelProbs

TRANSPORTS = ("rq", "affine", "exact", "standard", "lopes-west")
ESTIMATORS = ("bbe", "visits")
#: Auxiliary draws per point for the CTRJ density (the marginal of its saturated flow, by importance sampling).
CTRJ_DENSITY_AUX_DRAWS = 32

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


@dataclass
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
    dtype: str = "float64"
    progress: bool = True

    profiles: ClassVar[dict[str, dict[str, Any]]] = _SHARED_PROFILES
    default_seeds: ClassVar[dict[str, int]] = {"quick": 1}

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Profile presets under the constructor's values, checked for sense."""
        s = super().settings(problem, budget)
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
            if int(s[key]) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {s[key]}")
        if int(s["burn_in"]) < 0 or int(s["flow_iterations"]) < 0:
            raise ValueError(f"{self.name}: burn_in and flow_iterations must be >= 0")
        if int(s["num_iterations"]) < int(s["thin"]):
            raise ValueError(f"{self.name}: num_iterations must be at least thin")
        for key, valid in (("jumps", JUMP_CHOICES), ("estimator", ESTIMATORS)):
            if s[key] not in valid:
                raise ValueError(f"{self.name}: unknown {key} {s[key]!r}; valid: {', '.join(valid)}")
        return s

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
    def _fit(self, problem: Problem, train: Draws, s: dict[str, Any], generator: torch.Generator) -> tuple[Any, dict]:
        """The transport and its fit diagnostics."""

    @abstractmethod
    def _jump(self, problem: Problem, transport: Any) -> Any:
        """The across-model proposal."""

    @abstractmethod
    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        """log q(m, theta_m) for cross-entropy."""

    refresh_auxiliaries: ClassVar[bool] = False

    def run(self, problem: Problem, budget: Budget, seed: int, device: torch.device) -> Result:
        """Learn transports from training draws, run the chains, estimate q(m)."""
        s = self.settings(problem, budget)
        dtype = self.torch_dtype
        timer = PhaseTimer(device)
        generator = torch.Generator(device=device).manual_seed(seed)
        cpu_generator = torch.Generator().manual_seed(seed)
        k = int(problem.num_models)
        with timer.phase("setup"):
            train = problem.training_draws(int(s["num_training_draws"]), cpu_generator)
            if train is None:
                return Result.failed("the problem provides no training draws", device=str(device), dtype=self.dtype)
            train = Draws(train.model_index.to(device), train.theta.to(device, dtype))
            counts = torch.bincount(train.model_index, minlength=k)
        with timer.phase("train"):
            transport, fit_info = self._fit(problem, train, s, generator)
            rw_chol = random_walk_factors(problem, (train.model_index, train.theta), dtype)
        with timer.phase("sample"), torch.no_grad():
            start = torch.randint(len(train), (int(s["num_chains"]),), generator=cpu_generator).to(device)
            m0, theta0 = train.model_index[start], train.theta[start]
            state = ChainState(m0, theta0, problem.log_joint(m0, theta0))
            if not bool(torch.isfinite(state.log_joint).any()):
                return Result.failed(
                    f"target log density is non-finite at all {len(m0)} initial points",
                    timings=dict(timer.timings),
                    device=str(device),
                    dtype=self.dtype,
                )
            estimate = (counts.to(torch.float64) + 1.0) / (counts.sum() + k)
            chooser = JumpChooser(problem, s["jumps"], estimate)
            chains = run_chains(
                problem,
                state,
                self._jump(problem, transport),
                chooser,
                rw_chol,
                burn_in=int(s["burn_in"]),
                iterations=int(s["num_iterations"]),
                thin=int(s["thin"]),
                within_moves=int(s["within_moves"]),
                generator=generator,
                progress=bool(s["progress"]),
                refresh_auxiliaries=self.refresh_auxiliaries,
            )
            if chains.accept_between == 0 and chains.accept_within == 0:
                # The kept draws are the chains' burn-in end points (at the start: training draws), which would
                # score well without saying anything about this run.
                return Result.failed(
                    f"no proposal accepted in the {int(s['num_iterations'])} iterations after burn-in "
                    f"(neither between- nor within-model, {chains.num_chains} chains)",
                    timings=dict(timer.timings),
                    device=str(device),
                    dtype=self.dtype,
                )
            model_probs, unreached = self._model_probs(chains, s["estimator"])
            log_q_m = model_probs.dense(k).clamp_min(0).log().to(device, dtype)
            log_density = self._log_density(problem, transport, log_q_m)
        kept_m, kept_theta = chains.kept
        kept_theta = torch.where(problem.mask(kept_m), kept_theta, torch.zeros_like(kept_theta))
        pick = torch.linspace(0, len(kept_m) - 1, min(budget.num_draws, len(kept_m)), device=device).long()
        visits = chains.visits / chains.visits.sum()
        diagnostics = {
            "accept_between": chains.accept_between,
            "accept_within": chains.accept_within,
            "between_proposals_per_s": chains.proposals_per_s,
            "estimator": s["estimator"],
            # Models outside the bridge graph: those visited get their visit frequency, the others probability 0.
            "models_without_bridge_estimate": unreached,
            "visit_frequencies": visits.tolist() if k <= 64 else None,
            "training_draws_per_model": counts.tolist() if k <= 64 else None,
            "running_estimate": chains.running,
            **fit_info,
        }
        return Result(
            model_probs=model_probs,
            draws=Draws(kept_m[pick].cpu(), kept_theta[pick].cpu()),
            log_density=log_density,
            diagnostics=diagnostics,
            timings=dict(timer.timings),
            device=str(device),
            dtype=self.dtype,
        )

    @staticmethod
    def _model_probs(chains: ChainRun, estimator: str) -> tuple[ModelProbs, list[int]]:
        if estimator == "visits":
            return ModelProbs.from_dense(chains.visits / chains.visits.sum()), []
        probs, se, reached = chains.stats.estimate()
        # Models the chains visited but no proposed pair links to the rest (their acceptances all underflow, or a
        # chain started there and never left): their visit frequency, the rest of the bridge estimate scaled down,
        # so the method's density is positive wherever its own draws are. The record lists these models.
        visits = chains.visits / chains.visits.sum()
        fallback = ~reached & (visits > 0)
        if bool(fallback.any()):
            num_chains = float(chains.num_chains)
            probs = torch.where(fallback, visits, probs * (1 - visits[fallback].sum()))
            se = torch.where(fallback, (visits * (1 - visits) / num_chains).sqrt(), se * (1 - visits[fallback].sum()))
        return ModelProbs.from_dense(probs, se), (~reached).nonzero().flatten().tolist()


@register_method("trj")
@dataclass
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

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Checks the transport too."""
        s = super().settings(problem, budget)
        if s["transport"] not in TRANSPORTS:
            raise ValueError(f"{self.name}: unknown transport {s['transport']!r}; valid: {', '.join(TRANSPORTS)}")
        if s["aux_scale"] <= 0:
            raise ValueError(f"{self.name}: aux_scale must be positive")
        return s

    def supports(self, problem: Problem) -> str | None:
        """As the shared rule; ``exact`` needs a problem with exact transports, ``lopes-west`` a factor model."""
        if self.transport == "exact" and not isinstance(problem, ExactTransport):
            return "transport='exact' needs a problem with exact transport maps"
        if self.transport == "lopes-west":
            from methods.trj.proposals import LopesWestProposal

            reason = LopesWestProposal.supports(problem)
            if reason:
                return f"transport='lopes-west': {reason}"
        return super().supports(problem)

    def _fit(self, problem: Problem, train: Draws, s: dict[str, Any], generator: torch.Generator) -> tuple[Any, dict]:
        kind = s["transport"]
        if kind == "exact":
            if not isinstance(problem, ExactTransport):
                raise ValueError(f"{problem.name} has no exact transports")
            return problem, {"transport": "exact"}
        if kind == "lopes-west":
            from methods.trj.proposals import LopesWestProposal

            return LopesWestProposal.fit(problem, train.model_index, train.theta), {"transport": "lopes-west"}
        if kind == "standard":
            from methods.trj.proposals import ScaledIdentityTransport

            scale = float(s["aux_scale"])
            return ScaledIdentityTransport(problem, scale), {"transport": f"standard (scale {scale})"}
        if kind == "rq" and int(problem.num_models) <= int(s["max_flow_models"]) and int(s["flow_iterations"]) > 0:
            from methods.trj.flows import SplineTransport

            transport = _fit_flow(SplineTransport, problem, train, s, generator)
            return transport, {"transport": "rq", "flow_fit": [dataclasses.asdict(r) for r in transport.records]}
        note = "affine" if kind == "affine" else f"affine (rq asked for; {problem.num_models} models > max_flow_models)"
        return AffineTransport.fit(problem, train.model_index, train.theta, shrink=True), {"transport": note}

    def _jump(self, problem: Problem, transport: Any) -> Any:
        if hasattr(transport, "sample"):  # an independence proposal (Lopes & West)
            from methods.trj.proposals import independence_jump

            return lambda state, to, log_ratio, gen: independence_jump(problem, state, transport, to, log_ratio, gen)
        return lambda state, to, log_ratio, gen: transport_jump(problem, state, transport, to, log_ratio, gen)

    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
            if hasattr(transport, "sample"):
                return log_q_m[model_index] + transport.log_prob(model_index, theta)
            return log_q_m[model_index] + transport_log_prob(transport, problem, model_index, theta)

        return log_density


@register_method("ctrj")
@dataclass
class CTRJ(_TransportRJ):
    """Conditional transport reversible jump (TRJ paper, Algorithm 2): one conditional RQ flow over the
    saturated space, its inactive coordinates auxiliary N(0, 1) variables (refreshed by a Gibbs step before
    each jump), standardised per coordinate as in App. B.1. q(m) is the Bartolucci bridge estimate; the
    density for cross-entropy integrates the auxiliaries out by importance sampling (32 draws per point).
    """

    refresh_auxiliaries: ClassVar[bool] = True

    def _fit(self, problem: Problem, train: Draws, s: dict[str, Any], generator: torch.Generator) -> tuple[Any, dict]:
        from methods.trj.flows import ConditionalSplineTransport

        transport = _fit_flow(ConditionalSplineTransport, problem, train, s, generator)
        fit = None if transport.record is None else dataclasses.asdict(transport.record)
        return transport, {"transport": "conditional rq", "flow_fit": fit}

    def _jump(self, problem: Problem, transport: Any) -> Any:
        return lambda state, to, log_ratio, gen: saturated_jump(problem, state, transport, to, log_ratio, gen)

    def _log_density(self, problem: Problem, transport: Any, log_q_m: Tensor) -> Any:
        generator = torch.Generator(device=log_q_m.device).manual_seed(0)

        def log_density(model_index: Tensor, theta: Tensor) -> Tensor:
            # q(theta_m | m) = E_u[q~(theta_m, u | m) / nu(u)], u ~ N(0, I) on the inactive coordinates.
            n, d = theta.shape
            active = problem.mask(model_index).repeat(CTRJ_DENSITY_AUX_DRAWS, 1)
            u = torch.randn(CTRJ_DENSITY_AUX_DRAWS * n, d, generator=generator, dtype=theta.dtype, device=theta.device)
            xi = torch.where(active, theta.repeat(CTRJ_DENSITY_AUX_DRAWS, 1), u)
            m = model_index.repeat(CTRJ_DENSITY_AUX_DRAWS)
            log_nu = torch.where(active, 0.0, -0.5 * u * u - 0.5 * math.log(2 * math.pi)).sum(-1)
            log_w = (transport.log_prob_saturated(m, xi) - log_nu).view(CTRJ_DENSITY_AUX_DRAWS, n)
            return log_q_m[model_index] + torch.logsumexp(log_w, 0) - math.log(CTRJ_DENSITY_AUX_DRAWS)

        return log_density


def _fit_flow(flow_class: Any, problem: Problem, train: Draws, s: dict[str, Any], generator: torch.Generator) -> Any:
    """Fit a spline transport (per model or conditional) to the training draws with the run's flow settings."""
    return flow_class.fit(
        problem,
        train.model_index,
        train.theta,
        iterations=int(s["flow_iterations"]),
        max_hidden=int(s["flow_hidden"]),
        num_layers=int(s["flow_layers"]),
        generator=generator,
        progress=bool(s["progress"]),
    )
