"""Generic vectorised RJMCMC baseline: works on any registered problem through the Problem interface."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor

from methods.common.chains import ChainState, random_walk_move
from methods.common.moments import (
    grouped_diagonal_moments,
    grouped_moments,
    safe_cholesky,
    shrink_to_pooled,
    shrunk_covariances,
)
from methods.common.sample_density import fit_gaussian_per_model
from methods.rjmcmc.kernels import between_model_move, init_state
from suite.core.context import STOP, BudgetTooSmall, RunContext
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.tensor_ops import row_sum, rows
from suite.core.types import Draws, ModelProbs

#: Chains are split into this many groups; the spread of the groups' visit
#: frequencies gives the Monte Carlo standard error of the model probabilities.
NUM_CHAIN_GROUPS = 32
#: Dense visit counting (every iteration) when groups x models stays below this.
MAX_DENSE_COUNTS = 2**22
#: Iterations per point of the acceptance traces.
TRACE_BLOCK = 50
MATCHINGS = ("standardised", "identity", "auto")
#: Per adaptation step, the weight that ``matching="auto"``'s acceptance counts keep of their past.
TRIAL_MEMORY = 0.8
#: Largest model space whose jump standardisation is kept per model (a [models, 2 D + 1] table).
MAX_JUMP_TABLE_MODELS = 2**18
#: Kept parameter values (rows x chains x D) a time-budgeted run holds at most; beyond, its thinning doubles.
MAX_KEPT_VALUES = 2**24
#: Rows of kept draws a time-budgeted run allocates first (the buffer doubles as it fills).
FIRST_KEPT_ROWS = 64


@register_method("rjmcmc-baseline")
@dataclass(frozen=True)
class RJMCMCBaseline(Method):
    """Vectorised RJMCMC: independent-auxiliary jumps, adaptive random-walk Metropolis within models.

    Each iteration makes one between-model move (m' from the model space's
    jump distribution; independent auxiliary variables, Brooks et al. 2003)
    followed by ``within_moves`` random-walk Metropolis moves on the active
    coordinates. With probability ``global_jumps`` (default 0.1) a chain's m'
    is instead drawn uniformly from the other models: a state-independent
    mixture of two pi-reversible kernels (methods/rjmcmc/kernels.py), which
    lets chains cross valleys that neighbour jumps cross rarely (lynx-ar: AR
    orders 6..10 between the modes at 2 and 11). ``global_jumps=0`` is the
    neighbour-only move of earlier versions. On a ``BinarySpace``, with
    probability ``swap_jumps`` (default 0.3; ignored on other spaces) m' is
    instead an add-one-drop-one swap: one included and one excluded bit, each
    drawn uniformly, flip together (symmetric; a model with none of one kind
    proposes itself), and the added coordinate takes the dropped one's
    standardised value. Single flips cross between collinear covariates
    (``us-crime``'s Po1 and Po2) only through the improbable models with both
    or neither; swaps cross directly. ``global_jumps + swap_jumps <= 1``.

    ``matching="standardised"`` moment-matches the jump: coordinates
    shared by m and m' keep their value standardised by each model's mean and
    standard deviation, new ones are drawn from N(0, 1) in those standardised
    units (i.e. N(mean, sd^2) of model m'), with the Jacobian in the ratio.
    The moments are adapted from the chains during burn-in: at each adaptation
    step the states of the chains in each model are added to that model's
    running counts, sums and sums of squares, after these are multiplied by
    ``jump_memory`` (default 0.9, so about the last ten steps count), and the
    table is their means and variances shrunk towards the pooled ones. With
    a few hundred chains over the 2^15 models of ``us-crime`` one step's states put
    one or two chains in a probable model; ``jump_memory=0`` keeps only the
    current states, the sampler of earlier versions, whose frozen table then
    rests on those one or two. ``"identity"`` is
    the textbook move: shared coordinates keep their raw values and new ones
    are drawn from N(0, aux_scale^2) in the problem's unconstrained space; it
    fails wherever a shared coordinate means different things in different
    models (e.g. ``sas``). Standardising fails in turn where the moments are
    poor guides: per-model posteriors that are multimodal (change points in
    ``coal-mining``, components in ``galaxy``) or models visited too rarely to
    estimate them (``us-crime``). ``"auto"`` (default) tries both during
    burn-in, the odd-numbered chains jumping as "identity" and the even ones
    as "standardised", and keeps for every chain after burn-in the one whose
    jumps were accepted more often late in burn-in (acceptance counts decay by
    ``TRIAL_MEMORY`` per adaptation step); diagnostics ``matching_used`` and
    ``matching_trial_accept`` say which and why. ``matching="standardised"``
    with ``global_jumps=0`` and the ``num_chains=512`` of the quick profile
    is the sampler of earlier versions.

    During burn-in the random walk adapts:
    its covariance to the cross-chain covariance of the current states (per
    model when there are at most ``max_adapted_models`` models, else pooled)
    scaled by 2.38^2 / d, and its scale by Robbins-Monro towards
    ``target_accept``. Adaptation stops after burn-in, so the kept draws come
    from a fixed, pi-invariant kernel.

    Model probabilities are visit frequencies after burn-in, with standard
    errors from the spread across independent groups of chains. The density
    reported for cross-entropy is the visit frequency times a Gaussian fitted
    per model to the kept draws (methods/common/sample_density.py).

    **Time budget.** With ``context.time_budget_s`` (or replayed counts) the run burns in, adapting as above,
    until the fraction ``burn_in / (burn_in + num_iterations)`` of the profile's preset (or of the options given)
    of the budget is spent (milestone ``"burn_in_end"``), then samples until the budget is spent, stopping after a
    whole number of ``thin`` intervals; ``num_chains``, ``thin`` and the adaptation schedule come from the preset
    as without a budget. The kept draws grow with the run; past ``MAX_KEPT_VALUES`` parameter values every other
    kept row is dropped and the thinning doubles. A budget spent before any iteration after burn-in raises
    :class:`suite.core.context.BudgetTooSmall`.

    **Running estimates.** After burn-in a snapshot is the visit frequencies since burn-in ended, computed as the
    final result is (dense counts of every iteration on dense spaces, else the kept models so far), so the last
    snapshot is the reported model probabilities. During burn-in (and, on large spaces, before the first kept
    draw) it is the model frequencies of the chains' current states: one draw per chain, what the chains hold if
    stopped there.
    """

    num_chains: int | None = None
    burn_in: int | None = None
    num_iterations: int | None = None
    thin: int | None = None
    within_moves: int = 1
    matching: str = "auto"
    aux_scale: float = 1.0
    target_accept: float = 0.234
    adapt_every: int = 20
    max_adapted_models: int = 4096
    global_jumps: float = 0.1
    swap_jumps: float = 0.3
    jump_memory: float = 0.9

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_chains": 256, "burn_in": 200, "num_iterations": 400, "thin": 4},
        # 256 chains: quick runs are time-budgeted, and at these sizes an iteration costs little more with twice the
        # chains; against 128, lower errors on 8 of 10 problems at equal time (docs/methods.md, "Chains in quick").
        "quick": {"num_chains": 256, "burn_in": 1000, "num_iterations": 2500, "thin": 5},
        # VTI App. E.4: 50,000 iterations keeping every 50th; TRJ sec. 4: 10^4-10^5 steps.
        "paper": {"num_chains": 1024, "burn_in": 10000, "num_iterations": 50000, "thin": 50},
    }

    def finalise(self, problem: Problem) -> RJMCMCBaseline:
        """Check the resolved options for sense."""
        for key in ("num_chains", "burn_in", "num_iterations", "thin"):
            if getattr(self, key) is None:
                raise ValueError(f"{self.name}: {key} has no value (give it, or use a profile that presets it)")
        for key in ("num_chains", "num_iterations", "thin", "within_moves", "adapt_every"):
            if int(getattr(self, key)) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {getattr(self, key)}")
        if int(self.burn_in) < 0 or self.aux_scale <= 0 or not 0 < self.target_accept < 1:
            raise ValueError(f"{self.name}: burn_in >= 0, aux_scale > 0 and 0 < target_accept < 1 required")
        if not 0 <= self.global_jumps <= 1:
            raise ValueError(f"{self.name}: global_jumps must lie in [0, 1], got {self.global_jumps}")
        if not 0 <= self.swap_jumps <= 1 - self.global_jumps:
            raise ValueError(f"{self.name}: swap_jumps must lie in [0, 1 - global_jumps], got {self.swap_jumps}")
        if not 0 <= self.jump_memory < 1:
            raise ValueError(f"{self.name}: jump_memory must lie in [0, 1), got {self.jump_memory}")
        if self.matching not in MATCHINGS:
            raise ValueError(f"{self.name}: unknown matching {self.matching!r}; valid: {', '.join(MATCHINGS)}")
        return self

    @property
    def burn_in_fraction(self) -> float:
        """Fraction of a time budget spent burning in: burn_in / (burn_in + num_iterations) of the options."""
        return self.burn_in / (self.burn_in + self.num_iterations)

    def supports(self, problem: Problem) -> str | None:
        """Any problem with more than one model whose model index is one int64 word."""
        if problem.num_models == 1:
            return "a single model: no jumps to make (fixed-dimension problems are for mif, fr-vip, fr, mf, iaf)"
        if problem.model_space.index_width != 1:
            return (
                f"its chains keep one int64 model index each; {problem.name}'s models need "
                f"{problem.model_space.index_width} words (not implemented)"
            )
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Run the chains and summarise them."""
        with torch.inference_mode():
            return _Sampler(problem, self, context).run()


class _KeptDraws:
    """The thinned chain states after burn-in: rows of models [chains] and parameters [chains, D].

    Without a time budget the buffer is allocated at its final size. With one it starts small and doubles as
    it fills; once it holds ``max_rows`` rows, every other row is dropped and the thinning doubles, so the rows
    stay evenly spaced (every ``thin``-th iteration after burn-in) and the memory bounded.
    """

    def __init__(self, rows: int, max_rows: int | None, thin: int, num_chains: int, dim: int) -> None:
        self.rows, self.max_rows, self.thin = rows, max_rows, thin
        self.num_chains, self.dim = num_chains, dim
        self.size = 0

    def allocate(self, dtype: torch.dtype, device: torch.device) -> None:
        """Allocate the first buffers."""
        self._models = torch.zeros(self.rows, self.num_chains, dtype=torch.int64, device=device)
        self._theta = torch.zeros(self.rows, self.num_chains, self.dim, dtype=dtype, device=device)

    def __len__(self) -> int:
        return self.size

    def keep(self, state: ChainState) -> None:
        """Store the chains' current states as the next row (growing or thinning the buffer as needed)."""
        if self.size == self._models.shape[0]:  # only a budgeted run fills its buffer
            assert self.max_rows is not None, "a run without a budget keeps exactly the rows it allocated"
            rows = min(2 * self.size, self.max_rows)
            self._models = torch.cat([self._models, self._models.new_zeros(rows - self.size, self.num_chains)])
            self._theta = torch.cat([self._theta, self._theta.new_zeros(rows - self.size, self.num_chains, self.dim)])
        self._models[self.size] = state.model_index
        self._theta[self.size] = state.theta
        self.size += 1
        if self.size == self.max_rows:
            half = self.size // 2
            self._models[:half] = self._models[1 : self.size : 2].clone()
            self._theta[:half] = self._theta[1 : self.size : 2].clone()
            self.size, self.thin = half, 2 * self.thin

    def models(self) -> Tensor:
        """Kept model indices [rows, chains] (a view)."""
        return self._models[: self.size]

    def theta(self) -> Tensor:
        """Kept parameters [rows, chains, D] (a view)."""
        return self._theta[: self.size]


class _Sampler:
    """One run's mutable sampler: chains, adaptation state and bookkeeping."""

    def __init__(self, problem: Problem, options: RJMCMCBaseline, context: RunContext) -> None:
        self.problem, self.options, self.context = problem, options, context
        self.dtype, self.device = context.dtype, context.device
        device = self.device
        self.generator = torch.Generator(device=device).manual_seed(context.seed)
        num_models = problem.num_models
        self.per_model = num_models is not None and num_models <= options.max_adapted_models
        self.num_groups = num_models if self.per_model else 1
        # Jump standardisations cost O(models x D), so they stay per model in much larger spaces.
        self.per_model_jump = num_models is not None and num_models <= MAX_JUMP_TABLE_MODELS
        self.num_jump_groups = num_models if self.per_model_jump else 1
        self.num_chains = int(options.num_chains)
        self.num_chain_groups = min(NUM_CHAIN_GROUPS, self.num_chains)
        self.chain_group = torch.arange(self.num_chains, device=device) % self.num_chain_groups
        self._dim = problem.dim_max
        #: matching="auto" during burn-in: odd chains jump as "identity", even ones "standardised".
        self.trial = options.matching == "auto"
        self.identity_chain = torch.arange(self.num_chains, device=device) % 2 == 1
        #: Decayed [accepted, proposed] jumps of the (standardised, identity) chains in the trial.
        self.trial_counts = torch.zeros(2, 2, dtype=torch.float64, device=device)
        self.matching_used = "identity" if options.matching == "identity" else "standardised"
        self.trial_rates: list[float] | None = None

    # ------------------------------------------------------------- adaptation
    def _group(self, model_index: Tensor) -> Tensor:
        """Random-walk adaptation group of each chain: its model, or 0 when adaptation is pooled."""
        return model_index if self.per_model else torch.zeros_like(model_index)

    def _jump_group(self, model_index: Tensor) -> Tensor:
        """Jump-standardisation group of each chain: its model, or 0 when pooled."""
        return model_index if self.per_model_jump else torch.zeros_like(model_index)

    def _init_adaptation(self) -> None:
        dim = self.problem.dim_max
        eye = torch.eye(dim, dtype=self.dtype, device=self.device)
        self.base_chol = eye.expand(self.num_groups, dim, dim).clone()
        if self.per_model:
            dims = self.problem.model_dim(torch.arange(self.num_groups, device=self.device))
        else:
            dims = torch.full((1,), dim, device=self.device)
        self.dim_factor = 2.38 / dims.clamp_min(1).to(self.dtype).sqrt()
        self.log_scale = torch.zeros(self.num_groups, dtype=self.dtype, device=self.device)
        self.accepted = torch.zeros(self.num_groups, dtype=self.dtype, device=self.device)
        self.proposed = torch.zeros(self.num_groups, dtype=self.dtype, device=self.device)
        self._set_jump_table(
            torch.zeros(self.num_jump_groups, dim, dtype=self.dtype, device=self.device),
            torch.full((self.num_jump_groups, dim), self.options.aux_scale, dtype=self.dtype, device=self.device),
        )
        #: Decayed per-model counts, sums and sums of squares of the states, [3, G, D], for the jump table; only
        #: where they are used (``jump_memory=0`` and ``matching="identity"`` keep no table of past states).
        keeps_sums = self.options.jump_memory > 0 and self.options.matching != "identity"
        self.jump_sums = (
            torch.zeros(3, self.num_jump_groups, dim, dtype=self.dtype, device=self.device) if keeps_sums else None
        )
        self._refresh_proposal()

    def _set_jump_table(self, loc: Tensor, scale: Tensor) -> None:
        # One [G, 2 D + 1] table so that a jump needs a single lookup per model; with
        # per-model groups the last column is the model's log-determinant sum_A log b_i.
        if self.per_model_jump:
            active = self.problem.mask(torch.arange(self.num_jump_groups, device=self.device))
            log_det = torch.where(active, scale.log(), torch.zeros_like(scale)).sum(-1, keepdim=True)
        else:
            log_det = torch.zeros(self.num_jump_groups, 1, dtype=self.dtype, device=self.device)
        self.jump_table = torch.cat([loc, scale, log_det], dim=-1)
        self._log_scale = scale.log()

    def _standardiser(self, model_index: Tensor, active: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per-chain location, scale and log-determinant of the jump's standardisation."""
        group = self._jump_group(model_index)
        entries = rows(self.jump_table, group)
        loc, scale = entries[:, : self._dim], entries[:, self._dim : 2 * self._dim]
        if self.per_model_jump:
            log_det = entries[:, -1]
        else:
            log_det = row_sum(torch.where(active, rows(self._log_scale, group), 0.0))
        if not self.trial:
            return loc, scale, log_det
        ident = self.identity_chain[:, None]
        aux = self.options.aux_scale
        loc = torch.where(ident, torch.zeros_like(loc), loc)
        scale = torch.where(ident, torch.full_like(scale, aux), scale)
        identity_log_det = active.sum(-1).to(scale.dtype) * math.log(aux)
        return loc, scale, torch.where(self.identity_chain, identity_log_det, log_det)

    def _refresh_proposal(self) -> None:
        factor = self.dim_factor * self.log_scale.exp()
        self.proposal_chol = factor[:, None, None] * self.base_chol

    def _adapt(self, state: ChainState) -> None:
        seen = self.proposed > 0
        rate = self.accepted / self.proposed.clamp_min(1)
        self.log_scale = torch.where(seen, self.log_scale + (rate - self.options.target_accept), self.log_scale)
        self.log_scale.clamp_(-12.0, 4.0)
        self.accepted.zero_()
        self.proposed.zero_()
        group = self._group(state.model_index)
        mask = self.problem.mask(state.model_index)
        count, _, cov = grouped_moments(group, state.theta, mask, self.num_groups)
        cov = shrunk_covariances(count, cov, prior_weight=float(self.problem.dim_max + 2))
        active = self.problem.mask(torch.arange(self.num_groups, device=self.device)) if self.per_model else None
        self.base_chol = safe_cholesky(cov, active)
        self._refresh_proposal()
        if self.trial:
            self.trial_counts.mul_(TRIAL_MEMORY)
        if self.matching_used == "standardised":
            # Per-model means and variances of the states (decayed over adaptation steps); unvisited models take
            # the pooled values, and one pseudo-observation keeps visited models close to their own.
            jump_group = self._jump_group(state.model_index)
            n, mean, var = grouped_diagonal_moments(jump_group, state.theta, mask, self.num_jump_groups)
            if self.jump_sums is not None:  # else (jump_memory=0) exactly the earlier, current-states-only table
                sums = self.jump_sums.mul_(self.options.jump_memory)
                sums += torch.stack([n, n * mean, n * (var + mean * mean)])
                n = sums[0]
                mean = sums[1] / n.clamp_min(1e-12)
                var = (sums[2] / n.clamp_min(1e-12) - mean * mean).clamp_min(0.0)
            loc = shrink_to_pooled(n, mean, prior_weight=1.0, default=0.0)
            var = shrink_to_pooled(n, var, prior_weight=float(self.problem.dim_max + 2), default=1.0)
            self._set_jump_table(loc, var.clamp_min(1e-12).sqrt())

    def _count_trial(self, jump_accept: Tensor) -> None:
        """Add one iteration's jump acceptances to the standardised and identity chains' counts."""
        ident = self.identity_chain
        accepted = torch.stack([(jump_accept & ~ident).sum(), (jump_accept & ident).sum()]).to(torch.float64)
        proposed = torch.stack([(~ident).sum(), ident.sum()]).to(torch.float64)
        self.trial_counts += torch.stack([accepted, proposed], dim=1)

    def _end_trial(self) -> None:
        """matching="auto": keep the matching whose chains' jumps were accepted more often late in burn-in."""
        if not self.trial:
            return
        self.trial = False
        rates = self.trial_counts[:, 0] / self.trial_counts[:, 1].clamp_min(1.0)
        if float(rates[1]) > float(rates[0]):
            self.matching_used = "identity"
            dim = self._dim
            self._set_jump_table(
                torch.zeros(self.num_jump_groups, dim, dtype=self.dtype, device=self.device),
                torch.full((self.num_jump_groups, dim), self.options.aux_scale, dtype=self.dtype, device=self.device),
            )
        self.trial_rates = rates.tolist()

    # ------------------------------------------------------------------ loop
    def _iterate(self, state: ChainState, adapting: bool) -> ChainState:
        """One between-model move and ``within_moves`` random-walk moves; acceptances go to the trace block."""
        before = state.model_index
        state, jump_accept = between_model_move(
            self.problem, state, self._standardiser, self.generator, self.options.global_jumps, self.options.swap_jumps
        )
        self.block_accepts[0].add_(jump_accept)
        if self.trial:
            self._count_trial(jump_accept)
        self.moved_between.add_((state.model_index != before).sum())
        for _ in range(self.options.within_moves):
            group = self._group(state.model_index)
            chol = rows(self.proposal_chol, group) if self.per_model else self.proposal_chol[0]
            state, accept = random_walk_move(self.problem, state, chol, self.generator)
            self.block_accepts[1].add_(accept)
            if adapting:
                accept_f = accept.to(self.dtype)
                self.accepted.index_add_(0, group, accept_f)
                self.proposed.index_add_(0, group, torch.ones_like(accept_f))
        return state

    def _close_trace_block(self, iterations: int) -> None:
        """Store the mean acceptance rates of the last ``iterations`` iterations as the next trace point."""
        moves = torch.tensor([iterations, iterations * self.options.within_moves], device=self.device)
        self.trace.append(self.block_accepts.sum(-1).to(self.dtype) / (moves * self.num_chains))
        self.block_accepts.zero_()

    def _state_probs(self, state: ChainState) -> ModelProbs:
        """Model frequencies of the chains' current states (the running estimate before any visit is counted)."""
        return self._sparse_probs(state.model_index[None, :])

    def _visit_probs(self, counts: Tensor | None, kept: _KeptDraws, state: ChainState) -> ModelProbs:
        """Visit frequencies since burn-in: dense counts, else the kept models (the current states before any)."""
        if counts is not None:
            num_models = self.problem.num_models
            return _probs_with_se(counts.view(self.num_chain_groups, -1), torch.arange(num_models, device=self.device))
        if len(kept) == 0:
            return self._state_probs(state)
        return self._sparse_probs(kept.models())

    def run(self) -> Result:
        options, problem, context = self.options, self.problem, self.context
        thin = options.thin
        budgeted = context.budgeted
        if context.replay is not None:  # counts without these would never end burn-in or sampling
            needed = [STOP, *(["burn_in_end"] if options.burn_in > 0 else [])]
            missing = [name for name in needed if name not in context.replay]
            if missing:
                raise ValueError(f"{options.name}: replayed counts have no {', '.join(map(repr, missing))}")
        with context.timer.phase("setup"):
            state = init_state(problem, self.num_chains, options.aux_scale, self.dtype, self.generator)
            if not bool(torch.isfinite(state.log_joint).any()):
                return Result.failed(f"target log density is non-finite at all {self.num_chains} initial points")
            self._init_adaptation()
            # Acceptance counts per chain, summed over a block of TRACE_BLOCK iterations.
            self.block_accepts = torch.zeros(2, self.num_chains, dtype=torch.int64, device=self.device)
            # Chain moves to another model over the whole run, burn-in included.
            self.moved_between = torch.zeros((), dtype=torch.int64, device=self.device)
            self.trace: list[Tensor] = []
            if budgeted:
                row_values = self.num_chains * problem.dim_max
                max_rows = max(2, MAX_KEPT_VALUES // row_values // 2 * 2)
                kept = _KeptDraws(min(FIRST_KEPT_ROWS, max_rows), max_rows, thin, self.num_chains, problem.dim_max)
            else:
                kept = _KeptDraws(options.num_iterations // thin, None, thin, self.num_chains, problem.dim_max)
            kept.allocate(self.dtype, self.device)
            dense = problem.num_models is not None and problem.num_models * self.num_chain_groups <= MAX_DENSE_COUNTS
            counts = None
            if dense:
                counts = torch.zeros(self.num_chain_groups * problem.num_models, dtype=self.dtype, device=self.device)
                count_offset = self.chain_group * problem.num_models
                ones = torch.ones(self.num_chains, dtype=self.dtype, device=self.device)

        with context.loop(f"rjmcmc {problem.name}", planned=options.burn_in + options.num_iterations) as loop:
            with context.timer.phase("train"):  # burn-in with adaptation
                while not loop.reached("burn_in_end", options.burn_in, options.burn_in_fraction):
                    state = self._iterate(state, adapting=True)
                    done = loop.iteration + 1
                    if done % options.adapt_every == 0:
                        self._adapt(state)
                    if done % TRACE_BLOCK == 0:
                        self._close_trace_block(TRACE_BLOCK)
                    loop.advance(estimate=partial(self._state_probs, state))
                burn_in = loop.iteration
                self._end_trial()
                if burn_in % TRACE_BLOCK:
                    self._close_trace_block(burn_in % TRACE_BLOCK)
            with context.timer.phase("sample"):
                loop_start = context.clock.elapsed()
                first_block = len(self.trace)
                iterations = 0  # after burn-in
                # A budgeted run stops only after whole thinning intervals: once it has sampled, it has kept draws.
                while not loop.finished(ready=iterations % options.thin == 0):
                    state = self._iterate(state, adapting=False)
                    iterations += 1
                    if counts is not None:
                        counts.index_add_(0, count_offset + state.model_index, ones)
                    if iterations % kept.thin == 0:
                        kept.keep(state)
                    if iterations % TRACE_BLOCK == 0:
                        self._close_trace_block(TRACE_BLOCK)
                    loop.advance(estimate=partial(self._visit_probs, counts, kept, state))
                if iterations == 0:
                    raise BudgetTooSmall(
                        f"the budget was spent in burn-in ({burn_in} iterations), before any iteration after it"
                    )
                if iterations % TRACE_BLOCK:
                    self._close_trace_block(iterations % TRACE_BLOCK)
                loop_seconds = context.clock.elapsed() - loop_start
                model_probs = self._visit_probs(counts, kept, state)
                thin_effective = kept.thin
                kept = Draws(kept.models().flatten(), kept.theta().flatten(0, 1))
                kept = Draws(
                    kept.model_index,
                    torch.where(problem.mask(kept.model_index), kept.theta, torch.zeros_like(kept.theta)),
                )
                log_density = fit_gaussian_per_model(problem, kept, model_probs)
            loop.snapshot(lambda: model_probs)
            t = loop.iteration

        pick = torch.linspace(0, len(kept) - 1, min(context.num_draws, len(kept)), device=self.device).long()
        chain_steps = iterations * self.num_chains
        trace = torch.stack(self.trace, dim=1)
        sampled = trace[:, first_block:]
        weights = torch.full((sampled.shape[1],), float(TRACE_BLOCK), dtype=self.dtype, device=self.device)
        weights[-1] = iterations - TRACE_BLOCK * (sampled.shape[1] - 1)
        diagnostics = {
            "accept_between": float(sampled[0] @ weights / iterations),
            "accept_within": float(sampled[1] @ weights / iterations),
            # Whole run, burn-in included: the suite fails a run whose chains never moved between models.
            "between_proposals": t * self.num_chains,
            "between_accepted": int(self.moved_between),
            "trace_block_iterations": TRACE_BLOCK,
            "trace_accept_between": trace[0].tolist(),
            "trace_accept_within": trace[1].tolist(),
            "num_kept_draws": len(kept),
            "adapted_per_model": self.per_model,
            "chain_steps_per_s": chain_steps / loop_seconds if loop_seconds > 0 else math.nan,
            "chain_moves_per_s": (
                chain_steps * (1 + options.within_moves) / loop_seconds if loop_seconds > 0 else math.nan
            ),
            "density": "visit frequency x Gaussian fitted per model",
            "density_ridged_models": log_density.num_ridged,
            "burn_in_iterations": burn_in,
            "sampling_iterations": iterations,
            "thin_effective": thin_effective,
            "matching_used": self.matching_used,
        }
        if self.trial_rates is not None:
            diagnostics["matching_trial_accept"] = dict(
                zip(("standardised", "identity"), self.trial_rates, strict=True)
            )
        if diagnostics["accept_between"] == 0 and diagnostics["accept_within"] == 0:
            # Every kept draw is a chain's burn-in end point: nothing says they are from the target.
            return Result.failed(
                f"no proposal accepted in the {iterations} iterations after burn-in "
                f"(neither between- nor within-model, {self.num_chains} chains)",
                diagnostics=diagnostics,
            )
        return Result(
            model_probs=model_probs,
            draws=Draws(kept.model_index[pick], kept.theta[pick]),
            log_density=log_density,
            diagnostics=diagnostics,
        )

    def _sparse_probs(self, kept_models: Tensor) -> ModelProbs:
        visited, slot = torch.unique(kept_models, return_inverse=True)
        bins = self.chain_group[None, :] * visited.numel() + slot
        counts = torch.zeros(self.num_chain_groups * visited.numel(), dtype=self.dtype, device=self.device)
        counts.index_add_(0, bins.flatten(), torch.ones(bins.numel(), dtype=self.dtype, device=self.device))
        return _probs_with_se(counts.view(self.num_chain_groups, -1), visited)


def _probs_with_se(group_counts: Tensor, index: Tensor) -> ModelProbs:
    """Model probabilities from per-chain-group counts ``[G, K]`` with batch-means standard errors."""
    per_group = group_counts / group_counts.sum(-1, keepdim=True)
    prob = group_counts.sum(0) / group_counts.sum()
    se = per_group.std(0, unbiased=True) / math.sqrt(group_counts.shape[0]) if group_counts.shape[0] > 1 else None
    return ModelProbs(index.cpu(), prob.cpu().to(torch.float64), None if se is None else se.cpu().to(torch.float64))


@register_method("rjmcmc-naive")
@dataclass(frozen=True)
class RJMCMCNaive(RJMCMCBaseline):
    """Textbook RJMCMC: shared coordinates kept as they are, new ones drawn from N(0, aux_scale^2).

    The same sampler as ``rjmcmc-baseline`` with ``matching="identity"``: the
    independent-auxiliary move of Brooks et al. (2003) with the auxiliary
    density fixed to N(0, aux_scale^2) in the problem's unconstrained space.
    It is kept on the leaderboard as the reference point that transport and
    variational methods are meant to improve on, so it keeps the textbook
    neighbour-only jumps (``global_jumps=0``, ``swap_jumps=0``) and the quick profile's 512 chains
    of earlier versions.
    """

    matching: str = "identity"
    global_jumps: float = 0.0
    swap_jumps: float = 0.0

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        **RJMCMCBaseline.profiles,
        "quick": {"num_chains": 512, "burn_in": 1000, "num_iterations": 2500, "thin": 5},
    }
