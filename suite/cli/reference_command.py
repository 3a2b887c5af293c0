"""``tdbench reference PROBLEM[,PROBLEM...]``: compute, store and show ground-truth references."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from suite.core.device import tune_allocator
from suite.core.problem import Problem
from suite.core.registry import UnknownNameError, available_problems, make_problem
from suite.reference.engine import estimate_reference
from suite.reference.rjmcmc_gold import app_e1_settings, estimate_by_rjmcmc
from suite.reference.settings import settings_for
from suite.store import references as store
from suite.store.references import has_exact_reference


def show(problem: Problem, reference: store.Reference, exact: np.ndarray | None = None, top: int = 12) -> None:
    """Print the most probable models with log evidence, probability and their standard errors."""
    order = np.argsort(-reference.prob)[:top]
    models = reference.models()
    header = f"{'model':>24} {'log p(D|m)':>12} {'± se':>8} {'p(m|D)':>9} {'± se':>8}"
    print(header + ("      exact" if exact is not None else ""))
    for i in order:
        ident = problem.model_space.identifier(int(models[i]))
        line = f"{ident:>24} {reference.log_evidence[i]:12.4f} {reference.log_evidence_se[i]:8.4f} "
        line += f"{reference.prob[i]:9.5f} {reference.prob_se[i]:8.5f}"
        if exact is not None:
            line += f"  {exact[i]:9.5f}"
        print(line)


def add_checksums(problems: list[Problem]) -> int:
    """Add the arrays' checksum to each stored reference of ``problems`` that lacks one; 1 if any is invalid."""
    status = 0
    for problem in problems:
        path = store.find(problem)
        if path is None:
            print(f"{problem.name}: no stored reference")
            continue
        try:
            digest = store.add_checksum(path)
        except store.InvalidReferenceError as exc:
            print(f"{problem.name}: not changed: {exc}")
            status = 1
            continue
        print(f"{problem.name}: {path.with_suffix('.json')} has {store.CHECKSUM_KEY} {digest}")
    return status


def main(argv: list[str] | None = None, prog: str = "tdbench reference") -> int:
    """Entry point."""
    tune_allocator()
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("problems", help="comma-separated problem names, or 'all'")
    parser.add_argument("--force", action="store_true", help="recompute even if a reference is stored")
    parser.add_argument(
        "--out",
        type=Path,
        default=store.SHIPPED_DIR,
        help=f"folder to store references in (default: the shipped ones, {store.SHIPPED_DIR}; another folder is "
        f"found when {store.ENV_VAR} names it)",
    )
    parser.add_argument("--particles", type=int, default=None, help="SMC particles per run")
    parser.add_argument("--runs", type=int, default=None, help="independent SMC runs per model")
    parser.add_argument("--gold-draws", type=int, default=10_000, help="gold-standard draws to store")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile",
        default="quick",
        choices=["quick", "paper"],
        help="sizes of RJMCMC gold standards (spaces too large to enumerate): quick (1,024 chains, a quarter of "
        "the authors' lengths; the shipped ones) or paper (VTI App. E.1: 4,096 chains, full lengths)",
    )
    parser.add_argument("--chains", type=int, default=None, help="chains of an RJMCMC gold standard (overrides)")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="for problems with exact answers: estimate anyway and compare (nothing is stored)",
    )
    parser.add_argument(
        "--add-checksum",
        action="store_true",
        help="check the stored references of these problems and add the checksum of their arrays to their json "
        "(for references written before checksums were kept; the arrays are not changed; nothing is computed)",
    )
    args = parser.parse_args(argv)
    names = list(available_problems()) if args.problems == "all" else args.problems.split(",")
    try:
        chosen = [make_problem(n) for n in names]
    except UnknownNameError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.add_checksum:
        return add_checksums(chosen)
    for problem in chosen:
        if problem.unavailable_reason():
            print(f"{problem.name}: unavailable: {problem.unavailable_reason()}")
            continue
        if has_exact_reference(problem) and not args.validate:
            print(f"{problem.name}: exact ground truth; nothing to compute (--validate compares the engine with it)")
            continue
        problem.use_reference_profile(args.profile)
        sized = store.evidence_method(problem) == "rjmcmc"  # only the RJMCMC gold standards come in two sizes
        stored = store.find_exact(problem, args.profile) if sized else store.find(problem)
        if not args.validate and not args.force and stored is not None:
            why = store.reference_problem(problem)
            if why:
                print(f"{problem.name}: unusable: {why}")
                continue
            print(f"{problem.name}: stored at {stored} (--force recomputes)")
            show(problem, store.load(problem))
            continue
        evidence = store.evidence_method(problem)
        if evidence == "none":
            print(f"{problem.name}: no reference can be computed: {problem.reference_settings.get('why', '')}")
            continue
        if evidence == "rjmcmc":
            if args.validate:
                print(f"{problem.name}: an RJMCMC gold standard has no exact answer to validate against")
                continue
            rjmcmc = app_e1_settings(problem.dim_max, args.profile, seed=args.seed, num_gold_draws=args.gold_draws)
            if args.chains:
                rjmcmc = dataclasses.replace(rjmcmc, num_chains=args.chains)
            print(f"{problem.name}: RJMCMC gold standard, {rjmcmc.as_dict()}")
            reference = estimate_by_rjmcmc(problem, rjmcmc)
        else:
            reference = estimate_reference(
                problem,
                settings_for(
                    problem, particles=args.particles, runs=args.runs, gold_draws=args.gold_draws, seed=args.seed
                ),
            )
        if args.validate and has_exact_reference(problem):
            show(problem, reference, exact=problem.reference_model_probs().dense(problem.num_models).numpy())
            continue
        path = reference.save(args.out)
        print(f"{problem.name}: stored {path} in {reference.provenance['seconds']} s")
        show(problem, reference)
    return 0
