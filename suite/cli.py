"""The ``tdbench`` command line: ``run`` (plan runs, execute the unfinished ones, report), ``list``, ``describe``,
``report``. ``run_all.py ARGS`` is ``tdbench run ARGS``; so is ``tdbench ARGS`` without a subcommand.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite import checkpoints as ckpt
from suite import records as rec
from suite.grid import dry_run_line
from suite.harness import DEVICE_CHOICES, tune_allocator
from suite.method import DTYPES, PROFILES
from suite.options import OptionError, check_option, method_annotations, problem_annotations
from suite.reference import store as reference_store
from suite.registry import (
    available_methods,
    available_problems,
    make_problem,
    method_class,
    problem_class,
)
from suite.report import report_from_folder
from suite.run import Execution, GridOutcome, GridSpec, PlannedRun, Skipped, UsageError, plan_grid, run_grid
from suite.run.grid import LOST
from suite.run.spec import CLUSTERS, EXECUTORS
from suite.terminal import clip, wrap

__all__ = ["LOST", "PlannedRun", "Skipped", "UsageError", "grid_from_args", "grid_from_argv", "main", "run_all"]

EXIT_RULES = """exit status:
  0  every planned run has its record; runs whose method failed are results (status "failed", counted on the
     leaderboards with their reasons, and summarised at the end)
  1  a run ended without a record (a worker process crashed or was killed, an error outside the method) or the
     disk filled up; finished records are kept, so running the same command again resumes
  2  bad input, refused before any work
  130  interrupted (Ctrl-C); running the same command again resumes"""


RUN_DESCRIPTION = (
    "Run transdimensional samplers on benchmark problems, write every run's record, the leaderboards, plots and "
    "index.html, and print the leaderboards. With no arguments: the quick profile of every registered problem "
    "and method."
)


def build_parser(prog: str = "run_all.py") -> argparse.ArgumentParser:
    """The argument parser of ``run`` (``run_all.py``), its usage line naming ``prog``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=RUN_DESCRIPTION, epilog=EXIT_RULES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_arguments(parser)
    return parser


def build_tdbench_parser(prog: str = "tdbench") -> argparse.ArgumentParser:
    """The argument parser of ``tdbench`` with its subcommands."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="tdbench: benchmark transdimensional samplers. "
        f"'{prog} COMMAND -h' explains a command; '{prog} ARGS' without a command is '{prog} run ARGS'.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run",
        help="run methods on problems and write records, leaderboards and index.html",
        description=RUN_DESCRIPTION,
        epilog=EXIT_RULES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(run)
    commands.add_parser(
        "list",
        help="list the registered problems and methods",
        description="List the registered problems and methods with their one-line descriptions.",
    )
    describe = commands.add_parser(
        "describe",
        help="a problem's or method's documentation, options with types, defaults and presets per profile",
        description="Print a problem's or method's documentation and its options: types, defaults and, for a "
        "method, the value each profile runs with.",
    )
    describe.add_argument("name", help="a problem or method name (see 'list')")
    report = commands.add_parser(
        "report",
        help="rewrite leaderboards, plots and index.html from a results folder's records, without running",
        description="Regenerate every leaderboard, plot and index.html of a results folder from its records alone "
        "(no problem or method code is imported), and print the leaderboards.",
    )
    report.add_argument("out", type=_out_folder, metavar="RESULTS_DIR", help="a results folder holding records/")
    report.add_argument("--wide", action="store_true", help="print the full leaderboards (lines over 120 columns)")
    from suite.studies import STUDIES

    study = commands.add_parser(
        "study",
        help="regenerate one of the papers' figures or tables: " + ", ".join(STUDIES),
        description="Run a study (variants of methods on the paper's problems at a budget this machine affords) "
        "and write its table (CSV, Markdown) and figure beside the paper's numbers. Studies: "
        + "; ".join(f"{name}: {item.description}" for name, item in STUDIES.items()),
    )
    study.add_argument("name", choices=list(STUDIES), metavar="NAME", help=f"one of: {', '.join(STUDIES)}")
    study.add_argument("--out", type=_out_folder, default=None, help="results folder (default: results/studies/NAME)")
    study.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per variant and problem; for the TRJ bridge-estimate studies, fits per N (default: the study's)",
    )
    study.add_argument(
        "--data-sets",
        type=int,
        default=None,
        help="problems with several data sets run the first N (studies of such problems only; default: the study's)",
    )
    study.add_argument("--force", action="store_true", help="re-run runs (or N) that already have results")
    return parser


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``run``, shared by ``tdbench run`` and ``run_all.py``."""
    parser.add_argument("--problems", default="all", help="comma-separated problem names, or 'all' (default)")
    parser.add_argument("--methods", default="all", help="comma-separated method names, or 'all' (default)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per (problem, method), seeds 0..N-1 (default: 2 smoke, 2 quick, 10 paper; "
        "a method may ask for fewer in a profile, e.g. the VTI methods run 1 seed in quick)",
    )
    parser.add_argument(
        "--data-sets",
        type=int,
        default=None,
        help="problems with several data sets (linear-dag-bge-*) run the first N (default: the profile's count)",
    )
    parser.add_argument(
        "--profile",
        default="quick",
        choices=PROFILES,
        help="preset sizes: smoke (seconds), quick (default), paper (the papers' settings)",
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES, help="auto picks CUDA when present")
    parser.add_argument("--dtype", default="float64", choices=list(DTYPES), help="floating-point type of the methods")
    parser.add_argument("--draws", type=int, default=4096, help="posterior draws each run returns (default 4096)")
    parser.add_argument(
        "--eval-draws",
        type=int,
        default=None,
        help="gold-standard draws for cross-entropy (default: 2000 smoke, 10000 quick, 100000 paper)",
    )
    parser.add_argument("--out", type=_out_folder, default=None, help="results folder (default: results/<profile>)")
    parser.add_argument(
        "--force", action="store_true", help="re-run runs that already have a record (and drop their checkpoints)"
    )
    parser.add_argument("--list", action="store_true", help="list registered problems and methods, then exit")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--wide", action="store_true", help="print the full leaderboards (lines over 120 columns)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rewrite the leaderboards, plots and index.html of --out (default results/<profile>) "
        "from its records",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs executed side by side in worker processes (default: one per CPU core, at most 8; 1 on a GPU). "
        "Each job gets an equal share of the threads; use --jobs 1 when comparing walltimes",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="METHOD.NAME=VALUE",
        help="set a method option, e.g. vti-surrogate.flow='spline(4,6)' or rjmcmc-baseline.num_chains=2048 "
        "(repeatable; values are read as JSON when they parse, else as text)",
    )
    parser.add_argument(
        "--problem-option",
        action="append",
        default=[],
        metavar="PROBLEM.NAME=VALUE",
        help="set a problem's constructor argument, e.g. dag-mlp.data_seed=3 or dag-mlp.num_samples=256 "
        "(repeatable; JSON values as for --option; such runs get their own records)",
    )
    parser.add_argument(
        "--time-budget",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="compute seconds every run may use: it stops there and returns its estimate (default: the quick "
        "profile's per-problem budget; smoke and paper run their iteration counts)",
    )
    parser.add_argument(
        "--no-time-budget",
        action="store_true",
        help="run the profile's iteration counts even in quick (the suite before equal-time budgets)",
    )
    parser.add_argument(
        "--replay-counts",
        type=Path,
        default=None,
        metavar="RECORD_OR_DIR",
        help="rerun timed runs with the iteration counts their records hold instead of the clock: the same seed "
        "then gives bitwise the same numbers on any machine (a record file, or a results folder)",
    )
    parser.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local (default): worker processes on this machine (--jobs); dask: every run is a task on a Dask "
        "cluster (--scheduler, or a LocalCluster of --jobs processes, or --cluster slurm); docs/distributed.md",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="with --executor dask: the address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786",
    )
    parser.add_argument(
        "--cluster",
        default="local",
        choices=CLUSTERS,
        help="with --executor dask and no --scheduler: start a LocalCluster (default) or a Slurm cluster "
        "through dask-jobqueue (needs --cluster-config; pip install 'tdbench[slurm]')",
    )
    parser.add_argument(
        "--cluster-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --cluster slurm: a TOML or YAML file of queue, cores, memory, walltime, gpus, jobs, ...",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=None,
        metavar="N",
        help="with --executor dask: retries of a run whose task failed or whose worker died (default 1); a run "
        "that still does not finish is recorded as failed with the reason",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where long runs save their checkpoints (default OUT/checkpoints; with --executor dask a path all "
        "workers see, else a run moved to another worker restarts from its beginning)",
    )
    parser.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only the I-th of N disjoint slices of the planned grid (1 <= I <= N), e.g. from a Slurm array "
        "job: --shard $SLURM_ARRAY_TASK_ID/N with --array=1-N; combine with 'tdbench report OUT'",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the planned runs (one JSON line each: problem, method, seed, options, key) and run nothing",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=ckpt.DEFAULT_EVERY_S,
        metavar="SECONDS",
        help="seconds between saves of a long run's state under OUT/checkpoints, so that an interrupted run resumes "
        f"where it was when the same command is run again (methods that support it: the VTI ones; default "
        f"{ckpt.DEFAULT_EVERY_S:g}; 0: never save)",
    )


def _parse_assignments(
    items: list[str],
    flag: str,
    kind: str,
    valid: dict[str, str],
    fields_of: Callable[[str], dict[str, Any]],
    example: str,
) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` flags as {name: {key: value}}; names, keys and values checked (:mod:`suite.options`).

    Values are read as JSON, else as text, and must fit the option's type hint.
    """
    options: dict[str, dict[str, Any]] = {}
    for item in items:
        target, sep, text = item.partition("=")
        name, dot, key = target.rpartition(".")
        if not sep or not dot:
            raise UsageError(f"{flag} {item!r}: expected {kind.upper()}.NAME=VALUE, e.g. {example}")
        if name not in valid:
            raise UsageError(f"{flag} {item!r}: unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
        fields = fields_of(name)
        if key not in fields:
            raise UsageError(f"{flag} {item!r}: {name} has no option {key!r}; valid: {', '.join(fields) or 'none'}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        try:
            value = check_option(name, key, value, fields[key], text)
        except OptionError as exc:
            raise UsageError(f"{flag} {item!r}: {exc}") from None
        options.setdefault(name, {})[key] = value
    return options


def parse_method_options(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--option METHOD.NAME=VALUE`` flags as {method: {option: value}}, checked against the registry."""

    def fields_of(name: str) -> dict[str, Any]:
        return {key: hint for key, hint in method_annotations(method_class(name)).items() if key != "progress"}

    return _parse_assignments(
        items, "--option", "method", available_methods(), fields_of, "vti-surrogate.flow=affine(5,5)"
    )


def parse_problem_options(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--problem-option PROBLEM.NAME=VALUE`` flags as {problem: {argument: value}}, checked against constructors."""

    def fields_of(name: str) -> dict[str, Any]:
        return problem_annotations(problem_class(name))

    return _parse_assignments(
        items, "--problem-option", "problem", available_problems(), fields_of, "dag-mlp.data_seed=3"
    )


def print_registry() -> None:
    """Print every registered problem and method with its one-line description."""
    problems, methods = available_problems(), available_methods()
    width = max(map(len, [*problems, *methods]))
    print("Problems (`tdbench describe NAME` for the full text):")
    for name, text in problems.items():
        problem = make_problem(name)
        note = problem.unavailable_reason() or reference_store.reference_problem(problem)
        print(clip(f"  {name:<{width}}  {text}"))
        if note:  # why it cannot run here is never cut short
            print("\n".join(wrap(f"unavailable: {note}", indent=" " * (width + 4))))
    print("Methods:")
    for name, text in methods.items():
        print(clip(f"  {name:<{width}}  {text}"))


def grid_from_args(args: argparse.Namespace) -> tuple[GridSpec, Execution]:
    """The parsed flags of ``run`` as the grid they ask for and where and how to run it (UsageError when bad)."""
    method_options = parse_method_options(args.option)
    problem_options = parse_problem_options(args.problem_option)
    spec = GridSpec(
        problems=args.problems,
        methods=args.methods,
        method_options=method_options,
        problem_options=problem_options,
        profile=args.profile,
        seeds=args.seeds,
        data_sets=args.data_sets,
        draws=args.draws,
        eval_draws=args.eval_draws,
        time_budget_s=args.time_budget,
        no_time_budget=args.no_time_budget,
        replay_counts=args.replay_counts,
        device=args.device,
        dtype=args.dtype,
    )
    execution = Execution(
        out=Path("results") / args.profile if args.out is None else args.out,
        force=args.force,
        jobs=args.jobs,
        executor=args.executor,
        scheduler=args.scheduler,
        cluster=args.cluster,
        cluster_config=args.cluster_config,
        retries=args.retries,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_s=args.checkpoint_every,
        shard=args.shard,
        progress=not args.no_progress,
        wide=args.wide,
    )
    return spec, execution


def grid_from_argv(argv: list[str]) -> tuple[GridSpec, Execution]:
    """``run``'s arguments (as typed after ``tdbench run``) as a grid spec and its execution."""
    return grid_from_args(build_parser().parse_args(argv))


def _seconds(text: str) -> float:
    """``--time-budget``'s value: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _out_folder(text: str) -> Path:
    """``--out``'s value as a path; an empty name (which would mean the current folder) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the results folder must be named (an empty name means the current folder)")
    return Path(text)


def report_path_line(out: Path) -> str:
    """The last line of a run or report: where to open the report page (or the folder, without one)."""
    page = out / "index.html"
    return f"Report: {page}" if page.is_file() else f"Results: {out}/"


def report_folder(out: Path, wide: bool, prog: str) -> int:
    """``tdbench report DIR`` and ``run_all.py --report-only``: the report of ``out``'s records; the exit code."""
    try:
        text = report_from_folder(out, wide)
    except ValueError as exc:  # no records, or one the report cannot read: named in the message
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        print(f"{prog}: error: disk full while writing {exc.filename or out}", file=sys.stderr)
        return 1
    print(text)
    print(report_path_line(out))
    return 0


def run(args: argparse.Namespace, prog: str) -> int:
    """``tdbench run`` (``run_all.py``): plan, execute the unfinished runs, write the report; the exit code."""
    tune_allocator()
    if args.list:
        print_registry()
        return 0
    if args.report_only:
        return report_folder(Path("results") / args.profile if args.out is None else args.out, args.wide, prog)
    try:
        spec, execution = grid_from_args(args)
        if args.dry_run:
            grid = plan_grid(spec, execution)
            for note in grid.placement.notes:
                print(note)
            for planned in grid.runs:
                print(dry_run_line(planned.key, rec.is_finished(execution.out, planned.key)))
            return 0
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        outcome = run_grid(spec, execution)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\nInterrupted: finished runs are saved, and long trainings that save checkpoints continue from their last "
            "one; run the same command again to resume.",
            file=sys.stderr,
        )
        return 130
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        where = exc.filename or execution.out
        print(f"{prog}: error: disk full while writing {where}; finished records are kept", file=sys.stderr)
        return 1
    print(f"Total time {outcome.seconds:.1f} s")
    status = _summarise(outcome, prog)
    if execution.shard_slice is not None:
        print(f"Shard {execution.shard} done; once every shard has finished: tdbench report {execution.out}")
    elif outcome.records:
        print(report_path_line(execution.out))
    return status


def describe_command(name: str, prog: str) -> int:
    """``tdbench describe NAME``: print the problem's or method's description; the exit code."""
    from suite.describe import UnknownName, describe

    try:
        print(describe(name))
    except UnknownName as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def typed_command() -> str:
    """The command as typed (``tdbench``, ``run_all.py``), for usage lines and error messages."""
    return os.path.basename(sys.argv[0]) or "tdbench"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Entry point of ``tdbench``; returns the exit code. Arguments without a subcommand are ``run``'s.

    ``prog`` names the command in usage lines and errors: by default the command typed, or for a call with
    ``argv`` given, ``tdbench`` with a subcommand and ``run_all.py`` without.
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    # `run` takes no positional arguments: a first word is a subcommand (a misspelt one is refused by name).
    subcommand = bool(arguments) and (not arguments[0].startswith("-") or arguments[0] in ("-h", "--help"))
    if prog is None:
        prog = typed_command() if argv is None else ("tdbench" if subcommand else "run_all.py")
    if not subcommand and (arguments or prog == "run_all.py"):
        return run_all(arguments, prog)
    parser = build_tdbench_parser(prog)
    if not arguments:  # a bare `tdbench`: what it can do, not a run of the whole quick profile
        parser.print_help()
        return 2
    args = parser.parse_args(arguments)
    if args.command == "run":
        return run(args, f"{prog} run")
    if args.command == "list":
        print_registry()
        return 0
    if args.command == "describe":
        return describe_command(args.name, prog)
    if args.command == "study":
        return study_command(args)
    return report_folder(args.out, args.wide, prog)


def study_command(args: argparse.Namespace) -> int:
    """``tdbench study NAME``: run the study's variants and write its comparison with the paper."""
    from suite.studies import STUDIES, Study

    if args.seeds is not None and args.seeds <= 0:
        print(f"tdbench study: error: --seeds must be a positive integer, got {args.seeds}", file=sys.stderr)
        return 2
    study = STUDIES[args.name]
    if args.data_sets is not None:
        if args.data_sets <= 0:
            print(
                f"tdbench study: error: --data-sets must be a positive integer, got {args.data_sets}", file=sys.stderr
            )
            return 2
        if not isinstance(study, Study):
            print(f"tdbench study: error: {args.name} has no data sets to choose (--data-sets)", file=sys.stderr)
            return 2
    out = Path("results") / "studies" / args.name if args.out is None else args.out
    if args.data_sets is None:
        return study.run(out, args.seeds, args.force)
    return study.run(out, args.seeds, args.force, data_sets=args.data_sets)


def run_all(argv: list[str] | None = None, prog: str = "run_all.py") -> int:
    """Entry point of ``run_all.py``, the alias of ``tdbench run``: the same arguments; returns the exit code."""
    return run(build_parser(prog).parse_args(argv), prog)


def _summarise(outcome: GridOutcome, prog: str = "run_all.py") -> int:
    """Print how many runs failed and return the exit status: 1 when a run ended without its record, else 0."""
    records, lost, failed = outcome.records, outcome.lost, outcome.failed
    if failed:
        print(f"{len(failed)} of {len(records)} runs failed in their method (shown on the leaderboards with reasons)")
    if lost:
        print(
            f"{prog}: error: {len(lost)} of {len(records)} runs ended without a record (a worker crashed or an "
            "error outside the method); run the same command again to retry them",
            file=sys.stderr,
        )
    return outcome.status
