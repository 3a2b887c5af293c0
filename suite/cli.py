"""The ``tdbench`` command line: ``run`` (plan runs, execute the unfinished ones, report), ``list``, ``describe``,
``report``. ``run_all.py ARGS`` is ``tdbench run ARGS``; so is ``tdbench ARGS`` without a subcommand.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from suite import checkpoints as ckpt
from suite import claims
from suite import parallel as par
from suite import records as rec
from suite.grid import dry_run_line, parse_shard, shard_of
from suite.harness import DEVICE_CHOICES, resolve_device, tune_allocator
from suite.leaderboard import NOT_APPLICABLE
from suite.method import DTYPES, PROFILES, Method
from suite.options import OptionError, check_option, method_annotations, problem_annotations
from suite.problem import Problem
from suite.reference import store as reference_store
from suite.registry import (
    available_methods,
    available_problems,
    make_method,
    make_problem,
    method_class,
    problem_class,
)
from suite.report import NOT_APPLICABLE_FILE, report_from_folder, write_report
from suite.runner import _jsonable
from suite.terminal import clip, summarise_not_applicable, wrap

#: Gold-standard draws per problem used for cross-entropy, by profile.
EVAL_DRAWS = {"smoke": 2_000, "quick": 10_000, "paper": 100_000}
DEFAULT_SEEDS = {"smoke": 2, "quick": 2, "paper": 10}
#: The checkout ``run_all.py`` lives in: never a results folder.
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Largest --seeds, and largest --draws / --eval-draws: beyond them planning or memory would never end.
MAX_SEEDS = 10_000
MAX_DRAWS = 10_000_000
#: Where runs execute: worker processes on this machine, or tasks on a Dask cluster (suite/dask_executor.py).
EXECUTORS = ("local", "dask")
CLUSTERS = ("local", "slurm")
#: Key marking a run whose worker ended without writing its record (a crash, not a method's failure).
LOST = "lost"
EXIT_RULES = """exit status:
  0  every planned run has its record; runs whose method failed are results (status "failed", counted on the
     leaderboards with their reasons, and summarised at the end)
  1  a run ended without a record (a worker process crashed or was killed, an error outside the method) or the
     disk filled up; finished records are kept, so running the same command again resumes
  2  bad input, refused before any work
  130  interrupted (Ctrl-C); running the same command again resumes"""


class UsageError(ValueError):
    """Bad command-line input, reported before any work starts."""


@dataclass
class PlannedRun:
    """One run of the plan."""

    key: rec.RunKey
    problem: Problem
    #: The method with its options resolved for this problem and profile (:meth:`Method.resolve`).
    method: Method
    #: Compute seconds the run may use (None: the profile's iteration counts).
    time_budget_s: float | None = None
    #: Counts of the timed run this one replays (``--replay-counts``), or None.
    replay: dict[str, Any] | None = None
    #: The problem's constructor options (``--problem-option`` values and, for several data sets, ``data_seed``).
    problem_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A problem that cannot run here (``method`` None) or a method that does not apply to a problem, and why."""

    problem: str
    method: str | None
    reason: str

    def __str__(self) -> str:
        if self.method is None:
            return f"problem {self.problem} is unavailable: {self.reason}"
        return f"{self.method} does not apply to {self.problem}: {self.reason}"

    def as_record(self) -> dict[str, Any]:
        """A leaderboard row saying "not applicable" with the reason (never written as a run record)."""
        return {
            "problem": self.problem,
            "method": self.method,
            "seed": None,
            "status": NOT_APPLICABLE,
            "reason": self.reason,
            "metrics": {},
        }


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


def _parse_names(text: str, valid: dict[str, str], kind: str) -> list[str]:
    names = list(valid) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"no {kind}s given; valid {kind}s: {', '.join(valid)}")
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise UsageError(f"unknown {kind}(s) {', '.join(map(repr, unknown))}; valid {kind}s: {', '.join(valid)}")
    return list(dict.fromkeys(names))


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


def _problem_instances(
    problems: list[str], problem_options: dict[str, dict[str, Any]], profile: str, data_sets: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(name, constructor options) of every problem instance to plan: one per data set for problems with several.

    A problem whose class lists ``data_sets`` for the profile is planned once per ``data_seed`` in
    ``first_data_seed + range(count)``, count being ``data_sets`` (``--data-sets``) or else the class's
    ``data_sets[profile]``, unless the user fixed ``data_seed`` with ``--problem-option``.
    """
    instances = []
    for name in problems:
        options = problem_options.get(name, {})
        cls = problem_class(name)
        count = cls.data_sets.get(profile, 0)
        if count and data_sets is not None:
            count = data_sets
        if count and "data_seed" not in options:
            seeds = range(cls.first_data_seed, cls.first_data_seed + count)
            instances.extend((name, {**options, "data_seed": seed}) for seed in seeds)
        else:
            instances.append((name, options))
    return instances


def plan_runs(args: argparse.Namespace, device: torch.device) -> tuple[list[PlannedRun], list[Skipped]]:
    """Every (problem, method, seed) to run, and the combinations left out with the reason.

    ``--problems all`` takes the problems planned for the profile (a problem's ``profiles``; e.g. the 100-component
    mixture only in ``paper``); a problem named explicitly runs in any profile. ``--methods all`` likewise leaves
    out methods whose ``planned_profiles`` do not list the profile (the optional-library comparators).
    """
    problems = _parse_names(args.problems, available_problems(), "problem")
    if args.problems.strip() == "all":
        problems = [name for name in problems if args.profile in problem_class(name).profiles]
    methods = _parse_names(args.methods, available_methods(), "method")
    if args.methods.strip() == "all":
        methods = [
            name
            for name in methods
            if method_class(name).planned_profiles in (None, ()) or args.profile in method_class(name).planned_profiles
        ]
    plan: list[PlannedRun] = []
    notes: list[Skipped] = []
    problem_options = getattr(args, "problem_options", {})
    unplanned = sorted(set(problem_options) - set(problems))
    if unplanned:
        raise UsageError(f"--problem-option for {', '.join(unplanned)}, which this run does not plan")
    unplanned = sorted(set(args.method_options) - set(methods))
    if unplanned:
        raise UsageError(f"--option for {', '.join(unplanned)}, which this run does not plan")
    for problem_name, options in _problem_instances(
        problems, problem_options, args.profile, getattr(args, "data_sets", None)
    ):
        try:
            problem = make_problem(problem_name, **options)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{problem_name}: {exc}") from None
        problem.use_reference_profile(args.profile)
        reason = problem.unavailable_reason() or reference_store.reference_problem(problem)  # a bad reference too
        if reason:
            notes.append(Skipped(problem_name, None, reason))
            continue
        budget_s = time_budget_for(problem, args)
        for method_name in methods:
            method = make_method(method_name, **args.method_options.get(method_name, {}))
            why_not = method.supports(problem)
            if why_not:
                notes.append(Skipped(problem_name, method_name, why_not))
                continue
            try:
                resolved = method.resolve(problem, args.profile)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{method_name} on {problem_name}: {exc}") from None
            config = {
                "problem_config": problem.config(),
                "method_options": method.options(),
                "profile": args.profile,
                # The preset fills the options left at None, so a changed preset must not reuse old records.
                "profile_preset": method.profiles.get(args.profile, {}),
                "num_draws": args.draws,
                "eval_draws": args.eval_draws,
                # Methods are scored on the "test" half of stored references (the "train" half is for learning).
                "gold_split": "test",
                "device": device.type,
                "dtype": args.dtype,
                "time_budget_s": budget_s,
            }
            for seed in range(_seeds_for(method, args)):
                replay = _replay_for(args, problem, method_name, seed)
                if args.replay is not None and replay is None:
                    notes.append(Skipped(problem_name, method_name, f"no timed record of seed {seed} to replay"))
                    continue
                key_config = config if replay is None else {**config, "replayed": replay["file"]}
                if replay is not None:
                    key_config["time_budget_s"] = replay["time_budget_s"]
                plan.append(
                    PlannedRun(
                        rec.RunKey(problem_name, method_name, seed, key_config),
                        problem,
                        resolved,
                        key_config["time_budget_s"],
                        None if replay is None else replay["counts"],
                        options,
                    )
                )
    return plan, list(dict.fromkeys(notes))  # one note per problem, not per data set


def time_budget_for(problem: Problem, args: argparse.Namespace) -> float | None:
    """The compute seconds every method gets on ``problem``: ``--time-budget``, else the problem's for the profile."""
    if getattr(args, "no_time_budget", False):
        return None
    if getattr(args, "time_budget", None) is not None:
        return float(args.time_budget)
    return problem.time_budgets.get(args.profile)


def _replay_for(args: argparse.Namespace, problem: Problem, method: str, seed: int) -> dict[str, Any] | None:
    """The recorded counts (with budget and file) of the timed run ``--replay-counts`` holds for this run, if any."""
    if getattr(args, "replay", None) is None:
        return None
    config = json.dumps(_jsonable(problem.config()), sort_keys=True, default=str)
    return args.replay.get((problem.name, method, seed, config))


def _seeds_for(method: Method, args: argparse.Namespace) -> int:
    """Seeds of one method: ``--seeds`` when given, else the method's own default for the profile, else the suite's."""
    if getattr(args, "seeds_given", True):
        return args.seeds
    return int(method.default_seeds.get(args.profile, args.seeds))


def _validate(args: argparse.Namespace) -> torch.device:
    args.method_options = parse_method_options(args.option)
    args.problem_options = parse_problem_options(args.problem_option)
    args.seeds_given = args.seeds is not None
    args.seeds = DEFAULT_SEEDS[args.profile] if args.seeds is None else args.seeds
    args.eval_draws = EVAL_DRAWS[args.profile] if args.eval_draws is None else args.eval_draws
    args.out = Path("results") / args.profile if args.out is None else args.out
    checks = [("--seeds", args.seeds), ("--draws", args.draws), ("--eval-draws", args.eval_draws)]
    if args.data_sets is not None:
        checks.append(("--data-sets", args.data_sets))
    for flag, value in [*checks, ("--jobs", 1 if args.jobs is None else args.jobs)]:
        if value <= 0:
            raise UsageError(f"{flag} must be a positive integer, got {value}")
    limits = [("--seeds", args.seeds, MAX_SEEDS), ("--draws", args.draws, MAX_DRAWS)]
    for flag, value, limit in [*limits, ("--eval-draws", args.eval_draws, MAX_DRAWS)]:
        if value > limit:
            raise UsageError(f"{flag} {value} is more than this suite allows ({limit:,})")
    _check_out(args.out, args.profile)
    if args.time_budget is not None and args.no_time_budget:
        raise UsageError("--time-budget and --no-time-budget contradict each other; give one")
    args.replay = None
    if args.replay_counts is not None:
        if args.time_budget is not None or args.no_time_budget:
            raise UsageError("--replay-counts takes the budget from the records it replays; drop --time-budget")
        try:
            args.replay = rec.load_replay_counts(args.replay_counts)
        except ValueError as exc:
            raise UsageError(f"--replay-counts: {exc}") from None
    if not args.checkpoint_every >= 0:
        raise UsageError(f"--checkpoint-every must be 0 (never save) or a positive number, got {args.checkpoint_every}")
    _validate_distribution(args)
    try:
        remote = args.executor == "dask" and (args.scheduler is not None or args.cluster != "local")
        # The runs happen on the cluster's workers: this machine needs no GPU of its own for --device cuda.
        device = torch.device("cuda") if remote and args.device == "cuda" else resolve_device(args.device)
        rec.check_writable(args.out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    args.jobs = par.default_jobs(device) if args.jobs is None else args.jobs
    cores = par.usable_cores()
    if args.jobs > cores:
        print(f"note: --jobs {args.jobs} is more than the {cores} usable CPU core(s); running {cores} at a time")
        args.jobs = cores
    if device.type == "cuda" and args.jobs > 1 and args.executor == "local":
        print(
            f"note: {args.jobs} jobs share one GPU; a run with a time budget then gets fewer iterations than alone "
            "(measured in docs/gpu.md); use --jobs 1 for leaderboards"
        )
    return device


def _validate_distribution(args: argparse.Namespace) -> None:
    """Check the executor, cluster, shard and checkpoint flags (no connection is made here)."""
    dask_only = [
        ("--scheduler", args.scheduler is not None),
        ("--cluster slurm", args.cluster != "local"),
        ("--cluster-config", args.cluster_config is not None),
        ("--retries", args.retries is not None),
    ]
    if args.executor != "dask":
        given = [flag for flag, present in dask_only if present]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise UsageError(f"{', '.join(given)} {verb} only with --executor dask (executors: {', '.join(EXECUTORS)})")
    args.retries = 1 if args.retries is None else args.retries
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or a positive integer, got {args.retries}")
    args.shard_slice = None
    if args.shard is not None:
        try:
            args.shard_slice = parse_shard(args.shard)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.checkpoint_dir is not None:
        try:
            rec.check_writable(args.checkpoint_dir)
        except ValueError as exc:
            raise UsageError(f"--checkpoint-dir: {exc}") from None
    if args.executor != "dask":
        return
    from suite.dask_executor import require_distributed

    try:
        require_distributed()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.scheduler is not None and (args.cluster != "local" or args.cluster_config is not None):
        raise UsageError("--scheduler names a running cluster; --cluster and --cluster-config start one: give one")
    if args.scheduler is not None and not args.scheduler.strip():
        raise UsageError("--scheduler needs an address, e.g. tcp://HOST:8786")
    if args.cluster == "slurm":
        if args.cluster_config is None:
            raise UsageError("--cluster slurm needs --cluster-config FILE (queue, cores, memory, walltime, jobs, ...)")
        from suite.cluster_config import load_cluster_config, require_jobqueue

        try:
            require_jobqueue()
            load_cluster_config(args.cluster_config)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.cluster_config is not None:
        raise UsageError("--cluster-config describes a Slurm cluster: add --cluster slurm")


def _check_out(out: Path, profile: str) -> None:
    """Refuse a results folder that is the repository itself or that holds records of another profile."""
    if out.resolve() == REPO_ROOT:
        raise UsageError(f"--out {str(out)!r} is the repository root; give a results folder, e.g. results/{profile}")
    others = sorted(_profiles_in(out) - {profile})
    if others:
        raise UsageError(
            f"--out {out} holds records of profile {', '.join(others)}; leaderboards mix no profiles: "
            f"use another folder, e.g. --out results/{profile}"
        )


def _profiles_in(out: Path) -> set[str]:
    """The profiles of the records in ``out`` (unreadable records are ignored)."""
    found = set()
    for path in rec.records_dir(out).glob("*.json"):
        try:
            profile = (json.loads(path.read_text()).get("budget") or {}).get("profile")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(profile, str):
            found.add(profile)
    return found


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


def run_plan(plan: list[PlannedRun], args: argparse.Namespace, device: torch.device, session: Any = None) -> list[dict]:
    """Execute unfinished runs (all with ``--force``), each record written as soon as its run is done.

    Each run is claimed first (:mod:`suite.claims`): a run another live process is running into the same folder
    is left to it, and only the runs with records are returned. With a Dask ``session`` the runs are its tasks.
    """
    rec.remove_stale_temporaries(args.out)
    todo = [run for run in plan if args.force or not rec.is_finished(args.out, run.key)]
    held, busy = _claim(todo, args)
    skipped = len(plan) - len(todo) + (len(todo) - len(held) - len(busy))  # recorded before, or while planning
    if skipped:
        print(f"{skipped} of {len(plan)} runs already have records in {args.out} (use --force to re-run them)")
    if busy:
        print(f"{len(busy)} of {len(plan)} runs are being run by another process into {args.out}; left to it")
    todo = [run for run in todo if run.key.filename in held]
    if args.force:
        for run in todo:
            par.checkpoint_file(args.out, run.key.filename, args.checkpoint_dir).unlink(missing_ok=True)
    jobs, threads = _layout(args, len(todo), session)
    if session is not None and todo:
        where = session.settings.describe()
        where += "" if session.settings.scheduler else f" ({session.address})"
        print(f"{len(todo)} runs as tasks on {where}, {threads} thread(s) a run")
    elif session is None and jobs > 1:
        print(f"{len(todo)} runs in {jobs} worker processes, {threads} thread(s) each (--jobs 1: one at a time)")

    def spec(run: PlannedRun) -> par.RunSpec:
        return par.RunSpec(
            run.key,
            run.method.options(),
            args.profile,
            args.draws,
            str(device),
            args.eval_draws,
            args.out,
            jobs,
            threads,
            run.problem_options,
            checkpoint_every_s=args.checkpoint_every,
            dtype=args.dtype,
            progress=jobs == 1 and session is None and not args.no_progress,
            time_budget_s=run.time_budget_s,
            replay=run.replay,
            checkpoint_dir=args.checkpoint_dir,
            exclusive=not args.force,
        )

    by_key = {run.key.filename: run for run in todo}
    bar = tqdm(total=len(todo), desc="runs", unit="run", disable=args.no_progress or None)
    lost: dict[str, dict] = {}
    if session is not None:
        from suite.dask_executor import run_grid

        outcomes = run_grid(session, [spec(run) for run in todo], by_key)
    elif jobs > 1:
        outcomes = par.run_in_workers([spec(run) for run in todo], jobs, threads)
    else:
        outcomes = _run_serially([spec(run) for run in todo], by_key, bar)
    try:
        for done, status, reason in outcomes:
            bar.update(1)
            key = done.key
            if status != "ok":
                tqdm.write(f"FAILED {key.problem} / {key.method} / seed {key.seed}: {reason}")
            finished = rec.is_finished(args.out, key)
            if not finished:  # the worker died before writing: shown, not saved (a rerun retries)
                lost[key.filename] = {**dataclasses.asdict(key), "status": status, "reason": reason, LOST: True}
            held.pop(key.filename).release(finished=finished)
    finally:
        for claim in held.values():
            claim.release()
        claims.remove_empty_locks_dir(args.out)
    bar.close()
    busy_names = {run.key.filename for run in busy}
    return [
        lost.get(run.key.filename) or rec.read_record(args.out, run.key)
        for run in plan
        if run.key.filename not in busy_names
    ]


def _claim(todo: list[PlannedRun], args: argparse.Namespace) -> tuple[dict[str, claims.RunClaim], list[PlannedRun]]:
    """Claim every run to do: (the claims held, by record name; the runs another live process holds)."""
    claims.raise_open_file_limit()
    held: dict[str, claims.RunClaim] = {}
    busy: list[PlannedRun] = []
    for run in todo:
        claim = claims.RunClaim(args.out, run.key.filename)
        if not claim.acquire():
            busy.append(run)
        elif not args.force and rec.is_finished(args.out, run.key):  # finished while we were planning
            claim.release(finished=True)
        else:
            held[run.key.filename] = claim
    return held, busy


def _layout(args: argparse.Namespace, num_runs: int, session: Any) -> tuple[int, int]:
    """(runs side by side, torch threads per run) for the local pool or a Dask session."""
    if session is None:
        jobs = min(args.jobs, num_runs) if num_runs else 1
        return jobs, max(1, torch.get_num_threads() // jobs) if jobs > 1 else torch.get_num_threads()
    if session.cluster is not None and session.settings.cluster == "local":  # workers share this machine's cores
        workers = session.settings.workers
        return workers, max(1, torch.get_num_threads() // workers)
    if session.slurm_config is not None:  # one task per worker process, each with its share of the job's cores
        return max(1, session.task_slots()), session.slurm_config.cores_per_worker
    return max(1, session.task_slots()), 1  # other machines: one thread a task, one task per core


def _run_serially(specs: list[par.RunSpec], by_key: dict[str, PlannedRun], bar: Any) -> Any:
    """Yield (spec, status, reason) running each spec in this process, on the planned objects."""
    for spec in specs:
        run = by_key[spec.key.filename]
        bar.set_postfix_str(f"{spec.key.problem} / {spec.key.method} / seed {spec.key.seed}")
        status, reason = par.run_spec(spec, run.problem, run.method)
        yield spec, status, reason


def earlier_records(args: argparse.Namespace, device: torch.device, plan: list[PlannedRun]) -> list[dict]:
    """Finished records in ``args.out`` of the other registered methods on the planned problems, with these settings.

    Their run keys are computed exactly as if those methods had been asked for, so a record made under other
    settings (profile, preset, draws, seeds, device) is never picked up.
    """
    planned = {run.key.method for run in plan}
    others = [name for name in available_methods() if name not in planned]
    if not plan or not others:
        return []
    problems = ",".join(dict.fromkeys(run.key.problem for run in plan))
    others_args = argparse.Namespace(
        **{**vars(args), "problems": problems, "methods": ",".join(others), "method_options": {}}
    )
    extra, _ = plan_runs(others_args, device)
    return [rec.read_record(args.out, run.key) for run in extra if rec.is_finished(args.out, run.key)]


def save_not_applicable(out: Path, skipped: list[Skipped]) -> None:
    """Add this run's not-applicable pairs to ``out/not_applicable.json``, so ``report`` shows them too."""
    path = out / NOT_APPLICABLE_FILE
    try:
        earlier = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        earlier = []  # rewritten whole below
    pairs = {(row["problem"], row["method"]): row for row in earlier if isinstance(row, dict) and "method" in row}
    for note in skipped:
        if note.method is not None:
            pairs[(note.problem, note.method)] = {"problem": note.problem, "method": note.method, "reason": note.reason}
    rows = [pairs[key] for key in sorted(pairs, key=lambda key: (str(key[0]), str(key[1])))]
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(rows, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
        device = _validate(args)
        plan, notes = plan_runs(args, device)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    grid_size = len(plan)
    if args.shard_slice is not None:
        plan = shard_of(plan, *args.shard_slice)
    if args.dry_run:
        for planned in plan:
            print(dry_run_line(planned.key, rec.is_finished(args.out, planned.key)))
        return 0
    for note in notes:
        if note.method is None:
            print(f"note: {note}")
    for line in summarise_not_applicable([note.as_record() for note in notes if note.method is not None]):
        print(line)
    shard = "" if args.shard_slice is None else f" (shard {args.shard} of a grid of {grid_size})"
    print(f"Profile {args.profile}: {len(plan)} runs{shard} on {device} ({args.dtype}), results in {args.out}")
    start = time.perf_counter()
    try:  # a cluster is reached (or started) only when some run is left to do
        unfinished = args.force or not all(rec.is_finished(args.out, planned.key) for planned in plan)
        session = _open_session(args, device) if unfinished else None
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        records = _run_and_report(plan, notes, args, device, session)
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
        where = exc.filename or args.out
        print(f"{prog}: error: disk full while writing {where}; finished records are kept", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            session.close()
    print(f"Total time {time.perf_counter() - start:.1f} s")
    status = _summarise(records, prog)
    if args.shard_slice is not None:
        print(f"Shard {args.shard} done; once every shard has finished: tdbench report {args.out}")
    elif records:
        print(report_path_line(args.out))
    return status


def _open_session(args: argparse.Namespace, device: torch.device) -> Any:
    """The Dask session of ``--executor dask`` (connected, or with the cluster it starts), else None."""
    if args.executor != "dask":
        return None
    from suite.dask_executor import DaskSession, DaskSettings

    settings = DaskSettings(
        scheduler=args.scheduler,
        cluster=args.cluster,
        cluster_config=args.cluster_config,
        workers=args.jobs,
        retries=args.retries,
        gpu=device.type == "cuda",
    )
    print(f"Connecting to {settings.describe()} ...")
    return DaskSession(settings)


def _run_and_report(
    plan: list[PlannedRun], notes: list[Skipped], args: argparse.Namespace, device: torch.device, session: Any
) -> list[dict]:
    """Run the plan and, unless this is one shard of a grid, write and print the report; the plan's records."""
    records = run_plan(plan, args, device, session)
    if args.shard_slice is not None:  # shards end at different times: one report of all of them comes after
        return records
    earlier = earlier_records(args, device, plan)
    if earlier:
        methods = sorted({record["method"] for record in earlier})
        runs = f"{len(earlier)} earlier run{'s' if len(earlier) != 1 else ''}"
        print(f"\nThe leaderboards also show {runs} in {args.out} with the same settings: {', '.join(methods)}")
    not_applicable = [note.as_record() for note in notes if note.method is not None]
    if not_applicable:
        save_not_applicable(args.out, notes)
    print(write_report(records + earlier + not_applicable, args.out, args.profile, args.wide))
    return records


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


def _summarise(records: list[dict], prog: str = "run_all.py") -> int:
    """Print how many runs failed and return the exit status: 1 when a run ended without its record, else 0."""
    lost = [record for record in records if record.get(LOST)]
    failed = [record for record in records if record.get("status") != "ok" and not record.get(LOST)]
    if failed:
        print(f"{len(failed)} of {len(records)} runs failed in their method (shown on the leaderboards with reasons)")
    if lost:
        print(
            f"{prog}: error: {len(lost)} of {len(records)} runs ended without a record (a worker crashed or an "
            "error outside the method); run the same command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
