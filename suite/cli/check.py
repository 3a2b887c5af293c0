"""``tdbench check NAME``: the conformance checks of a registered problem or method, one line per check.

Meant for plug-in authors (docs/plugins.md): the checks the suite's own tests run on the built-ins
(:mod:`suite.run.problem_checks`, :mod:`suite.run.method_checks`), from the installed package. Exit status 0 when
every check passes (skips allowed), 1 when one fails, 2 for an unknown name or bad arguments. Each check has a
deadline (``--deadline``, :data:`suite.run.conformance.CHECK_DEADLINE_S`): one that runs past it fails for
overtime, and the checks after it are failed as not run.
"""

from __future__ import annotations

import argparse
import sys
import time

from suite.cli.arguments import time_budget_argument
from suite.core.plugins import describe_origin
from suite.core.registry import (
    available_methods,
    available_problems,
    code_origin,
    make_method,
    make_problem,
    method_class,
    problem_class,
    unknown_name,
)
from suite.run import UsageError, conformance
from suite.run.conformance import CheckResult
from suite.run.method_checks import CHECK_BUDGET_S, check_method
from suite.run.problem_checks import check_problem
from suite.run.spec import parse_names, problem_groups

#: The longest deadline of one check (7 days; a thread's wait takes no more than ``threading.TIMEOUT_MAX``).
MAX_DEADLINE_S = 604_800


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The arguments of ``tdbench check``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the conformance checks of a problem or method (a plug-in's, say): a method's result on "
        "each smoke problem (or why it does not apply), seeds, the harness, its trace and a time budget; a "
        "problem's shapes, dtypes, inactive coordinates, batches, float32, model space and ground truth. One line "
        "per check. Exit status: 0 all passed, 1 one failed, 2 unknown name.",
    )
    parser.add_argument("name", help="a registered problem or method ('tdbench list')")
    parser.add_argument(
        "--problems",
        default=None,
        help="a method's problems, comma-separated (default: those of the smoke profile)",
    )
    parser.add_argument(
        "--time-budget",
        type=time_budget_argument,
        default=CHECK_BUDGET_S,
        metavar="SECONDS",
        help=f"compute seconds of the budget check (default {CHECK_BUDGET_S:g})",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=conformance.CHECK_DEADLINE_S,
        metavar="SECONDS",
        help=f"seconds one check may run before it fails for overtime; the checks after it are not run (default "
        f"{conformance.CHECK_DEADLINE_S:g})",
    )
    return parser


def _print(result: CheckResult) -> CheckResult:
    print(result.line(), flush=True)
    return result


def main(arguments: list[str] | None = None, prog: str = "tdbench check") -> int:
    """``tdbench check NAME [--problems A,B] [--time-budget S] [--deadline S]``; the exit status."""
    args = build_parser(prog).parse_args(arguments)
    name = args.name
    is_problem, is_method = name in available_problems(), name in available_methods()
    if not (is_problem or is_method):
        print(f"{prog}: error: {unknown_name(name)}", file=sys.stderr)
        return 2
    if not 0 < args.deadline <= MAX_DEADLINE_S:
        print(f"{prog}: error: --deadline must be positive, at most {MAX_DEADLINE_S} seconds", file=sys.stderr)
        return 2
    try:
        problems = (
            None
            if args.problems is None
            else parse_names(args.problems, available_problems(), "problem", problem_groups())
        )
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results: list[CheckResult] = []
    if is_problem:
        print(f"problem {name} (distribution {describe_origin(code_origin(problem_class(name)))})", flush=True)
        results += [_print(result) for result in check_problem(make_problem(name), args.deadline)]
    if is_method:
        print(f"method {name} (distribution {describe_origin(code_origin(method_class(name)))})", flush=True)
        checks = check_method(make_method(name), problems, args.time_budget, args.deadline)
        results += [_print(result) for result in checks]
    failed = sum(result.failed for result in results)
    seconds = time.perf_counter() - started
    print(f"{len(results) - failed} of {len(results)} checks passed or skipped, {failed} failed ({seconds:.0f} s)")
    return 1 if failed else 0
