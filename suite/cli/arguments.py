"""The arguments of ``tdbench run`` (and ``run_all.py``), and how they become a grid spec and its execution."""

from __future__ import annotations

import argparse
import functools
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.core import checkpoint as ckpt
from suite.core.budget import MAX_TIME_BUDGET_S, check_time_budget
from suite.core.device import DEVICE_CHOICES
from suite.core.method import DTYPES, PROFILES
from suite.core.options import OptionError, check_option, method_annotations, problem_annotations
from suite.core.registry import (
    available_methods,
    available_problems,
    method_class,
    problem_class,
    refusal,
)
from suite.results.records import MAX_JSON_DEPTH, json_depth_over
from suite.run import Execution, GridSpec, UsageError
from suite.run.spec import CLUSTERS, EXECUTORS

EXIT_RULES = """exit status:
  0  every planned run has its record; runs whose method failed are results (status "failed", counted on the
     leaderboards with their reasons, and summarised at the end)
  1  a run ended without a record (a worker process crashed or was killed, an error outside the method) or the
     disk filled up; finished records are kept, so running the same command again resumes
  2  bad input, refused before any work; or every problem named with --problems cannot run here (each named,
     with why)
  130  interrupted by SIGINT (Ctrl-C, timeout -s INT); running the same command again resumes
  143  stopped by SIGTERM (timeout, kill, a batch system); running the same command again resumes"""


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


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``run``, shared by ``tdbench run`` and ``run_all.py``."""
    parser.add_argument(
        "--problems", default="all", help="comma-separated problem names or groups (classics), or 'all' (default)"
    )
    parser.add_argument("--methods", default="all", help="comma-separated method names, or 'all' (default)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds per (problem, method), seeds 0..N-1 (default: 2 smoke, 3 quick, 10 paper; a method may ask "
        "for another number in a profile, Method.default_seeds, which no shipped method does)",
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
    parser.add_argument(
        "--out",
        type=out_folder,
        default=None,
        help="results folder (default: results/<profile>); never /, a system folder, or a folder of the repository "
        "outside results/",
    )
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
        type=time_budget_argument,
        default=None,
        metavar="SECONDS",
        help="compute seconds every run may use: it stops there and returns its estimate (default: the quick "
        "profile's per-problem budget; smoke and paper run their iteration counts); at most "
        f"{MAX_TIME_BUDGET_S:.0f} (7 days)",
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
        type=functools.partial(out_folder, what="checkpoint folder", example="/scratch/me/checkpoints"),
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


#: Characters of a flag's value quoted in a refusal (the rest is counted, not repeated).
QUOTED_CHARACTERS = 120


def shortened(text: str, limit: int = QUOTED_CHARACTERS) -> str:
    """``text``, or its first ``limit`` characters and how many more there are, for quoting in a message.

    Example:
        >>> shortened("x" * 200, 5)
        'xxxxx... (195 more characters)'
    """
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _parse_assignments(
    items: list[str],
    flag: str,
    kind: str,
    valid: dict[str, str],
    fields_of: Callable[[str], dict[str, Any]],
    example: str,
) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` flags as {name: {key: value}}; names, keys and values checked (:mod:`suite.core.options`).

    Values are read as JSON, else as text, and must fit the option's type hint.
    """
    options: dict[str, dict[str, Any]] = {}
    for whole in items:
        item = shortened(whole)
        target, sep, text = whole.partition("=")
        name, dot, key = target.rpartition(".")
        if not sep or not dot:
            raise UsageError(f"{flag} {item!r}: expected {kind.upper()}.NAME=VALUE, e.g. {example}")
        if name not in valid:
            unknown = refusal(kind, name) or f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}"
            raise UsageError(f"{flag} {item!r}: {unknown}")
        fields = fields_of(name)
        if key not in fields:
            raise UsageError(f"{flag} {item!r}: {name} has no option {key!r}; valid: {', '.join(fields) or 'none'}")
        try:
            value = json.loads(text)
            too_deep = json_depth_over(value)
        except ValueError:  # not JSON (or an integer of more than 4,300 digits): the text as typed
            value, too_deep = text, False
        except RecursionError:
            too_deep = True
        if too_deep:
            raise UsageError(f"{flag} {item!r}: the value nests lists or objects more than {MAX_JSON_DEPTH} deep")
        try:
            value = check_option(name, key, value, fields[key], text)
        except OptionError as exc:
            raise UsageError(f"{flag} {item!r}: {shortened(str(exc), 2 * QUOTED_CHARACTERS)}") from None
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


def time_budget_argument(text: str) -> float:
    """``--time-budget``'s value, by the one rule of :func:`suite.core.budget.check_time_budget`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    try:
        return check_time_budget(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


#: System folders that are never a results folder, nor is anything inside them.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)
#: Scratch folders inside those trees whose subfolders may be results folders (a RAM disk).
SCRATCH_TREES = ("/dev/shm",)
#: Folders that are never a results folder themselves (folders inside them, e.g. /var/tmp/x or /home/me/x, may be).
SYSTEM_FOLDERS = ("/", "/home", "/opt", "/root", "/run", "/srv", "/var")


def out_folder(text: str, what: str = "results folder", example: str = "results/quick") -> Path:
    """``--out``'s value as a path, refused (with the reason) where a results folder must never be.

    ``--checkpoint-dir`` is checked by the same rules (``what`` and ``example`` name it in the message).

    Refused: an empty name (which would mean the current folder); the file system's root and the system folders
    (:data:`SYSTEM_FOLDERS`, and anything inside :data:`SYSTEM_TREES`); and, in a source checkout of tdbench, any
    folder inside the repository but outside its ``results/`` (the repository root itself is refused by ``run``).
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"the {what} must be named (an empty name means the current folder)")
    path = Path(text)
    reason = unsafe_out_reason(path)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {reason}; give a {what}, e.g. {example}")
    return path


def unsafe_out_reason(path: Path) -> str | None:
    """Why ``path`` must not be a results folder (its lexical and its resolved form are both checked), or None."""
    forms = {Path(os.path.abspath(path))}
    try:
        forms.add(path.resolve())
    except (OSError, RuntimeError):  # a symlink loop: the lexical form is checked, and writing there fails anyway
        pass
    for form in forms:
        if form == Path(form.anchor):
            return "is the root of the file system"
        if os.name == "posix":
            for tree in SYSTEM_TREES:
                if form.is_relative_to(tree) and not any(
                    form != Path(free) and form.is_relative_to(free) for free in SCRATCH_TREES
                ):
                    return f"is inside the system folder {tree}"
            if str(form) in SYSTEM_FOLDERS:
                return f"is the system folder {form}"
        checkout = source_checkout()
        if checkout is not None and form != checkout and form.is_relative_to(checkout):
            if not form.is_relative_to(checkout / "results"):
                return f"is inside the repository {checkout} but not under its results/ folder"
    return None


@functools.cache
def source_checkout() -> Path | None:
    """The repository folder when this code runs from a source checkout of tdbench (not an installed copy)."""
    root = Path(__file__).resolve().parents[2]
    try:
        with open(root / "pyproject.toml", "rb") as handle:
            name = tomllib.load(handle).get("project", {}).get("name")
    except (OSError, ValueError):
        return None
    return root if name == "tdbench" else None
