"""``tdbench bbe-study PROBLEM``: the command line of the bridge-estimate study (:mod:`suite.studies.bbe_study`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

from suite.core.registry import make_problem
from suite.studies.bbe_settings import PROPOSALS, STUDY_JUMPS, StudySettings
from suite.studies.bbe_study import RunningPlan, bbe_refusal, run_bbe


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


def main(argv: Sequence[str] | None = None, prog: str = "tdbench bbe-study") -> int:
    """Run the study from the command line; returns the exit code."""

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        problem = make_problem(args.problem)
    except (KeyError, ValueError) as exc:
        parser.error(str(exc))
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
    why = bbe_refusal(problem, settings)
    if why is not None:
        parser.error(why)
    running = None
    if args.running:
        running = RunningPlan(
            seeds=args.running_seeds, budget=args.running_budget, flow_iterations=args.flow_iterations
        )
    return run_bbe(problem, settings, args.out, running)


if __name__ == "__main__":
    sys.exit(main())
