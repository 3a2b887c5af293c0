"""``tdbench run`` (``run_all.py``): plan, run the unfinished runs, report; also ``--list``, ``--dry-run``."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from suite.cli.arguments import build_parser, grid_from_args
from suite.core.device import tune_allocator
from suite.core.registry import (
    available_methods,
    available_problems,
    make_problem,
    plugin_load_failures,
)
from suite.data import locate
from suite.report.build import report_from_folder
from suite.report.terminal import clip, wrap
from suite.results import records as rec
from suite.run import GridOutcome, UsageError, plan_grid, run_grid
from suite.run.claims import UnsafeLockError
from suite.run.interrupts import Interrupted, exit_status, signals_interrupt
from suite.run.shards import dry_run_line
from suite.run.spec import problem_groups
from suite.store import references


def print_registry() -> None:
    """Print every registered problem and method with its one-line description, then the plug-ins not registered.

    Nothing is downloaded: a problem whose data file is not downloaded yet says so.
    """
    with locate.downloads_deferred():
        _print_registry()


def _print_registry() -> None:
    """:func:`print_registry` once downloads are deferred."""
    problems, methods = available_problems(), available_methods()
    width = max(map(len, [*problems, *methods]))
    print("Problems (`tdbench describe NAME` for the full text):")
    for name, text in problems.items():
        problem = make_problem(name)
        note = problem.unavailable_reason() or references.reference_problem(problem)
        print(clip(f"  {name:<{width}}  {text}"))
        if note:  # why it cannot run here is never cut short
            print("\n".join(wrap(f"unavailable: {note}", indent=" " * (width + 4))))
    groups = problem_groups()
    if groups:
        print("Problem groups (`--problems GROUP` runs every member):")
        for group, members in groups.items():
            print(clip(f"  {group:<{width}}  {', '.join(members)}"))
    print("Methods:")
    for name, text in methods.items():
        print(clip(f"  {name:<{width}}  {text}"))
    refused = plugin_load_failures()
    if refused:  # plug-ins that failed to load or clash with another name, with the reason in full
        print("Plug-ins not registered:")
        for problem in refused:
            print("\n".join(wrap(f"  {problem}", indent="    ")))


def report_path_line(out: Path) -> str:
    """The last line of a run or report: where to open the report page (or the folder, without one)."""
    page = out / "index.html"
    return f"Report: {page}" if page.is_file() else f"Results: {out}/"


#: Errors of writing into a folder that the user can fix (issue 51, H12), as said to them.
UNWRITABLE = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def unwritable(exc: OSError) -> str | None:
    """What an error of writing the results means to the user, or None when it is not one of :data:`UNWRITABLE`."""
    return UNWRITABLE.get(exc.errno) if exc.errno is not None else None


def report_folder(out: Path, wide: bool, prog: str) -> int:
    """``tdbench report DIR`` and ``run_all.py --report-only``: the report of ``out``'s records; the exit code."""
    try:
        text = report_from_folder(out, wide)
    except ValueError as exc:  # no records, or one the report cannot read: named in the message
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        why = unwritable(exc)
        if why is None:
            raise
        print(f"{prog}: error: {why} while writing {exc.filename or out}; the records are unchanged", file=sys.stderr)
        return 1
    print(text)
    print(report_path_line(out))
    return 0


def run(args: argparse.Namespace, prog: str) -> int:
    """``tdbench run`` (``run_all.py``): plan, execute the unfinished runs, write the report; the exit code.

    SIGINT and SIGTERM stop it (:mod:`suite.run.interrupts`): workers are ended within seconds, runs that had not
    finished get no record, and the exit status is 130 or 143; the same command resumes.
    """
    tune_allocator()
    if args.list:
        print_registry()
        return 0
    if args.report_only:
        return report_folder(Path("results") / args.profile if args.out is None else args.out, args.wide, prog)
    try:
        with signals_interrupt():
            return _run(args, prog)
    except KeyboardInterrupt as exc:
        by = f" by {exc.name}" if isinstance(exc, Interrupted) else ""
        print(
            f"\nInterrupted{by}: finished runs are saved, runs that had not finished have no record, and long "
            "trainings that save checkpoints continue from their last one; run the same command again to resume.",
            file=sys.stderr,
        )
        return exit_status(exc)


def _run(args: argparse.Namespace, prog: str) -> int:
    """:func:`run` once the signals are set up."""
    try:
        spec, execution = grid_from_args(args)
        if args.dry_run:
            with locate.downloads_deferred():  # a plan names the data files not downloaded yet, and fetches none
                grid = plan_grid(spec, execution, dry_run=True)
            for note in grid.placement.notes:
                print(note)
            for skipped in grid.skipped:
                if skipped.method is None:  # on stderr: stdout is the planned runs, one JSON object a line
                    print(skipped, file=sys.stderr)
            for planned in grid.runs:
                print(dry_run_line(planned.key, rec.is_finished(execution.out, planned.key)))
            return 0
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        outcome = run_grid(spec, execution)
    except (UsageError, UnsafeLockError) as exc:  # a planted link among the locks is refused, never followed
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        why = unwritable(exc)
        if why is None:
            raise
        where = exc.filename or execution.out
        print(f"{prog}: error: {why} while writing {where}; finished records are kept", file=sys.stderr)
        return 1
    print(f"Total time {outcome.seconds:.1f} s")
    status = _summarise(outcome, prog)
    if execution.shard_slice is not None:
        print(f"Shard {execution.shard} done; once every shard has finished: tdbench report {execution.out}")
    elif outcome.records:
        print(report_path_line(execution.out))
    return status


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
