"""The batched transport reversible-jump sampler shared by ``trj`` and ``ctrj``.

C chains advance together. Each iteration is one across-model proposal (a jump
through the transports, or an independence proposal) followed by
``within_moves`` Gaussian random-walk Metropolis moves whose covariance is the
training draws' covariance of the chain's model scaled by 2.38^2 / d. Every
across-model proposal's acceptance probability is accumulated per ordered pair
of models and per group of chains, so the Bartolucci bridge estimate of the
model probabilities (:mod:`methods.trj.bbe`) and its jackknife standard error
over chain groups come out of the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm.auto import tqdm

from methods.common.moments import grouped_moments, safe_cholesky, shrunk_covariances
from methods.rjmcmc.kernels import ChainState, random_walk_move
from methods.trj.bbe import PairStatistics
from methods.trj.kernels import JumpRecord
from suite.problem import Problem
from suite.tensor_ops import rows

#: (state, proposed models, log jump ratios, generator) -> (new state, accept flags, proposal record).
JumpFn = Callable[[ChainState, Tensor, Tensor, torch.Generator], tuple[ChainState, Tensor, JumpRecord]]
JUMP_CHOICES = ("auto", "uniform", "estimate", "neighbour")
#: ``jumps="auto"``: uniform over the other models up to this many models, the model space's local jump beyond
#: (with uniform jumps over 128 models each pair gets too few proposals for the bridge estimate).
AUTO_UNIFORM_MAX_MODELS = 16
#: Chains are split into this many groups for jackknife standard errors of the bridge estimate.
NUM_CHAIN_GROUPS = 32
#: Points of the running estimate (TRJ Figs. 3-4) stored per run.
RUNNING_POINTS = 25


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
    progress: bool,
    refresh_auxiliaries: bool = False,
) -> ChainRun:
    """Run the chains; proposals after burn-in feed the bridge statistics and visit counts."""
    num_chains = state.model_index.numel()
    device, dtype = state.theta.device, state.theta.dtype
    k = int(problem.num_models)
    groups = min(NUM_CHAIN_GROUPS, num_chains)
    chain_group = torch.arange(num_chains, device=device) % groups
    stats = GroupedPairStatistics.zeros(groups, k, device)
    visits = torch.zeros(k, dtype=torch.float64, device=device)
    ones = torch.ones(num_chains, dtype=torch.float64, device=device)
    kept_m = torch.zeros(iterations // thin, num_chains, dtype=torch.int64, device=device)
    kept_theta = torch.zeros(iterations // thin, num_chains, problem.dim_max, dtype=dtype, device=device)
    accepted = torch.zeros(2, dtype=torch.float64, device=device)
    proposed_between = torch.zeros((), dtype=torch.float64, device=device)
    checkpoints = set(torch.linspace(1, iterations, min(RUNNING_POINTS, iterations)).round().long().tolist())
    running: dict[str, list] = {"iteration": [], "prob": []}
    bar = tqdm(
        total=burn_in + iterations,
        desc=f"trj {problem.name}",
        leave=False,
        mininterval=1.0,
        disable=not progress or None,
    )
    sampling_seconds = 0.0
    for t in range(burn_in + iterations):
        sampling = t >= burn_in
        start = time.perf_counter()
        if refresh_auxiliaries:  # Gibbs update of the auxiliary variables of the saturated target (CTRJ)
            fresh = torch.randn(state.theta.shape, generator=generator, dtype=dtype, device=device)
            state = state._replace(theta=torch.where(problem.mask(state.model_index), state.theta, fresh))
        model_to, log_ratio = choose(state.model_index, generator)
        state, accept, record = jump(state, model_to, log_ratio, generator)
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
            s = t - burn_in + 1
            if s % thin == 0:
                kept_m[s // thin - 1], kept_theta[s // thin - 1] = state.model_index, state.theta
            if s in checkpoints:
                running["iteration"].append(s)
                running["prob"].append(stats.total().graph_model_probs()[0].tolist() if k <= 64 else None)
        bar.update(1)
    bar.close()
    n_between = float(proposed_between)
    return ChainRun(
        kept=(kept_m.flatten(), kept_theta.flatten(0, 1)),
        num_chains=num_chains,
        stats=stats,
        visits=visits,
        accept_between=float(accepted[0]) / max(n_between, 1.0),
        accept_within=float(accepted[1]) / max(iterations * within_moves * num_chains, 1),
        proposals_per_s=n_between / sampling_seconds if sampling_seconds > 0 else math.nan,
        running=running,
    )
