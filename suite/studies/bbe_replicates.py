"""Variability of the Bartolucci bridge estimate (BBE) per across-model proposal: TRJ paper Figs. 5 and 7 (and 3-4).

For each replicate: a training and an evaluation set of draws (shared by all proposal types of the replicate), each
proposal type fitted on the training set, ONE proposal made from every evaluation draw (the target model drawn too),
and the acceptance probabilities turned into model probabilities by eq. 9-10 of the paper
(``methods.trj.bartolucci_model_probs``) or the least-squares bridge where eq. 10 lacks a pair. Proposal types:
``rq``, ``affine``, ``standard``, ``lopes-west``, ``ctrj`` and ``exact``. Writes ``bbe_<problem>.csv`` and
``bbe_<problem>.png`` (and ``running_<problem>.png`` with ``--running``) to ``--out``.

The protocol step by step, the paper's protocols beside these defaults, the draws options (``--fresh-draws``,
``--draws-per-model``), runtimes and the command line: docs/studies.md, "The BBE study in detail".
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np
import torch
from torch import Tensor

from methods.common.chains import ChainState
from methods.trj import (
    AffineTransport,
    ConditionalSplineTransport,
    JumpChooser,
    JumpRecord,
    LopesWestProposal,
    PairStatistics,
    ScaledIdentityTransport,
    SplineTransport,
    bartolucci_model_probs,
    independence_jump,
    saturated_jump,
    transport_jump,
)
from suite.core.problem import ExactTransport, Problem
from suite.core.types import Draws
from suite.reference.engine import estimate_reference
from suite.reference.settings import settings_for
from suite.studies.bbe_draws import per_model_draws
from suite.studies.bbe_settings import PROPOSALS, StudySettings

#: Prior draws per model for the "standard" proposal's default auxiliary scale (the prior sd per coordinate).
PRIOR_SCALE_DRAWS = 20_000
#: Largest model space studied (a transport and bridge cells per model; the trj method's max_models).
MAX_MODELS = 256
#: Seeds of the reference-engine runs behind ``--fresh-draws`` start here (the shipped references use seed 0).
FRESH_SEED_BASE = 1000
CSV_FIELDS = (
    "proposal",
    "replicate",
    "repeat",
    "model",
    "model_index",
    "estimate",
    "truth",
    "truth_se",
    "acceptance",
    "acceptance_from_model",
    "estimator",
    "num_train",
    "num_eval",
    "fit_seconds",
)

#: (state, proposed models, log jump ratios, generator) -> (new state, accept flags, proposal record).
JumpFn = Callable[[ChainState, Tensor, Tensor, torch.Generator], tuple[ChainState, Tensor, JumpRecord]]


@dataclass
class Fitted:
    """A fitted across-model proposal: its jump, whether it acts on saturated states, and the fit time."""

    jump: JumpFn
    saturated: bool
    seconds: float
    note: str = ""


@dataclass
class ReplicateResult:
    """The BBE of one proposal type on one training/evaluation pair."""

    proposal: str
    replicate: int
    repeat: int
    probs: Tensor  # [K]
    acceptance: float  # mean alpha over proposals that change model
    acceptance_from: Tensor  # [K] mean alpha of proposals out of each model (NaN if none)
    estimator: str  # see bbe_from_record
    num_train: int
    num_eval: int
    fit_seconds: float


# --------------------------------------------------------------------------- proposals
def skip_reason(problem: Problem, kind: str) -> str | None:
    """Why proposal type ``kind`` cannot be used on ``problem`` here, or None."""
    if kind == "exact" and not isinstance(problem, ExactTransport):
        return f"{problem.name} has no exact transports (to_reference/from_reference)"
    if kind == "lopes-west":
        reason = LopesWestProposal.supports(problem)
        return None if reason is None else f"Lopes & West needs a factor model: {reason}"
    return None


@cache
def prior_scale(problem: Problem, num_draws: int = PRIOR_SCALE_DRAWS) -> Tensor:
    """Per-coordinate prior sd over the models where the coordinate is active, ``[D]`` (ones without a prior)."""
    if not problem.has_prior:
        return torch.ones(problem.dim_max, dtype=torch.float64)
    models = problem.model_space.all_indices(torch.device("cpu"))
    per_model = max(64, num_draws // len(models))
    model_index = models.repeat_interleave(per_model)
    theta = problem.sample_prior(model_index, torch.Generator().manual_seed(0)).to(torch.float64)
    active = problem.mask(model_index)
    count = active.sum(0).clamp_min(2)
    mean = torch.where(active, theta, 0.0).sum(0) / count
    var = torch.where(active, (theta - mean) ** 2, 0.0).sum(0) / (count - 1)
    return torch.where(active.sum(0) >= 2, var.sqrt(), 1.0).clamp_min(1e-12)


def fit_proposal(
    problem: Problem, kind: str, train: Draws, settings: StudySettings, generator: torch.Generator
) -> Fitted:
    """Fit proposal type ``kind`` on the training draws and wrap its jump (raises ValueError if it cannot)."""
    start = time.perf_counter()
    m, theta = train.model_index, train.theta
    note = ""
    saturated = False
    if kind == "exact":
        transport: Any = problem
    elif kind == "affine":
        try:
            transport = AffineTransport.fit(problem, m, theta)
        except ValueError as exc:  # a model with too few draws: pooled shrinkage, as the trj method does
            transport, note = AffineTransport.fit(problem, m, theta, shrink=True), f"shrunk moments ({exc})"
    elif kind == "standard":
        scale = prior_scale(problem) if settings.aux_scale is None else settings.aux_scale
        transport = ScaledIdentityTransport(problem, scale)
    elif kind == "lopes-west":
        proposal = LopesWestProposal.fit(problem, m, theta)

        def jump(state: ChainState, to: Tensor, log_ratio: Tensor, gen: torch.Generator) -> Any:
            return independence_jump(problem, state, proposal, to, log_ratio, gen)

        return Fitted(jump, False, time.perf_counter() - start)
    elif kind == "rq":
        transport = SplineTransport.fit(
            problem, m, theta, iterations=settings.flow_iterations, generator=generator, progress=False
        )
    elif kind == "ctrj":
        transport = ConditionalSplineTransport.fit(
            problem, m, theta, iterations=settings.flow_iterations, generator=generator, progress=False
        )
        saturated = True
    else:
        raise ValueError(f"unknown proposal {kind!r}; valid: {', '.join(PROPOSALS)}")
    kernel = saturated_jump if saturated else transport_jump

    def jump(state: ChainState, to: Tensor, log_ratio: Tensor, gen: torch.Generator) -> Any:
        return kernel(problem, state, transport, to, log_ratio, gen)

    return Fitted(jump, saturated, time.perf_counter() - start, note)


# --------------------------------------------------------------------------- one BBE
def training_frequencies(problem: Problem, train: Draws) -> Tensor:
    """The training set's model frequencies, ``[K]`` (the ``estimate`` jump law)."""
    counts = torch.bincount(train.model_index, minlength=int(problem.num_models)).to(torch.float64)
    return counts / counts.sum()


def propose_once(
    problem: Problem,
    fitted: Fitted,
    evaluation: Draws,
    chooser: JumpChooser,
    generator: torch.Generator,
    log_joint: Tensor | None = None,
) -> JumpRecord:
    """One proposal from every evaluation draw (all draws at once); returns the proposal record.

    ``log_joint`` of the evaluation draws may be passed in when it is already known.
    """
    m, theta = evaluation.model_index, evaluation.theta
    if log_joint is None:
        log_joint = problem.log_joint(m, theta)
    if fitted.saturated:  # CTRJ: the inactive coordinates are auxiliary N(0, 1) variables (log_joint ignores them)
        fresh = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
        theta = torch.where(problem.mask(m), theta, fresh)
    state = ChainState(m, theta, log_joint)
    model_to, log_ratio = chooser(m, generator)
    with torch.no_grad():
        _, _, record = fitted.jump(state, model_to, log_ratio.to(theta.dtype), generator)
    return record


def bbe_from_record(record: JumpRecord, num_models: int) -> tuple[Tensor, str]:
    """Eq. 10, or the least-squares bridge where eq. 10 lacks a pair; the estimate and which one was used.

    ``graph-partial`` marks a least-squares estimate that reached only some models (the others get 0);
    ``none`` one that could not be formed at all (NaN).
    """
    try:
        return bartolucci_model_probs(record, num_models)[0], "eq10"
    except ValueError:
        pass
    try:
        probs, _, reached = PairStatistics.of(record, num_models).graph_model_probs()
    except RuntimeError:  # a singular least-squares system: pairs known only with infinite variance
        return torch.full((num_models,), math.nan, dtype=torch.float64), "none"
    return probs, "graph" if bool(reached.all()) else "graph-partial"


def acceptance_summary(record: JumpRecord, num_models: int) -> tuple[float, Tensor]:
    """Mean acceptance probability of proposals that change model: overall and per model proposed from."""
    moved = record.model_from != record.model_to
    alpha = torch.nan_to_num(record.log_alpha.to(torch.float64), nan=-math.inf).exp()[moved]
    origin = record.model_from[moved]
    total = torch.zeros(num_models, dtype=torch.float64).index_add_(0, origin, alpha)
    count = torch.bincount(origin, minlength=num_models).to(torch.float64)
    overall = float(alpha.mean()) if alpha.numel() else math.nan
    return overall, torch.where(count > 0, total / count.clamp_min(1), math.nan)


# --------------------------------------------------------------------------- the study
def replicate_generator(seed: int, replicate: int, purpose: str) -> torch.Generator:
    """The generator of one replicate for ``purpose``: "train", "eval", or a proposal type (its fit and jumps).

    Each proposal type has its own stream, so adding or dropping types leaves the others' estimates unchanged.
    """
    purposes = ("train", "eval", *PROPOSALS)
    return torch.Generator().manual_seed(1_000_003 * seed + 16 * replicate + purposes.index(purpose))


def fresh_seed(seed: int, replicate: int) -> int:
    """The seed of replicate ``replicate``'s own reference-engine run under ``--fresh-draws``."""
    return FRESH_SEED_BASE + 1000 * seed + replicate


def draws_from_stored_reference(problem: Problem) -> bool:
    """Whether the problem's training and evaluation draws are subsets of its stored reference (the default)."""
    own = type(problem)
    return (
        own.training_draws is Problem.training_draws
        and own.reference_draws is Problem.reference_draws
        and problem.stored_reference() is not None
    )


def stored_draws_from_smc(problem: Problem) -> bool:
    """Whether the stored reference took every model's gold draws from SMC particles (none from NUTS)."""
    reference = problem.stored_reference()
    per_model = {} if reference is None else (reference.provenance.get("per_model") or {})
    return bool(per_model) and all(str(d.get("draws_from", "smc")).startswith("smc") for d in per_model.values())


def fresh_reference(problem: Problem, num_draws: int, seed: int) -> Any:
    """An independent reference-engine run: the problem's reference settings, ``seed``, ``num_draws`` gold draws.

    Where the stored reference's draws all came from SMC particles, so do the fresh run's (no NUTS): NUTS can pass
    its R-hat check by chance with every chain in the same part of a multimodal posterior, as on block VS with
    seed 1000, whose NUTS draws of models (1,0,1,1) and (1,1,1,1) (R-hat 1.02, 1.03) had 0.66-0.85 of the
    posterior sd; with NUTS allowed, six such runs gave BBEs of P((1,1,1,1)) 0.012 below its exact value. Returns the
    :class:`suite.store.references.Reference` (its halves are disjoint training and evaluation sets).
    """

    settings = settings_for(problem, gold_draws=num_draws, seed=seed)
    if stored_draws_from_smc(problem):
        settings = dataclasses.replace(settings, max_nuts_models=0)
    return estimate_reference(problem, settings, log=lambda *_: None)


def replicate_draws(
    problem: Problem, settings: StudySettings, replicate: int, log: Callable[[str], None] = print
) -> tuple[Draws | None, Draws | None]:
    """Training and evaluation draws of one replicate.

    By default random subsets of the stored reference's two halves (``problem.training_draws`` and
    ``reference_draws``). With ``settings.fresh_draws`` (where the draws would be such subsets) both come from
    the two halves of an independent reference-engine run with a seed of its own (:func:`fresh_reference`,
    :func:`fresh_seed`), so replicates share no draws, neither with each other nor with the stored reference.
    With ``settings.draws_per_model`` N training and N evaluation draws of *every* model come from per-model runs
    of their own (:func:`suite.studies.bbe_draws.per_model_draws`, TRJ's FA protocol).
    """
    if settings.draws_per_model:
        seed = fresh_seed(settings.seed, replicate)
        started = time.perf_counter()
        log(f"replicate {replicate + 1}: {settings.draws} draws per model from runs of their own (seed {seed})")
        train, evaluation = per_model_draws(problem, settings.draws, seed, log)
        log(f"replicate {replicate + 1}: per-model draws in {time.perf_counter() - started:.1f} s")
        return train, evaluation
    train_gen = replicate_generator(settings.seed, replicate, "train")
    eval_gen = replicate_generator(settings.seed, replicate, "eval")
    if settings.fresh_draws and draws_from_stored_reference(problem):
        seed = fresh_seed(settings.seed, replicate)
        started = time.perf_counter()
        reference = fresh_reference(problem, 2 * settings.draws, seed)
        probs = ", ".join(f"{p:.4f}" for p in np.asarray(reference.prob)[:8])
        log(
            f"replicate {replicate + 1}: fresh reference-engine draws (seed {seed}, "
            f"{time.perf_counter() - started:.1f} s; its model probabilities {probs})"
        )
        return (
            reference.draws(settings.draws, train_gen, split="train"),
            reference.draws(settings.draws, eval_gen, split="test"),
        )
    return problem.training_draws(settings.draws, train_gen), problem.reference_draws(settings.draws, eval_gen)


def usable_proposals(problem: Problem, proposals: Sequence[str], log: Callable[[str], None] = print) -> list[str]:
    """The proposal types that apply to ``problem``; the others are reported through ``log`` and dropped."""
    kept = []
    for kind in proposals:
        reason = skip_reason(problem, kind)
        if reason is None:
            kept.append(kind)
        else:
            log(f"skipping {kind}: {reason}")
    return kept


def run_study(problem: Problem, settings: StudySettings, log: Callable[[str], None] = print) -> list[ReplicateResult]:
    """All replicates of all usable proposal types (training/evaluation sets shared across types per replicate)."""
    num_models = int(problem.num_models)
    proposals = usable_proposals(problem, settings.proposals, log)
    failed: set[str] = set()
    results: list[ReplicateResult] = []
    for r in range(settings.replicates):
        train, evaluation = replicate_draws(problem, settings, r, log)
        if train is None or evaluation is None:
            raise ValueError(f"{problem.name} provides no posterior draws to train and evaluate on")
        estimate = training_frequencies(problem, train)
        log_joint = problem.log_joint(evaluation.model_index, evaluation.theta)
        started = time.perf_counter()
        for kind in proposals:
            if kind in failed:
                continue
            work_gen = replicate_generator(settings.seed, r, kind)
            try:
                fitted = fit_proposal(problem, kind, train, settings, work_gen)
            except ValueError as exc:
                log(f"skipping {kind}: fitting failed ({exc})")
                failed.add(kind)
                continue
            if fitted.note and r == 0:
                log(f"{kind}: {fitted.note}")
            chooser = JumpChooser(problem, settings.jumps, estimate)
            for repeat in range(settings.repeats):
                record = propose_once(problem, fitted, evaluation, chooser, work_gen, log_joint)
                probs, estimator = bbe_from_record(record, num_models)
                overall, per_model = acceptance_summary(record, num_models)
                results.append(
                    ReplicateResult(
                        kind,
                        r,
                        repeat,
                        probs,
                        overall,
                        per_model,
                        estimator,
                        len(train),
                        len(evaluation),
                        fitted.seconds,
                    )
                )
        log(f"replicate {r + 1}/{settings.replicates} done in {time.perf_counter() - started:.1f} s")
    return results
