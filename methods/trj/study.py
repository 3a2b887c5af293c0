"""Variability of the Bartolucci bridge estimate (BBE) per across-model proposal: TRJ paper Figs. 5 and 7 (and 3-4).

Protocol (TRJ sec. 4.2 and 5.1; spec ``methods.md`` sec. 7). For each replicate r = 1..R:

1. a training set = ``problem.training_draws(N)`` and an evaluation set = ``problem.reference_draws(N)``, from
   generators of their own per replicate (for problems with a stored reference these are random subsets of its
   two disjoint halves, for ``sas`` fresh exact draws), shared by all proposal types of that replicate;
2. each proposal type is fitted on the training set (transports re-fitted every replicate);
3. ONE proposal is made from every evaluation draw, including the random choice of the target model
   (``--jumps uniform``: any other model; ``estimate``: j(k') proportional to the training frequencies);
4. the acceptance probabilities give eq. 9-10 of the paper (:func:`methods.trj.bbe.bartolucci_model_probs`), or
   the least-squares bridge over all proposed pairs where eq. 10 lacks a pair (``PairStatistics.graph_model_probs``).

Proposal types: ``rq`` (per-model RQ spline flows, "RQMA-NF"), ``affine`` (per-model mean and Cholesky factor,
"Affine NF"), ``standard`` (Brooks et al. 2003: shared coordinates kept, new ones drawn from N(0, s^2), s the prior
sd of each coordinate by default, as the paper's N(0, 10^2) for block VS), ``lopes-west`` (Lopes & West 2004
independence proposal, factor analysis only), ``ctrj`` (one conditional RQ flow on the saturated space, Algorithm 2;
the evaluation draws' inactive coordinates get fresh N(0, 1) auxiliaries) and ``exact`` (the problem's own exact
transports, ``sas`` only: with uniform jumps every alpha is min(1, pi(k') / pi(k)) and the BBE is exact).

Outputs in ``--out`` (default ``results/trj_study``): ``bbe_<problem>.csv`` (one row per proposal, replicate and
model), ``bbe_<problem>.png`` (violins of the estimates of P(model M), truth line and its +-2 SE band), and with
``--running`` also ``running_<problem>.png`` (running bridge estimates along ``trj``/``ctrj`` runs, Figs. 3-4).

The paper's protocols, for comparison: block VS (Fig. 7) 80 repetitions, one estimate each, N = 1,000 to 8,000
per-model SMC draws split 50/50; FA (Fig. 5) 10 training/evaluation pairs x 100 repetitions = 1,000 estimates with
N = 2,000 and 16,000 (flows re-fitted per pair, up to 3,000 flow iterations). The defaults here (R = 10, N = 4,000,
1,000 flow iterations) refit everything per replicate, a cheaper version of both. For problems with a stored
reference the replicates are random subsets of the same two halves of its draws (5,000 each for block VS and FA;
larger N is capped, see ``num_train``/``num_eval`` in the CSV), so their spread understates that over independent
sets, and any error in the stored draws is shared by all replicates. ``--fresh-draws`` makes the replicates
independent: each takes its training and evaluation draws (N each, disjoint) from a reference-engine run of its own
(the problem's reference settings, seed ``FRESH_SEED_BASE + 1000 seed + r``, and SMC particles as draws where the
stored reference took them from SMC; ~2 min per replicate on block VS), while the truth stays the stored reference.
Problems with exact samplers (``sas``) draw afresh anyway. ``--draws-per-model`` is TRJ's FA protocol: N counts
the draws of each model (N training and N evaluation draws per model, so 2N proposals per estimate on two models),
from per-model NUTS or SMC runs of each replicate's own (:mod:`methods.trj.study_draws`, ~30 s at N = 1,000 on FA).

Runtimes measured on a shared 2-core CPU machine (float64, CPU only), with ``OMP_NUM_THREADS=1``: small flows
ran many times slower with torch's default two threads on the loaded machine, so set it on small machines.
``sas --proposals exact,affine --replicates 10`` (N = 4,000): 0.2-5 s of study (idle to heavily loaded machine)
after ~4 s of imports; ``block-vs --proposals affine,standard`` (R = 10, N = 4,000): 0.4-9 s;
``factor-analysis-k23 --proposals lopes-west,affine,standard``: ~30 s (the KDE modes of Lopes & West take ~3 s per
fit); ``block-vs`` with every
proposal and the defaults (R = 10, N = 4,000, 1,000 flow iterations): ~18 min, nearly all flow fitting (~50 s per
replicate for the four ``rq`` flows, ~55 s for the ``ctrj`` flow). ``--running`` adds ~0.5 s (smoke) to ~1.5 s
(quick) per affine/standard run on these problems and ~50 s per quick ``rq`` run on block VS.

Run as ``python -m methods.trj.study PROBLEM [--proposals rq,affine,...] [--replicates R] [--repeats P] [--draws N]
[--model M] [--out DIR] [--seed S] [--flow-iterations I] [--jumps uniform|estimate] [--aux-scale S] [--fresh-draws]
[--draws-per-model]
[--running [--running-seeds S] [--running-budget smoke|quick]]``; ``--repeats`` makes P estimates per fitted proposal
from fresh proposals (the FA protocol's 100 repetitions per training/evaluation pair).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

from methods.rjmcmc.kernels import ChainState
from methods.trj.bbe import PairStatistics, bartolucci_model_probs
from methods.trj.kernels import JumpRecord, saturated_jump, transport_jump
from methods.trj.sampler import JumpChooser
from methods.trj.study_draws import per_model_draws
from methods.trj.transports import AffineTransport
from suite.plots import save_figure
from suite.problem import ExactTransport, Problem
from suite.types import Draws

PROPOSALS = ("rq", "affine", "standard", "lopes-west", "ctrj", "exact")
STUDY_JUMPS = ("uniform", "estimate")
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


@dataclass(frozen=True)
class StudySettings:
    """What one study does (the CLI's options)."""

    proposals: tuple[str, ...] = PROPOSALS
    replicates: int = 10
    draws: int = 4000
    model: int | None = None
    seed: int = 0
    flow_iterations: int = 1000
    jumps: str = "uniform"
    aux_scale: float | None = None  # None: the prior sd of each coordinate (1 without a prior)
    repeats: int = 1  # BBE estimates per fitted proposal, each from fresh proposals (the paper's FA protocol: 100)
    fresh_draws: bool = False  # each replicate's draws from its own reference-engine run (see replicate_draws)
    draws_per_model: bool = False  # N draws of every model, from runs of their own (methods.trj.study_draws)


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
        from methods.trj.proposals import LopesWestProposal

        reason = LopesWestProposal.supports(problem)
        return None if reason is None else f"Lopes & West needs a factor model: {reason}"
    if kind in ("rq", "ctrj"):
        name = "SplineTransport" if kind == "rq" else "ConditionalSplineTransport"
        try:
            from methods.trj import flows  # written separately; may be missing or mid-edit
        except (ImportError, SyntaxError) as exc:
            return f"the spline flows (methods.trj.flows) cannot be imported: {exc}"
        if not hasattr(flows, name):
            return f"methods.trj.flows has no {name}"
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
        from methods.trj.proposals import ScaledIdentityTransport

        scale = prior_scale(problem) if settings.aux_scale is None else settings.aux_scale
        transport = ScaledIdentityTransport(problem, scale)
    elif kind == "lopes-west":
        from methods.trj.proposals import LopesWestProposal, independence_jump

        proposal = LopesWestProposal.fit(problem, m, theta)

        def jump(state: ChainState, to: Tensor, log_ratio: Tensor, gen: torch.Generator) -> Any:
            return independence_jump(problem, state, proposal, to, log_ratio, gen)

        return Fitted(jump, False, time.perf_counter() - start)
    elif kind == "rq":
        from methods.trj.flows import SplineTransport

        transport = SplineTransport.fit(
            problem, m, theta, iterations=settings.flow_iterations, generator=generator, progress=False
        )
    elif kind == "ctrj":
        from methods.trj.flows import ConditionalSplineTransport

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
    :class:`suite.reference.store.Reference` (its halves are disjoint training and evaluation sets).
    """
    from suite.reference.cli import settings_for
    from suite.reference.engine import estimate_reference

    options = SimpleNamespace(particles=None, runs=None, gold_draws=num_draws, seed=seed)
    settings = settings_for(problem, options)
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
    of their own (:func:`methods.trj.study_draws.per_model_draws`, TRJ's FA protocol).
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


def truth_of(problem: Problem) -> tuple[Tensor | None, Tensor | None]:
    """The reference model probabilities and their standard errors (dense), each None when unknown."""
    reference = problem.reference_model_probs()
    if reference is None:
        return None, None
    k = int(problem.num_models)
    se = None
    if reference.se is not None:
        se = torch.zeros(k, dtype=torch.float64)
        se[reference.index] = reference.se
    return reference.dense(k), se


def default_model(problem: Problem, results: Sequence[ReplicateResult]) -> int:
    """The most probable model: by the reference when known, else by the mean estimate."""
    truth, _ = truth_of(problem)
    if truth is not None:
        return int(truth.argmax())
    return int(torch.stack([r.probs for r in results]).mean(0).argmax())


# --------------------------------------------------------------------------- outputs
def write_csv(problem: Problem, results: Sequence[ReplicateResult], path: Path) -> Path:
    """One row per proposal type, replicate and model."""
    truth, truth_se = truth_of(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for res in results:
            for k in range(len(res.probs)):
                writer.writerow(
                    {
                        "proposal": res.proposal,
                        "replicate": res.replicate,
                        "repeat": res.repeat,
                        "model": problem.model_space.identifier(k),
                        "model_index": k,
                        "estimate": repr(float(res.probs[k])),
                        "truth": "" if truth is None else repr(float(truth[k])),
                        "truth_se": "" if truth_se is None else repr(float(truth_se[k])),
                        "acceptance": f"{res.acceptance:.6g}",
                        "acceptance_from_model": f"{float(res.acceptance_from[k]):.6g}",
                        "estimator": res.estimator,
                        "num_train": res.num_train,
                        "num_eval": res.num_eval,
                        "fit_seconds": f"{res.fit_seconds:.4g}",
                    }
                )
    return path


def estimates_by_proposal(results: Sequence[ReplicateResult], model: int) -> dict[str, np.ndarray]:
    """The estimates of P(model) per proposal type, in the order the types first appear."""
    table: dict[str, list[float]] = {}
    for res in results:
        table.setdefault(res.proposal, []).append(float(res.probs[model]))
    return {kind: np.asarray(values) for kind, values in table.items()}


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def summary_rows(results: Sequence[ReplicateResult], model: int, truth: float | None) -> list[dict[str, Any]]:
    """Per proposal type: estimates, their mean, sd and RMSE for P(model), mean acceptance and fit time."""
    rows = []
    for kind, values in estimates_by_proposal(results, model).items():
        mine = [r for r in results if r.proposal == kind]
        values = _finite(values)  # replicates without any estimate are left out
        count = len(values)
        if not count:
            values = np.asarray([math.nan])
        rows.append(
            {
                "proposal": kind,
                "estimates": count,
                "mean": float(values.mean()),
                "sd": float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                "rmse": math.nan if truth is None else float(np.sqrt(np.mean((values - truth) ** 2))),
                "acceptance": float(np.nanmean([r.acceptance for r in mine])),
                "fit_seconds": float(np.mean([r.fit_seconds for r in mine if r.repeat == 0])),
                "fallbacks": sum(r.estimator != "eq10" for r in mine),
            }
        )
    return rows


def format_summary(rows: Sequence[dict[str, Any]], label: str, truth: float | None) -> str:
    """The summary rows as a fixed-width table."""
    head = f"BBE of {label} (truth {'unknown' if truth is None else f'{truth:.4f}'})"
    columns = ("n", 5), ("mean", 10), ("sd", 10), ("rmse", 10), ("accept", 9), ("fit s", 9), ("not eq10", 10)
    lines = [head, "proposal    " + "".join(f"{name:>{width}}" for name, width in columns)]
    for row in rows:
        lines.append(
            f"{row['proposal']:<12}{row['estimates']:>5}{row['mean']:>10.4f}{row['sd']:>10.4f}"
            f"{row['rmse']:>10.4f}{row['acceptance']:>9.3f}{row['fit_seconds']:>9.2f}{row['fallbacks']:>10}"
        )
    return "\n".join(lines)


def _colour(name: str, others: dict[str, str] | None = None) -> str:
    """One colour per proposal type in every plot (``name`` may be a run label such as "trj affine").

    Other names get the next unused colour, remembered in ``others``.
    """
    kind = name.split()[-1] if name.split() else name
    if kind in PROPOSALS:
        return f"C{PROPOSALS.index(kind)}"
    others = {} if others is None else others
    return others.setdefault(name, f"C{(len(PROPOSALS) + len(others)) % 10}")


def _draw_truth(ax: Any, truth: float | None, truth_se: float | None) -> None:
    """Horizontal truth line and its +-2 SE band."""
    if truth is None:
        return
    # Dashed and on top: estimates that sit on the truth (exact transports) stay visible beneath it.
    ax.axhline(truth, color="black", lw=1.0, ls="--", zorder=5, label=f"reference {truth:.4f}")
    if truth_se:
        ax.axhspan(truth - 2 * truth_se, truth + 2 * truth_se, color="grey", alpha=0.25, lw=0, label="±2 SE")


def plot_violins(
    estimates: dict[str, np.ndarray], label: str, truth: float | None, truth_se: float | None, title: str, path: Path
) -> Path:
    """A violin (or, for constant estimates, a bar) per proposal type with the replicates as points; saves a PNG."""
    names = list(estimates)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(names) + 2.5), 4.3))
    _draw_truth(ax, truth, truth_se)
    positions = np.arange(1, len(names) + 1)
    jitter = np.random.default_rng(0)
    for pos, name in zip(positions, names, strict=True):
        values = _finite(estimates[name])
        if not len(values):
            continue
        color = _colour(name)
        if len(values) > 1 and np.ptp(values) > 1e-12 * max(1.0, abs(values.mean())):
            parts = ax.violinplot(values, positions=[pos], widths=0.7, showextrema=False)
            for body in parts["bodies"]:
                body.set_facecolor(color)
                body.set_alpha(0.35)
        ax.hlines(
            values.mean(), pos - 0.3, pos + 0.3, color=color, lw=2, label="mean over estimates" if pos == 1 else None
        )
        ax.scatter(pos + jitter.uniform(-0.08, 0.08, len(values)), values, s=10, color=color, zorder=3)
    ax.set_xticks(positions, names)
    ax.set_xlim(0.4, len(names) + 0.6)
    ax.set_ylabel(f"estimate of {label}")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, ax, path)


def _running_of(item: Any) -> tuple[dict[str, list], str | None]:
    """The running-estimate dict of a record (dict or JSON path), a diagnostics dict or the dict itself; a label."""
    if isinstance(item, str | Path):
        item = json.loads(Path(item).read_text())
    label = None
    if "diagnostics" in item:  # a result record
        settings = item.get("method_settings") or {}
        transport = settings.get("transport") or item.get("method_options", {}).get("transport")
        label = item.get("method", "") + (f" {transport}" if transport and item.get("method") == "trj" else "")
        item = item["diagnostics"] or {}
    if "running_estimate" in item:
        item = item["running_estimate"]
    if not isinstance(item, dict) or "iteration" not in item or "prob" not in item:
        raise ValueError("expected a record, its diagnostics, or a running_estimate dict with 'iteration' and 'prob'")
    return item, label


def plot_running_estimates(
    records_or_diagnostics: Sequence[Any],
    model: int,
    truth: float | None,
    path: Path,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    truth_se: float | None = None,
    model_label: str | None = None,
) -> Path:
    """Running bridge estimates of P(model) against iteration, one line per run, runs with one label share a colour.

    Each item is a result record (a dict, or the path of its JSON file), its ``diagnostics`` dict, or the
    ``running_estimate`` dict itself; ``labels`` name the runs (default: method and transport of each record).
    """
    fig, ax = plt.subplots(figsize=(7.0, 4.3))
    _draw_truth(ax, truth, truth_se)
    seen: set[str] = set()
    others: dict[str, str] = {}
    for i, item in enumerate(records_or_diagnostics):
        running, found = _running_of(item)
        label = labels[i] if labels is not None else (found or "run")
        points = [(t, p[model]) for t, p in zip(running["iteration"], running["prob"], strict=True) if p is not None]
        if not points:
            continue
        x, y = zip(*points, strict=True)
        ax.plot(x, y, color=_colour(label, others), lw=1.2, alpha=0.8, label=None if label in seen else label)
        seen.add(label)
    ax.set_xlabel("iteration (after burn-in)")
    model_label = model_label or f"P(model {model})"
    ax.set_ylabel(f"running estimate of {model_label}")
    ax.set_title(title or f"running bridge estimates of {model_label}", fontsize=10)
    return save_figure(fig, ax, path)


# --------------------------------------------------------------------------- running estimates (Figs. 3-4)
def running_records(
    problem: Problem,
    proposals: Sequence[str],
    seeds: Sequence[int],
    profile: str,
    settings: StudySettings,
    flow_iterations: int | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run ``trj`` (one transport per proposal type) or ``ctrj`` for each seed; the successful records.

    ``flow_iterations`` overrides the budget profile's when given.
    """
    from suite.context import RunContext
    from suite.registry import make_method
    from suite.runner import execute

    shared: dict[str, Any] = {"jumps": settings.jumps}
    if flow_iterations is not None:
        shared["flow_iterations"] = flow_iterations
    records = []
    for kind in proposals:
        if kind == "ctrj":
            method = make_method("ctrj", **shared)
        else:
            options: dict[str, Any] = {"transport": kind, **shared}
            if kind == "standard":
                scale = prior_scale(problem) if settings.aux_scale is None else torch.tensor(settings.aux_scale)
                if not torch.allclose(scale, scale.mean(), rtol=0.05):  # beyond the prior-draw noise
                    log("standard (running): trj takes one aux_scale; using the mean prior sd")
                options["aux_scale"] = float(scale.mean())
            method = make_method("trj", **options)
        reason = method.supports(problem)
        if reason:
            log(f"running: skipping {kind}: {reason}")
            continue
        resolved = method.resolve(problem, profile)
        for seed in seeds:
            start = time.perf_counter()
            record = execute(problem, resolved, RunContext(seed=seed, profile=profile))
            if record["status"] != "ok":
                log(f"running: {kind} seed {seed} failed: {record['reason']}")
                continue
            log(f"running: {kind} seed {seed} done in {time.perf_counter() - start:.1f} s")
            records.append(record)
    return records


# --------------------------------------------------------------------------- CLI
def _proposal_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in PROPOSALS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown proposal(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(PROPOSALS)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m methods.trj.study``."""
    parser = argparse.ArgumentParser(
        prog="python -m methods.trj.study",
        description="Spread of the Bartolucci bridge estimate per across-model proposal (TRJ Figs. 5, 7).",
    )
    parser.add_argument("problem", help="a registered problem with an enumerable model space, e.g. sas, block-vs")
    parser.add_argument(
        "--proposals",
        type=_proposal_list,
        default=PROPOSALS,
        help=f"comma-separated, from {','.join(PROPOSALS)} (default: all that apply)",
    )
    parser.add_argument("--replicates", type=int, default=10, help="training/evaluation pairs R (default 10)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="BBE estimates per fitted proposal, from fresh proposals (paper's FA protocol: 100)",
    )
    parser.add_argument("--draws", type=int, default=4000, help="draws N in each training and evaluation set")
    parser.add_argument("--model", type=int, default=None, help="model index M to plot (default: most probable)")
    parser.add_argument("--out", type=Path, default=Path("results/trj_study"), help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--flow-iterations",
        type=int,
        default=None,
        help="flow training iterations (default 1000; --running: the budget profile's)",
    )
    parser.add_argument(
        "--jumps",
        choices=STUDY_JUMPS,
        default="uniform",
        help="uniform: any other model; estimate: j(k') = training frequency of k'",
    )
    parser.add_argument(
        "--aux-scale",
        type=float,
        default=None,
        help="sd of the standard proposal's new coordinates (default: prior sd per coordinate)",
    )
    parser.add_argument(
        "--fresh-draws",
        action="store_true",
        help="each replicate's training and evaluation draws from its own reference-engine run (independent "
        "replicates; minutes each) instead of subsets of the stored reference's draws",
    )
    parser.add_argument(
        "--draws-per-model",
        action="store_true",
        help="N counts the draws of each model, not of all together (TRJ's FA protocol): every replicate's N "
        "training and N evaluation draws of each model come from per-model NUTS or SMC runs of their own",
    )
    parser.add_argument(
        "--running",
        action="store_true",
        help="also run trj/ctrj per proposal type and plot running estimates (Figs. 3-4)",
    )
    parser.add_argument("--running-seeds", type=int, default=3, help="runs per proposal type with --running")
    parser.add_argument("--running-budget", choices=("smoke", "quick"), default="smoke")
    return parser


def _check(problem: Problem, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse what the study cannot do, with exit code 2."""
    reason = problem.unavailable_reason()
    if reason:
        parser.error(f"{args.problem} is unavailable: {reason}")
    k = problem.num_models
    if k is None or not 2 <= k <= MAX_MODELS:
        parser.error(f"{args.problem}: the study needs an enumerable space of 2 to {MAX_MODELS} models, not {k}")
    if args.model is not None and not 0 <= args.model < k:
        parser.error(f"--model must be in 0..{k - 1}")
    if args.replicates < 1 or args.repeats < 1 or args.draws < 2:
        parser.error("--replicates and --repeats must be >= 1 and --draws >= 2")
    if args.draws_per_model and not problem.has_prior:
        parser.error(f"--draws-per-model starts SMC from the prior, and {args.problem} has none")


def report_study(problem: Problem, results: Sequence[ReplicateResult], settings: StudySettings, out: Path) -> int:
    """Write the CSV and the violin plot, print the summary table; returns the model index plotted."""
    truth, truth_se = truth_of(problem)
    model = settings.model if settings.model is not None else default_model(problem, results)
    label = f"P({problem.model_space.identifier(model)})"
    true_value = None if truth is None else float(truth[model])
    true_se = None if truth_se is None else float(truth_se[model])
    csv_path = write_csv(problem, results, out / f"bbe_{problem.name}.csv")
    repeats = f" x {settings.repeats} repeats" if settings.repeats > 1 else ""
    title = (
        f"{problem.name}: Bartolucci bridge estimates of {label}\n"
        f"N = {settings.draws} training / evaluation draws, R = {settings.replicates}{repeats}, "
        f"{settings.jumps} jumps"
    )
    png = plot_violins(
        estimates_by_proposal(results, model), label, true_value, true_se, title, out / f"bbe_{problem.name}.png"
    )
    print(format_summary(summary_rows(results, model, true_value), label, true_value))
    print(f"wrote {csv_path} and {png}")
    return model


def report_running(problem: Problem, args: argparse.Namespace, settings: StudySettings, model: int) -> Path | None:
    """Run trj/ctrj for each usable proposal type and seed, and draw their running estimates of P(model)."""
    kinds = usable_proposals(problem, settings.proposals, lambda _: None)  # reasons were printed by the study
    seeds = range(args.running_seeds)
    records = running_records(problem, kinds, seeds, args.running_budget, settings, args.flow_iterations)
    if not records:
        print("running: no run succeeded")
        return None
    truth, truth_se = truth_of(problem)
    label = f"P({problem.model_space.identifier(model)})"
    path = plot_running_estimates(
        records,
        model,
        None if truth is None else float(truth[model]),
        args.out / f"running_{problem.name}.png",
        truth_se=None if truth_se is None else float(truth_se[model]),
        model_label=label,
        title=f"{problem.name}: running bridge estimates of {label} ({args.running_budget} budget)",
    )
    print(f"wrote {path}")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study from the command line; returns the exit code."""
    from suite.registry import make_problem  # its lookups import and register the built-in problems and methods

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        problem = make_problem(args.problem)
    except (KeyError, ValueError) as exc:
        parser.error(str(exc))
    _check(problem, args, parser)
    settings = StudySettings(
        proposals=args.proposals,
        replicates=args.replicates,
        draws=args.draws,
        model=args.model,
        seed=args.seed,
        flow_iterations=1000 if args.flow_iterations is None else args.flow_iterations,
        jumps=args.jumps,
        aux_scale=args.aux_scale,
        repeats=args.repeats,
        fresh_draws=args.fresh_draws,
        draws_per_model=args.draws_per_model,
    )
    start = time.perf_counter()
    results = run_study(problem, settings)
    if not results:
        print("no proposal type could be evaluated")
        return 1
    model = report_study(problem, results, settings, args.out)
    print(f"study: {time.perf_counter() - start:.1f} s")
    if args.running:
        report_running(problem, args, settings, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
