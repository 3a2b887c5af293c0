"""The batched transport reversible-jump sampler shared by ``trj`` and ``ctrj``.

C chains advance together. Each iteration is one across-model proposal (a jump
through the transports, or an independence proposal) followed by
``within_moves`` Gaussian random-walk Metropolis moves whose covariance is the
training draws' covariance of the chain's model scaled by 2.38^2 / d. Every
across-model proposal's acceptance probability is accumulated per ordered pair
of models and per group of chains, so the Bartolucci bridge estimate of the
model probabilities (:mod:`methods.trj.bbe`) and its jackknife standard error
over chain groups come out of the run.

The sampler reports to the run context (:mod:`suite.core.context`): its snapshots are the running bridge estimate
(:func:`bridge_model_probs` on the statistics so far, without the jackknife), and in a budgeted run burn-in lasts
until the ``burn_in`` milestone and sampling until the budget is spent (the kept draws then live in a bounded
buffer that drops every second row and doubles the thinning when full).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from methods.common.chains import ChainState, random_walk_move
from methods.common.moments import grouped_moments, safe_cholesky, shrunk_covariances
from methods.trj.bbe import PairStatistics
from methods.trj.kernels import JumpRecord
from suite.core.context import BudgetTooSmall
from suite.core.problem import Problem
from suite.core.tensor_ops import rows
from suite.core.types import ModelProbs

if TYPE_CHECKING:
    from suite.core.context import RunContext
    from suite.core.loop import RunLoop

#: (state, proposed models, log jump ratios, generator) -> (new state, accept flags, proposal record).
JumpFn = Callable[[ChainState, Tensor, Tensor, torch.Generator], tuple[ChainState, Tensor, JumpRecord]]
JUMP_CHOICES = ("auto", "uniform", "estimate", "neighbour")
#: ``jumps="auto"``: uniform over the other models up to this many models, the model space's local jump beyond
#: (with uniform jumps over 128 models each pair gets too few proposals for the bridge estimate).
AUTO_UNIFORM_MAX_MODELS = 16
#: Chains are split into this many groups for jackknife standard errors of the bridge estimate.
NUM_CHAIN_GROUPS = 32
#: Points of the running estimate (TRJ Figs. 3-4) stored per run (runs without a time budget; budgeted runs store
#: the estimate at each of their snapshots instead).
RUNNING_POINTS = 25
#: Milestone that ends burn-in in a budgeted run (see :func:`run_chains`).
BURN_IN = "burn_in"


class JumpChooser:
    """Draws each chain's proposed model and the log ratio log j_m'(m) - log j_m(m').

    ``auto``: ``uniform`` for at most 16 models, else ``neighbour``;
    ``uniform``: every other model with equal probability (never the current one);
    ``estimate``: j_m(m') = p_hat(m') for a given model-probability estimate (m' may equal m: then the chain
    only makes its within-model moves, as in TRJ Algorithm 1); ``neighbour``: the model space's own local
    jump (``propose_jump``: e.g. one bit flip).
    """

    def __init__(self, problem: Problem, kind: str, estimate: Tensor | None = None) -> None:
        if kind not in JUMP_CHOICES:
            raise ValueError(f"unknown jumps {kind!r}; valid: {', '.join(JUMP_CHOICES)}")
        if kind == "estimate" and estimate is None:
            raise ValueError("jumps='estimate' needs a model-probability estimate")
        self.num_models = int(problem.num_models)
        if kind == "auto":
            kind = "uniform" if self.num_models <= AUTO_UNIFORM_MAX_MODELS else "neighbour"
        self.problem, self.kind = problem, kind
        self.log_probs = None if estimate is None else estimate.to(torch.float64).clamp_min(1e-300).log()

    def __call__(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(proposed models [C], log jump ratios [C] in float64)."""
        if self.kind == "neighbour":
            model_to, log_ratio = self.problem.model_space.propose_jump(model_index, generator)
            return model_to, log_ratio.to(torch.float64)
        if self.kind == "uniform":
            shift = torch.randint(1, self.num_models, model_index.shape, generator=generator, device=model_index.device)
            model_to = (model_index + shift) % self.num_models
            return model_to, torch.zeros(model_index.shape, dtype=torch.float64, device=model_index.device)
        log_probs = self.log_probs.to(model_index.device)
        model_to = torch.multinomial(log_probs.exp(), model_index.numel(), replacement=True, generator=generator)
        return model_to, log_probs[model_index] - log_probs[model_to]


@dataclass
class GroupedPairStatistics:
    """:class:`PairStatistics` kept per group of chains (``[G, K, K]``), for jackknife standard errors."""

    stats: PairStatistics  # tensors of shape [G * K, K]
    num_groups: int

    @classmethod
    def zeros(cls, num_groups: int, num_models: int, device: torch.device) -> GroupedPairStatistics:
        """Empty statistics."""
        shape = (num_groups * num_models, num_models)
        tensors = [torch.zeros(shape, dtype=torch.float64, device=device) for _ in range(4)]
        return cls(PairStatistics(*tensors), num_groups)

    def add(self, record: JumpRecord, group: Tensor) -> None:
        """Accumulate one proposal per chain into its group's statistics."""
        k = self.stats.count.shape[1]
        # Offsetting the "from" model by group * K puts each group in its own block of K rows.
        self.stats.add(record._replace(model_from=record.model_from + group * k))

    def _per_group(self) -> list[Tensor]:
        k = self.stats.count.shape[1]
        return [
            t.view(self.num_groups, k, k)
            for t in (self.stats.count, self.stats.alpha_sum, self.stats.alpha_sq_sum, self.stats.log_jump_ratio_sum)
        ]

    def total(self, exclude: int | None = None) -> PairStatistics:
        """Statistics summed over groups (all, or all but ``exclude``)."""
        parts = self._per_group()
        if exclude is None:
            return PairStatistics(*(p.sum(0) for p in parts))
        return PairStatistics(*(p.sum(0) - p[exclude] for p in parts))

    def estimate(self, jackknife: bool = True) -> tuple[Tensor, Tensor | None, Tensor]:
        """Bridge estimate of the model probabilities, its jackknife standard error over groups, models reached."""
        probs, _, reached = self.total().graph_model_probs()
        if not jackknife or self.num_groups < 2:
            return probs, None, reached
        leave_out = torch.stack([self.total(exclude=g).graph_model_probs()[0] for g in range(self.num_groups)])
        g = self.num_groups
        se = torch.sqrt((g - 1) / g * ((leave_out - leave_out.mean(0)) ** 2).sum(0))
        return probs, se, reached


def random_walk_factors(problem: Problem, train: tuple[Tensor, Tensor], dtype: torch.dtype) -> Tensor:
    """Per-model Cholesky factors ``[K, D, D]`` of 2.38^2 / d times the training draws' (shrunk) covariance."""
    model_index, theta = train
    num_models = int(problem.num_models)
    count, _, cov = grouped_moments(model_index, theta.to(dtype), problem.mask(model_index), num_models)
    cov = shrunk_covariances(count, cov, prior_weight=float(problem.dim_max + 2))
    all_models = problem.model_space.all_indices(theta.device)
    dims = problem.model_dim(all_models).clamp_min(1).to(dtype)
    return safe_cholesky(cov, problem.mask(all_models)) * (2.38 / dims.sqrt())[:, None, None]


@dataclass
class ChainRun:
    """What a sampler run returns."""

    kept: tuple[Tensor, Tensor]  # thinned (model_index [N], theta [N, D])
    num_chains: int
    stats: GroupedPairStatistics
    visits: Tensor  # [K] visit counts after burn-in
    accept_between: float
    accept_within: float
    proposals_per_s: float
    running: dict[str, list]
    iterations: int = 0  # sampler iterations run, burn-in included
    sampled: int = 0  # of which after burn-in
    #: Across-model proposals to another model and those accepted over the whole run, burn-in included (a run whose
    #: chains never moved between models reports 0 accepted: its estimate is its starting distribution).
    between_proposed_run: int = 0
    between_accepted_run: int = 0


def bridge_model_probs(
    stats: GroupedPairStatistics, visits: Tensor, num_chains: int, estimator: str, jackknife: bool = True
) -> tuple[ModelProbs, list[int]]:
    """The model probabilities of a run's statistics and visit counts, and the models outside the bridge graph.

    ``estimator="visits"``: visit frequencies. ``"bbe"``: the bridge estimate (with jackknife standard errors
    over chain groups unless ``jackknife=False``; the probabilities are the same either way).
    """
    if estimator == "visits":
        return ModelProbs.from_dense(visits / visits.sum()), []
    probs, se, reached = stats.estimate(jackknife)
    # Models the chains visited but no proposed pair links to the rest (their acceptances all underflow, or a
    # chain started there and never left): their visit frequency, the rest of the bridge estimate scaled down,
    # so the method's density is positive wherever its own draws are. The record lists these models.
    frequencies = visits / visits.sum()
    fallback = ~reached & (frequencies > 0)
    if bool(fallback.any()):
        scale = 1 - frequencies[fallback].sum()
        probs = torch.where(fallback, frequencies, probs * scale)
        if se is not None:
            se = torch.where(fallback, (frequencies * (1 - frequencies) / float(num_chains)).sqrt(), se * scale)
    return ModelProbs.from_dense(probs, se), (~reached).nonzero().flatten().tolist()


class KeptDraws:
    """The chains' states every ``thin`` iterations after burn-in, in ``capacity`` rows of ``[C]`` / ``[C, D]``.

    A run of known length gets the rows it needs. In a run of unknown length (a time budget) a full buffer keeps
    every second row and doubles the thinning, so its rows stay evenly spaced over the whole run.
    """

    def __init__(self, capacity: int, thin: int, like: ChainState) -> None:
        self.thin, self.rows = thin, 0
        self.model_index = torch.zeros(capacity, *like.model_index.shape, dtype=torch.int64, device=like.theta.device)
        self.theta = torch.zeros(capacity, *like.theta.shape, dtype=like.theta.dtype, device=like.theta.device)

    def offer(self, sampled: int, state: ChainState) -> None:
        """Keep ``state``, reached after ``sampled`` iterations after burn-in, if the thinning says so."""
        if sampled % self.thin:
            return
        if self.rows == self.model_index.shape[0]:  # full: keep rows 1, 3, 5, ... (iterations 2 thin, 4 thin, ...)
            half = self.rows // 2
            self.model_index[:half] = self.model_index[1 : 2 * half : 2].clone()
            self.theta[:half] = self.theta[1 : 2 * half : 2].clone()
            self.rows, self.thin = half, 2 * self.thin
            if sampled % self.thin:
                return
        self.model_index[self.rows], self.theta[self.rows] = state.model_index, state.theta
        self.rows += 1

    def flat(self) -> tuple[Tensor, Tensor]:
        """(model_index [N], theta [N, D]), iteration-major."""
        return self.model_index[: self.rows].flatten(), self.theta[: self.rows].flatten(0, 1)


def _fraction_spent(context: RunContext) -> float:
    """The fraction of the time budget spent so far (0 when replaying without one: replays ignore fractions)."""
    if context.time_budget_s is None:
        return 0.0
    return min(1.0, max(0.0, 1.0 - context.remaining_s() / context.time_budget_s))


def run_chains(
    problem: Problem,
    state: ChainState,
    jump: JumpFn,
    choose: JumpChooser,
    rw_chol: Tensor,
    *,
    burn_in: int,
    iterations: int,
    thin: int,
    within_moves: int,
    generator: torch.Generator,
    loop: RunLoop,
    refresh_auxiliaries: bool = False,
    estimator: str = "bbe",
    kept_capacity: int | None = None,
) -> ChainRun:
    """Run the chains; proposals after burn-in feed the bridge statistics and visit counts.

    The chains run in the run's ``loop``, whose iterations so far (flow training steps) the sampler's own
    continue; it takes snapshots of the running estimate (``estimator``, see :func:`bridge_model_probs`).
    Without a time budget the run makes ``burn_in`` + ``iterations`` iterations. With one it burns in until the
    ``burn_in`` milestone, which falls after the preset's share ``burn_in / (burn_in + iterations)`` of the
    budget left when sampling starts, then samples until the budget is spent, keeping at most ``kept_capacity``
    thinned rows (default ``iterations // thin``); it raises :class:`BudgetTooSmall` when the budget runs out
    before the first iteration after burn-in.
    """
    num_chains = state.model_index.numel()
    device, dtype = state.theta.device, state.theta.dtype
    k = int(problem.num_models)
    groups = min(NUM_CHAIN_GROUPS, num_chains)
    chain_group = torch.arange(num_chains, device=device) % groups
    stats = GroupedPairStatistics.zeros(groups, k, device)
    visits = torch.zeros(k, dtype=torch.float64, device=device)
    ones = torch.ones(num_chains, dtype=torch.float64, device=device)
    budgeted = loop.budgeted
    kept = KeptDraws(
        kept_capacity if budgeted and kept_capacity is not None else max(iterations // thin, 1), thin, state
    )
    accepted = torch.zeros(2, dtype=torch.float64, device=device)
    proposed_between = torch.zeros((), dtype=torch.float64, device=device)
    between_run = torch.zeros(2, dtype=torch.int64, device=device)  # proposed to another model, accepted: whole run
    if budgeted:  # the running estimate is stored at the snapshots instead
        checkpoints: set[int] = set()
        share = burn_in / (burn_in + iterations) if burn_in + iterations > 0 else 0.0
        spent = _fraction_spent(loop.context)
        burn_in_fraction = min(1.0, max(spent + share * (1 - spent), 1e-9))
    else:
        checkpoints = set(torch.linspace(1, iterations, min(RUNNING_POINTS, iterations)).round().long().tolist())
        burn_in_fraction = 1.0  # unused: without a budget burn-in ends after its preset length
    first_iteration = loop.iteration
    loop.plan(first_iteration + burn_in + iterations)
    running: dict[str, list] = {"iteration": [], "prob": []}
    sampled = 0

    def running_estimate() -> ModelProbs | None:
        """The estimate the run would return now (None during burn-in); in budgeted runs also stored as running."""
        if sampled == 0:
            return None
        probs = bridge_model_probs(stats, visits, num_chains, estimator, jackknife=False)[0]
        if budgeted:
            running["iteration"].append(sampled)
            running["prob"].append(probs.dense(k).tolist() if k <= 64 else None)
        return probs

    sampling_seconds = 0.0
    while not loop.finished():
        sampling = sampled > 0 or loop.reached(BURN_IN, first_iteration + burn_in, burn_in_fraction)
        start = time.perf_counter()
        if refresh_auxiliaries:  # Gibbs update of the auxiliary variables of the saturated target (CTRJ)
            fresh = torch.randn(state.theta.shape, generator=generator, dtype=dtype, device=device)
            state = state._replace(theta=torch.where(problem.mask(state.model_index), state.theta, fresh))
        model_to, log_ratio = choose(state.model_index, generator)
        state, accept, record = jump(state, model_to, log_ratio, generator)
        between_run[0] += (record.model_from != record.model_to).sum()
        between_run[1] += accept.sum()
        for _ in range(within_moves):
            chol = rows(rw_chol, state.model_index)
            state, accept_rw = random_walk_move(problem, state, chol, generator)
            if sampling:
                accepted[1] += accept_rw.sum()
        if sampling:
            sampling_seconds += time.perf_counter() - start
            stats.add(record, chain_group)
            moved = record.model_from != record.model_to
            proposed_between += moved.sum()
            accepted[0] += accept.sum()
            visits.index_add_(0, state.model_index, ones)
            sampled += 1
            kept.offer(sampled, state)
            if sampled in checkpoints:
                running["iteration"].append(sampled)
                running["prob"].append(stats.total().graph_model_probs()[0].tolist() if k <= 64 else None)
        loop.advance(estimate=running_estimate)
    t = loop.iteration - first_iteration
    if sampled == 0:
        raise BudgetTooSmall(f"the budget ran out after {t} sampler iterations, before any after burn-in")
    n_between = float(proposed_between)
    return ChainRun(
        kept=kept.flat(),
        num_chains=num_chains,
        stats=stats,
        visits=visits,
        accept_between=float(accepted[0]) / max(n_between, 1.0),
        accept_within=float(accepted[1]) / max(sampled * within_moves * num_chains, 1),
        proposals_per_s=n_between / sampling_seconds if sampling_seconds > 0 else math.nan,
        running=running,
        iterations=t,
        sampled=sampled,
        between_proposed_run=int(between_run[0]),
        between_accepted_run=int(between_run[1]),
    )
