"""Independent per-model posterior draws for the bridge-estimate study (TRJ's factor-analysis protocol).

The TRJ paper trains and evaluates the FA proposals on N draws *of each model*: PyMC SMC particles for the
two-factor model and NUTS for the three-factor one, one chain (run) for training and another for evaluation
(spec ``methods.md`` sec. 6.5). Drawing N from the pooled posterior instead gives a model of probability 0.11 only
a tenth of them, and its flow overfits. :func:`per_model_draws` makes, for every model, N training and N
evaluation draws from runs of their own:

* **NUTS** where the stored reference took that model's gold draws from NUTS: ``num_chains`` chains started at
  random stored draws of the model (after the warm-up they have forgotten them), the first half of the chains
  for training and the second half for evaluation, each at least ``NUTS_MIN_DRAWS`` long and thinned evenly to
  N. If the chains' split R-hat exceeds the reference engine's limit, the model falls back to SMC.
* **SMC** otherwise (FA's two-factor posterior has modes NUTS chains do not cross): two tempered SMC runs of N
  particles from the prior, one for training and one for evaluation. Resampling a run's weighted particles
  repeats some of them (on FA ~24% of resampled draws are copies), so each run's resampled particles then take
  ``REJUVENATION_STEPS`` random-walk Metropolis steps at the posterior (a posterior-invariant kernel: the draws
  stay posterior draws while the copies separate). The fraction still repeated is logged. SMC is not used where
  NUTS works: on FA's three-factor model 2 x 2,000 particles put means up to 0.5 posterior sd off the stored
  NUTS draws and sds 0.57-1.5 times theirs, where thinned NUTS halves agree within 0.12 sd.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from methods.common.chains import ChainState, random_walk_move
from suite.core.problem import Problem
from suite.core.types import Draws
from suite.reference.engine import MAX_RHAT, even_subset
from suite.reference.jax_target import JaxTarget
from suite.reference.nuts import NUTSSampler
from suite.reference.settings import settings_for
from suite.reference.smc import run_smc

if TYPE_CHECKING:
    from suite.reference.engine import EngineSettings

#: Fewest NUTS draws per half (training or evaluation) before thinning to N: FA's three-factor chains mix slowly
#: (min ESS 8-55 in 4 x 300 draws), so short chains are run longer and thinned.
NUTS_MIN_DRAWS = 8000
#: Random-walk Metropolis steps that separate the copies among resampled SMC particles.
REJUVENATION_STEPS = 100
#: Random-walk step as a multiple of 2.38 / sqrt(d) times the Cholesky factor of the particles' covariance.
REJUVENATION_SCALE = 0.5


def stored_sources(problem: Problem) -> dict[int, str]:
    """Per model index, where the stored reference took its gold draws from ("nuts" or "smc")."""
    reference = problem.stored_reference()
    per_model = {} if reference is None else (reference.provenance.get("per_model") or {})
    sources = {}
    for m in problem.model_space.all_indices().tolist():
        entry = per_model.get(problem.model_space.identifier(int(m)), {})
        sources[int(m)] = "nuts" if entry.get("draws_from") == "nuts" else "smc"
    return sources


def nuts_halves(
    problem: Problem,
    model_index: int,
    num_draws: int,
    settings: EngineSettings,
    seed: int,
    min_draws: int = NUTS_MIN_DRAWS,
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """N training and N evaluation NUTS draws of one model from disjoint chains, or None if R-hat is too large.

    Each half is at least ``min_draws`` long before it is thinned evenly to N.
    """

    nuts = settings.nuts
    chains = max(2, nuts.num_chains - nuts.num_chains % 2)
    per_chain = math.ceil(max(num_draws, min_draws) / (chains // 2))
    reference = problem.stored_reference()
    pool = reference.gold_theta[reference.gold_model_index == model_index].astype(np.float64)
    pool = pool[np.lexsort(pool.T[::-1])]  # starting points independent of the order the draws are stored in
    generator = torch.Generator().manual_seed(seed)
    init = pool[torch.randperm(len(pool), generator=generator)[:chains].numpy()]
    sampler = NUTSSampler(JaxTarget.of(problem), dataclasses.replace(nuts, num_chains=chains, num_samples=per_chain))
    output = sampler.sample(model_index, init, seed=seed)
    if output.max_rhat > MAX_RHAT:
        return None
    half = chains // 2
    dim = output.draws.shape[-1]
    train = even_subset(output.draws[:half].reshape(-1, dim), num_draws)
    evaluation = even_subset(output.draws[half:].reshape(-1, dim), num_draws)
    note = f"NUTS {chains} x {per_chain} thinned to {num_draws} per half (R-hat {output.max_rhat:.3f}, "
    return train, evaluation, note + f"ESS {output.min_ess:.0f})"


def rejuvenate(problem: Problem, model_index: int, theta: Tensor, generator: torch.Generator) -> tuple[Tensor, float]:
    """``REJUVENATION_STEPS`` random-walk Metropolis steps from every row of ``theta``; the mean acceptance."""
    model = torch.full((len(theta),), model_index, dtype=torch.int64)
    active = problem.mask(model[:1])[0].nonzero()[:, 0]
    dim = len(active)
    cov = torch.eye(theta.shape[1], dtype=theta.dtype)  # inactive coordinates never move (random_walk_move masks)
    cov[active[:, None], active] = torch.cov(theta[:, active].T).reshape(dim, dim) + 1e-9 * torch.eye(
        dim, dtype=theta.dtype
    )
    chol = REJUVENATION_SCALE * 2.38 / math.sqrt(dim) * torch.linalg.cholesky(cov)
    state = ChainState(model, theta, problem.log_joint(model, theta))
    accepted = 0.0
    with torch.no_grad():
        for _ in range(REJUVENATION_STEPS):
            state, accept = random_walk_move(problem, state, chol, generator)
            accepted += float(accept.to(torch.float64).mean())
    return state.theta, accepted / REJUVENATION_STEPS


def repeated_fraction(theta: Tensor) -> float:
    """Fraction of rows that repeat an earlier row."""
    return 1.0 - len(torch.unique(theta, dim=0)) / max(1, len(theta))


def smc_halves(
    problem: Problem, model_index: int, num_draws: int, settings: EngineSettings, seed: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """N training and N evaluation draws of one model from two SMC runs of N particles, rejuvenated."""

    if not problem.has_prior:
        raise ValueError(f"{problem.name} has no prior to start SMC from; per-model draws need one")
    smc = dataclasses.replace(settings.smc, num_particles=num_draws, num_runs=2)
    output = run_smc(JaxTarget.of(problem), np.array([model_index]), None, smc, seed=seed)
    if not output.finished.all():
        raise RuntimeError(f"SMC for model {model_index} did not reach the posterior in {smc.max_steps} steps")
    generator = torch.Generator().manual_seed(seed)
    halves, notes = [], []
    for run in range(2):
        weights = torch.as_tensor(output.weights[0, run])
        picks = torch.multinomial(weights, num_draws, replacement=True, generator=generator)
        theta = torch.as_tensor(output.particles[0, run], dtype=torch.float64)[picks]
        copies = repeated_fraction(theta)
        theta, acceptance = rejuvenate(problem, model_index, theta, generator)
        halves.append(theta.numpy())
        notes.append(f"{copies:.0%} copies -> {repeated_fraction(theta):.1%} after rejuvenation (acc {acceptance:.2f})")
    return halves[0], halves[1], f"SMC 2 x {num_draws} particles; " + "; ".join(notes)


def per_model_draws(
    problem: Problem, num_draws: int, seed: int, log: Callable[[str], None] = print
) -> tuple[Draws, Draws]:
    """N training and N evaluation draws of every model, from runs of their own (see the module docstring)."""

    settings = settings_for(problem, gold_draws=num_draws, seed=seed)
    sources = stored_sources(problem)
    masks = problem.mask(problem.model_space.all_indices())
    train_parts, eval_parts, index_parts = [], [], []
    for i, (model_index, source) in enumerate(sources.items()):
        started = time.perf_counter()
        model_seed = seed + 7919 * i
        halves = nuts_halves(problem, model_index, num_draws, settings, model_seed) if source == "nuts" else None
        if halves is None:
            if source == "nuts":
                log(f"  model {problem.model_space.identifier(model_index)}: NUTS R-hat too large; SMC instead")
            halves = smc_halves(problem, model_index, num_draws, settings, model_seed)
        train, evaluation, note = halves
        log(
            f"  model {problem.model_space.identifier(model_index)}: {len(train)} + {len(evaluation)} draws, "
            f"{note}, {time.perf_counter() - started:.0f} s"
        )
        mask = masks[i].numpy()
        train_parts.append(np.where(mask, train, 0.0))
        eval_parts.append(np.where(mask, evaluation, 0.0))
        index_parts.append(model_index)

    def draws_of(parts: list[np.ndarray]) -> Draws:
        index = torch.cat(
            [torch.full((len(p),), m, dtype=torch.int64) for m, p in zip(index_parts, parts, strict=True)]
        )
        return Draws(index, torch.as_tensor(np.concatenate(parts), dtype=torch.float64))

    return draws_of(train_parts), draws_of(eval_parts)
