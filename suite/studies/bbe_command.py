"""``tdbench bbe-study PROBLEM``: the bridge-estimate study's command line (see :mod:`suite.studies.bbe_replicates`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

from suite.core.problem import Problem
from suite.core.registry import make_problem
from suite.studies.bbe_output import (
    default_model,
    estimates_by_proposal,
    format_summary,
    plot_running_estimates,
    plot_violins,
    running_records,
    summary_rows,
    truth_of,
    write_csv,
)
from suite.studies.bbe_replicates import (
    MAX_MODELS,
    PROPOSALS,
    STUDY_JUMPS,
    ReplicateResult,
    StudySettings,
    run_study,
    usable_proposals,
)


def _proposal_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in PROPOSALS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown proposal(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(PROPOSALS)}"
        )
    return names


def build_parser(prog: str = "tdbench bbe-study") -> argparse.ArgumentParser:
    """The command line of ``tdbench bbe-study``."""
    parser = argparse.ArgumentParser(
        prog=prog,
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


def main(argv: Sequence[str] | None = None, prog: str = "tdbench bbe-study") -> int:
    """Run the study from the command line; returns the exit code."""

    parser = build_parser(prog)
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
