"""The ``tdbench`` command line: ``run`` (plan runs, execute the unfinished ones, report), ``list``, ``describe``,
``report``, ``study``, and the tools ``reference``, ``compare``, ``overview``, ``readme-table``, ``facts`` and
``bbe-study``.
``run_all.py ARGS`` is ``tdbench run ARGS``; so is ``tdbench ARGS`` without a subcommand.

Each command lives in its own module (:mod:`suite.cli.arguments`, :mod:`suite.cli.run_command`,
:mod:`suite.cli.describe`); this module parses the subcommand and dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from suite.cli.arguments import (
    EXIT_RULES,
    RUN_DESCRIPTION,
    add_run_arguments,
    build_parser,
    grid_from_args,
    grid_from_argv,
    out_folder,
)
from suite.cli.describe import UnknownName, describe
from suite.cli.run_command import print_registry, report_folder, run, run_all
from suite.cli.safe_output import escaped_output
from suite.data import locate
from suite.run import PlannedRun, Skipped, UsageError
from suite.run.grid import LOST
from suite.studies import STUDIES, Study

#: Tools with their own arguments: ``tdbench NAME ARGS`` hands ARGS to the tool's ``main`` (module, summary). A
#: tool's module is imported when it is called, so that ``tdbench report`` loads no problem or method code.
TOOLS: dict[str, tuple[str, str]] = {
    "reference": (
        "suite.cli.reference_command",
        "compute, store, validate or show ground-truth references of problems",
    ),
    "compare": (
        "suite.cli.compare_command",
        "compare two results folders: each method's change beyond noise (--exact: bitwise)",
    ),
    "overview": ("suite.cli.overview_command", "a Markdown overview of a results folder across problems and methods"),
    "readme-table": ("suite.cli.readme_table_command", "print (or --write into README.md) the README's results table"),
    "facts": ("suite.cli.facts_command", "add problem facts to records written before they were kept"),
    "bbe-study": ("suite.cli.bbe_command", "spread of TRJ's bridge estimate per proposal (TRJ Figs. 5, 7)"),
    "data": ("suite.cli.data_command", "list the external data sets (present, where, URL) or fetch the missing"),
    "check": ("suite.cli.check", "conformance checks of a problem or method (a plug-in's, say): PASS/FAIL per check"),
}


def run_tool(name: str, arguments: list[str], prog: str) -> int:
    """``tdbench NAME ARGS`` for a tool of :data:`TOOLS`: its ``main(ARGS, prog=...)``; the exit code."""
    module, _ = TOOLS[name]
    return importlib.import_module(module).main(arguments, prog=f"{prog} {name}")


__all__ = [
    "LOST",
    "PlannedRun",
    "Skipped",
    "UsageError",
    "build_parser",
    "grid_from_args",
    "grid_from_argv",
    "main",
    "run_all",
]


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
    report.add_argument("out", type=out_folder, metavar="RESULTS_DIR", help="a results folder holding records/")
    report.add_argument("--wide", action="store_true", help="print the full leaderboards (lines over 120 columns)")
    study = commands.add_parser(
        "study",
        help="regenerate one of the papers' figures or tables: " + ", ".join(STUDIES),
        description="Run a study (variants of methods on the paper's problems at a budget this machine affords) "
        "and write its table (CSV, Markdown) and figure beside the paper's numbers. Studies: "
        + "; ".join(f"{name}: {item.description}" for name, item in STUDIES.items()),
    )
    study.add_argument("name", choices=list(STUDIES), metavar="NAME", help=f"one of: {', '.join(STUDIES)}")
    study.add_argument("--out", type=out_folder, default=None, help="results folder (default: results/studies/NAME)")
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
    for name, (_, summary) in TOOLS.items():  # listed here for -h; main() hands their arguments to the tool
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def describe_command(name: str, prog: str) -> int:
    """``tdbench describe NAME``: print the problem's or method's description; the exit code."""
    try:
        with locate.downloads_deferred():  # describing a problem downloads nothing, as listing does not
            text = describe(name)
        print(text)
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
    with escaped_output():
        return _main(argv, prog)


def _main(argv: list[str] | None, prog: str | None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    # `run` takes no positional arguments: a first word is a subcommand (a misspelt one is refused by name).
    subcommand = bool(arguments) and (not arguments[0].startswith("-") or arguments[0] in ("-h", "--help"))
    if prog is None:
        prog = typed_command() if argv is None else ("tdbench" if subcommand else "run_all.py")
    if not subcommand and (arguments or prog == "run_all.py"):
        return run_all(arguments, prog)
    if arguments and arguments[0] in TOOLS:
        return run_tool(arguments[0], arguments[1:], prog)
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
