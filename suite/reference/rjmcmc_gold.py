"""Gold standards for model spaces too large to enumerate: one long vectorised ``rjmcmc-baseline`` run.

Problems whose ``reference_settings["evidence"]`` is ``"rjmcmc"`` (robust
variable selection beyond 2^7 models) get no per-model evidences: their
reference is the visit frequencies of many independent RJMCMC chains after
burn-in, over the models the chains visited, with standard errors from the
spread between groups of chains, and gold draws taken at random from the
thinned chains (VTI App. E.1, whose gold standard is made the same way).

Sizes follow the authors' RJMCMC configuration (avti ``get_rjmcmc_config``,
by dimension p = number of coefficients including the intercept): 10,000
burn-in iterations, then 10,000 / 20,000 / 40,000 / 160,000 / 240,000
iterations in all for p <= 5 / 10 / 20 / 50 / above, thinned by 50 / 100 /
200 / 400 / 800, over 4,096 chains, each iteration one between-model move and
five within-model moves (``profile="paper"``). ``profile="quick"`` keeps
1,024 chains and a quarter of every length; the shipped references are made
so, and their standard errors say how accurate that is. Unlike the authors'
code, no chain stores an all-zero first sample (spec QUIRK: their slot 0 is
never written).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import torch

from suite.core.context import RunContext
from suite.core.problem import Problem
from suite.core.registry import make_method
from suite.reference.engine import versions
from suite.run.runner import resolve_and_run
from suite.store.references import Reference

#: Burn-in of the authors' configuration, and (largest dimension, total iterations, thinning) by dimension.
APP_E1_BURN_IN = 10_000
APP_E1_SCHEDULE = ((5, 10_000, 50), (10, 20_000, 100), (20, 40_000, 200), (50, 160_000, 400))
APP_E1_LARGEST = (240_000, 800)
#: Chains and the factor all lengths are divided by, per profile.
PROFILES = {"paper": (4096, 1), "quick": (1024, 4)}


@dataclass(frozen=True)
class RJMCMCGoldSettings:
    """Everything that decides an RJMCMC gold standard."""

    num_chains: int
    burn_in: int
    num_iterations: int  # after burn-in
    thin: int
    within_moves: int = 5
    seed: int = 0
    num_gold_draws: int = 10_000  # stored in all: half to score methods on ("test"), half to learn from
    profile: str = "quick"

    def __post_init__(self) -> None:
        """Check the sizes."""
        for name in ("num_chains", "num_iterations", "thin", "within_moves", "num_gold_draws"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.burn_in < 0:
            raise ValueError(f"burn_in must be >= 0, got {self.burn_in}")

    def as_dict(self) -> dict[str, Any]:
        """Settings as a JSON-able dict."""
        return asdict(self)


def app_e1_settings(dimension: int, profile: str = "quick", **overrides: Any) -> RJMCMCGoldSettings:
    """The authors' RJMCMC sizes for ``dimension`` coefficients (intercept included), scaled by ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    total, thin = next(((t, k) for limit, t, k in APP_E1_SCHEDULE if dimension <= limit), APP_E1_LARGEST)
    chains, divide = PROFILES[profile]
    sizes = {
        "num_chains": chains,
        "burn_in": APP_E1_BURN_IN // divide,
        "num_iterations": (total - APP_E1_BURN_IN) // divide,
        "thin": max(thin // divide, 1),
        "profile": profile,
    }
    return RJMCMCGoldSettings(**{**sizes, **overrides})


def estimate_by_rjmcmc(problem: Problem, settings: RJMCMCGoldSettings, progress: bool = True) -> Reference:
    """Run the chains on the CPU in float64 and summarise them as a reference (visited models only)."""
    started = datetime.now(UTC).isoformat()
    clock = time.perf_counter()
    method = make_method(
        "rjmcmc-baseline",
        num_chains=settings.num_chains,
        burn_in=settings.burn_in,
        num_iterations=settings.num_iterations,
        thin=settings.thin,
        within_moves=settings.within_moves,
        # The sampler the shipped references were made with (the method's defaults before issue 52).
        matching="standardised",
        global_jumps=0.0,
        swap_jumps=0.0,
        jump_memory=0.0,
    )
    num_kept = settings.num_chains * (settings.num_iterations // settings.thin)
    if num_kept < settings.num_gold_draws:
        raise ValueError(f"{num_kept} kept draws cannot give {settings.num_gold_draws} gold draws")
    context = RunContext(
        seed=settings.seed, device=torch.device("cpu"), profile="paper", num_draws=num_kept, progress=progress
    )
    result = resolve_and_run(method, problem, context)
    if result.status != "ok" or result.model_probs is None or result.draws is None:
        raise RuntimeError(f"the RJMCMC gold-standard run failed: {result.reason}")
    probs = result.model_probs
    visited = probs.prob > 0
    index, prob = probs.index[visited], probs.prob[visited]
    se = probs.se[visited] if probs.se is not None else torch.full_like(prob, float("nan"))
    generator = torch.Generator().manual_seed(settings.seed)
    # Random order, so that the "test" and "train" halves of the stored draws are both random subsets.
    pick = torch.randperm(len(result.draws), generator=generator)[: settings.num_gold_draws]
    gold_index = result.draws.model_index[pick].cpu()
    gold_theta = result.draws.theta[pick].cpu().to(torch.float64)
    provenance = {
        "method": "rjmcmc-baseline long run (visit frequencies, chain-group standard errors)",
        "evidence": "rjmcmc",
        "settings": settings.as_dict(),
        "versions": versions(),
        "started_at": started,
        "seconds": round(time.perf_counter() - clock, 1),
        "num_visited_models": int(index.numel()),
        "max_prob_se": float(se.max()),
        "rjmcmc_diagnostics": {
            k: v for k, v in result.diagnostics.items() if not k.startswith("trace_") and isinstance(v, int | float)
        },
    }
    nan = np.full(index.numel(), np.nan)
    return Reference(
        problem=problem.name,
        config=problem.config(),
        log_evidence=nan,
        log_evidence_se=nan.copy(),
        log_model_prior=problem.log_model_prior(index).numpy(),
        prob=prob.numpy(),
        prob_se=se.numpy(),
        gold_model_index=gold_index.numpy(),
        gold_theta=gold_theta.numpy(),
        provenance=provenance,
        model_index=index.numpy(),
    )
