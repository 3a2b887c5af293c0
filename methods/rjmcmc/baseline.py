"""Generic vectorised RJMCMC baseline: works on any registered problem through the Problem interface."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from tqdm.auto import tqdm

from methods.common.moments import (
    grouped_diagonal_moments,
    grouped_moments,
    safe_cholesky,
    shrink_to_pooled,
    shrunk_covariances,
)
from methods.common.sample_density import fit_gaussian_per_model
from methods.rjmcmc.kernels import ChainState, between_model_move, init_state, random_walk_move
from suite.harness import PhaseTimer
from suite.method import Budget, Method, Result
from suite.problem import Problem
from suite.registry import register_method
from suite.tensor_ops import row_sum, rows
from suite.types import Draws, ModelProbs

#: Chains are split into this many groups; the spread of the groups' visit
#: frequencies gives the Monte Carlo standard error of the model probabilities.
NUM_CHAIN_GROUPS = 32
#: Dense visit counting (every iteration) when groups x models stays below this.
MAX_DENSE_COUNTS = 2**22
#: Iterations per point of the acceptance traces.
TRACE_BLOCK = 50
MATCHINGS = ("standardised", "identity")
#: Largest model space whose jump standardisation is kept per model (a [models, 2 D + 1] table).
MAX_JUMP_TABLE_MODELS = 2**18


@register_method("rjmcmc-baseline")
@dataclass
class RJMCMCBaseline(Method):
    """Vectorised RJMCMC: independent-auxiliary jumps, adaptive random-walk Metropolis within models.

    Each iteration makes one between-model move (m' from the model space's
    jump distribution; independent auxiliary variables, Brooks et al. 2003)
    followed by ``within_moves`` random-walk Metropolis moves on the active
    coordinates.

    ``matching="standardised"`` (default) moment-matches the jump: coordinates
    shared by m and m' keep their value standardised by each model's mean and
    standard deviation, new ones are drawn from N(0, 1) in those standardised
    units (i.e. N(mean, sd^2) of model m'), with the Jacobian in the ratio.
    The moments are adapted from the chains during burn-in. ``"identity"`` is
    the textbook move: shared coordinates keep their raw values and new ones
    are drawn from N(0, aux_scale^2) in the problem's unconstrained space; it
    fails wherever a shared coordinate means different things in different
    models (e.g. ``sas``), which is why it is not the default.

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
    """

    num_chains: int | None = None
    burn_in: int | None = None
    num_iterations: int | None = None
    thin: int | None = None
    within_moves: int = 1
    matching: str = "standardised"
    aux_scale: float = 1.0
    target_accept: float = 0.234
    adapt_every: int = 20
    max_adapted_models: int = 4096
    dtype: str = "float64"
    progress: bool = True

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_chains": 256, "burn_in": 200, "num_iterations": 400, "thin": 4},
        "quick": {"num_chains": 512, "burn_in": 1000, "num_iterations": 2500, "thin": 5},
        # VTI App. E.4: 50,000 iterations keeping every 50th; TRJ sec. 4: 10^4-10^5 steps.
        "paper": {"num_chains": 1024, "burn_in": 10000, "num_iterations": 50000, "thin": 50},
    }

    def settings(self, problem: Problem, budget: Budget) -> dict[str, Any]:
        """Profile presets under the constructor's values, checked for sense."""
        s = super().settings(problem, budget)
        for key in ("num_chains", "num_iterations", "thin", "within_moves", "adapt_every"):
            if int(s[key]) <= 0:
                raise ValueError(f"{self.name}: {key} must be positive, got {s[key]}")
        if int(s["burn_in"]) < 0 or s["aux_scale"] <= 0 or not 0 < s["target_accept"] < 1:
            raise ValueError(f"{self.name}: burn_in >= 0, aux_scale > 0 and 0 < target_accept < 1 required")
        if s["matching"] not in MATCHINGS:
            raise ValueError(f"{self.name}: unknown matching {s['matching']!r}; valid: {', '.join(MATCHINGS)}")
        return s

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

    def run(self, problem: Problem, budget: Budget, seed: int, device: torch.device) -> Result:
        """Run the chains and summarise them."""
        s = self.settings(problem, budget)
        with torch.inference_mode():
            return _Sampler(problem, s, self.torch_dtype, seed, device).run(budget)


class _Sampler:
    """One run's mutable sampler: chains, adaptation state and bookkeeping."""

    def __init__(
        self, problem: Problem, s: dict[str, Any], dtype: torch.dtype, seed: int, device: torch.device
    ) -> None:
        self.problem, self.s, self.dtype, self.device = problem, s, dtype, device
        self.timer = PhaseTimer(device)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        num_models = problem.num_models
        self.per_model = num_models is not None and num_models <= s["max_adapted_models"]
        self.num_groups = num_models if self.per_model else 1
        # Jump standardisations cost O(models x D), so they stay per model in much larger spaces.
        self.per_model_jump = num_models is not None and num_models <= MAX_JUMP_TABLE_MODELS
        self.num_jump_groups = num_models if self.per_model_jump else 1
        self.num_chains = int(s["num_chains"])
        self.num_chain_groups = min(NUM_CHAIN_GROUPS, self.num_chains)
        self.chain_group = torch.arange(self.num_chains, device=device) % self.num_chain_groups
        self._dim = problem.dim_max

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
            torch.full((self.num_jump_groups, dim), float(self.s["aux_scale"]), dtype=self.dtype, device=self.device),
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
            return loc, scale, entries[:, -1]
        return loc, scale, row_sum(torch.where(active, rows(self._log_scale, group), 0.0))

    def _refresh_proposal(self) -> None:
        factor = self.dim_factor * self.log_scale.exp()
        self.proposal_chol = factor[:, None, None] * self.base_chol

    def _adapt(self, state: ChainState) -> None:
        seen = self.proposed > 0
        rate = self.accepted / self.proposed.clamp_min(1)
        self.log_scale = torch.where(seen, self.log_scale + (rate - self.s["target_accept"]), self.log_scale)
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
        if self.s["matching"] == "standardised":
            # Per-model means and variances of the current states; unvisited models take the pooled
            # values, and one pseudo-observation keeps visited models close to their own.
            jump_group = self._jump_group(state.model_index)
            n, mean, var = grouped_diagonal_moments(jump_group, state.theta, mask, self.num_jump_groups)
            loc = shrink_to_pooled(n, mean, prior_weight=1.0, default=0.0)
            var = shrink_to_pooled(n, var, prior_weight=float(self.problem.dim_max + 2), default=1.0)
            self._set_jump_table(loc, var.clamp_min(1e-12).sqrt())

    # ------------------------------------------------------------------ loop
    def _iterate(self, state: ChainState, adapting: bool) -> ChainState:
        """One between-model move and ``within_moves`` random-walk moves; acceptances go to the trace block."""
        state, jump_accept = between_model_move(self.problem, state, self._standardiser, self.generator)
        self.block_accepts[0].add_(jump_accept)
        for _ in range(self.s["within_moves"]):
            group = self._group(state.model_index)
            chol = rows(self.proposal_chol, group) if self.per_model else self.proposal_chol[0]
            state, accept = random_walk_move(self.problem, state, chol, self.generator)
            self.block_accepts[1].add_(accept)
            if adapting:
                accept_f = accept.to(self.dtype)
                self.accepted.index_add_(0, group, accept_f)
                self.proposed.index_add_(0, group, torch.ones_like(accept_f))
        return state

    def _close_trace_block(self, block: int, iterations: int) -> None:
        """Store the mean acceptance rates of the last ``iterations`` iterations as trace point ``block``."""
        moves = torch.tensor([iterations, iterations * self.s["within_moves"]], device=self.device)
        self.trace[:, block] = self.block_accepts.sum(-1).to(self.dtype) / (moves * self.num_chains)
        self.block_accepts.zero_()

    def run(self, budget: Budget) -> Result:
        s, problem = self.s, self.problem
        burn_in, iterations, thin = int(s["burn_in"]), int(s["num_iterations"]), int(s["thin"])
        total = burn_in + iterations
        with self.timer.phase("setup"):
            state = init_state(problem, self.num_chains, s["aux_scale"], self.dtype, self.generator)
            if not bool(torch.isfinite(state.log_joint).any()):
                return self._failed(f"target log density is non-finite at all {self.num_chains} initial points")
            self._init_adaptation()
            # Acceptance counts per chain, summed over a block of TRACE_BLOCK iterations.
            self.block_accepts = torch.zeros(2, self.num_chains, dtype=torch.int64, device=self.device)
            num_blocks = math.ceil(burn_in / TRACE_BLOCK) + math.ceil(iterations / TRACE_BLOCK)
            self.trace = torch.zeros(2, num_blocks, dtype=self.dtype, device=self.device)
            num_kept = iterations // thin
            kept_models = torch.zeros(num_kept, self.num_chains, dtype=torch.int64, device=self.device)
            kept_theta = torch.zeros(num_kept, self.num_chains, problem.dim_max, dtype=self.dtype, device=self.device)
            dense = problem.num_models is not None and problem.num_models * self.num_chain_groups <= MAX_DENSE_COUNTS
            if dense:
                counts = torch.zeros(self.num_chain_groups * problem.num_models, dtype=self.dtype, device=self.device)
                count_offset = self.chain_group * problem.num_models
                ones = torch.ones(self.num_chains, dtype=self.dtype, device=self.device)

        bar = tqdm(
            total=total, desc=f"rjmcmc {problem.name}", leave=False, mininterval=1.0, disable=not s["progress"] or None
        )
        with self.timer.phase("train"):  # burn-in with adaptation
            for t in range(burn_in):
                state = self._iterate(state, adapting=True)
                if (t + 1) % s["adapt_every"] == 0:
                    self._adapt(state)
                if (t + 1) % TRACE_BLOCK == 0 or t + 1 == burn_in:
                    self._close_trace_block(t // TRACE_BLOCK, t % TRACE_BLOCK + 1)
                    bar.update(t % TRACE_BLOCK + 1)
        with self.timer.phase("sample"):
            loop_start = time.perf_counter()
            first_block = math.ceil(burn_in / TRACE_BLOCK)
            for t in range(iterations):
                state = self._iterate(state, adapting=False)
                if dense:
                    counts.index_add_(0, count_offset + state.model_index, ones)
                if (t + 1) % thin == 0:
                    kept_models[(t + 1) // thin - 1] = state.model_index
                    kept_theta[(t + 1) // thin - 1] = state.theta
                if (t + 1) % TRACE_BLOCK == 0 or t + 1 == iterations:
                    self._close_trace_block(first_block + t // TRACE_BLOCK, t % TRACE_BLOCK + 1)
                    bar.update(t % TRACE_BLOCK + 1)
            loop_seconds = time.perf_counter() - loop_start
            bar.close()
            if dense:
                model_probs = _probs_with_se(
                    counts.view(self.num_chain_groups, -1), torch.arange(problem.num_models, device=self.device)
                )
            else:
                model_probs = self._sparse_probs(kept_models)
            kept = Draws(kept_models.flatten(), kept_theta.flatten(0, 1))
            kept = Draws(
                kept.model_index, torch.where(problem.mask(kept.model_index), kept.theta, torch.zeros_like(kept.theta))
            )
            log_density = fit_gaussian_per_model(problem, kept, model_probs)

        pick = torch.linspace(0, len(kept) - 1, min(budget.num_draws, len(kept)), device=self.device).long()
        chain_steps = iterations * self.num_chains
        sampled = self.trace[:, first_block:]
        weights = torch.full((sampled.shape[1],), float(TRACE_BLOCK), dtype=self.dtype, device=self.device)
        weights[-1] = iterations - TRACE_BLOCK * (sampled.shape[1] - 1)
        diagnostics = {
            "accept_between": float(sampled[0] @ weights / iterations),
            "accept_within": float(sampled[1] @ weights / iterations),
            "trace_block_iterations": TRACE_BLOCK,
            "trace_accept_between": self.trace[0].tolist(),
            "trace_accept_within": self.trace[1].tolist(),
            "num_kept_draws": len(kept),
            "adapted_per_model": self.per_model,
            "chain_steps_per_s": chain_steps / loop_seconds if loop_seconds > 0 else math.nan,
            "chain_moves_per_s": chain_steps * (1 + s["within_moves"]) / loop_seconds if loop_seconds > 0 else math.nan,
            "density": "visit frequency x Gaussian fitted per model",
            "density_ridged_models": log_density.num_ridged,
        }
        if diagnostics["accept_between"] == 0 and diagnostics["accept_within"] == 0:
            # Every kept draw is a chain's burn-in end point: nothing says they are from the target.
            return self._failed(
                f"no proposal accepted in the {iterations} iterations after burn-in "
                f"(neither between- nor within-model, {self.num_chains} chains)",
                diagnostics=diagnostics,
            )
        return Result(
            model_probs=model_probs,
            draws=Draws(kept.model_index[pick], kept.theta[pick]),
            log_density=log_density,
            diagnostics=diagnostics,
            timings=dict(self.timer.timings),
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
        )

    def _failed(self, reason: str, **kwargs: Any) -> Result:
        """A failed result with this run's timings, device and dtype."""
        return Result.failed(
            reason,
            timings=dict(self.timer.timings),
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            **kwargs,
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
@dataclass
class RJMCMCNaive(RJMCMCBaseline):
    """Textbook RJMCMC: shared coordinates kept as they are, new ones drawn from N(0, aux_scale^2).

    The same sampler as ``rjmcmc-baseline`` with ``matching="identity"``: the
    independent-auxiliary move of Brooks et al. (2003) with the auxiliary
    density fixed to N(0, aux_scale^2) in the problem's unconstrained space.
    It is kept on the leaderboard as the reference point that transport and
    variational methods are meant to improve on.
    """

    matching: str = "identity"
    # The textbook reference point needs no second seed in the quick profile (keeps run_all within its budget).
    default_seeds: ClassVar[dict[str, int]] = {"quick": 1}
