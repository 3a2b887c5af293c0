"""``tdbench overview``: the command line of :mod:`suite.report.overview` (the work is done there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.report import overview as overview_module
from suite.report.leaderboard import to_markdown
from suite.report.overview import overview
from suite.results import records as rec


def main(argv: list[str] | None = None, prog: str = "tdbench overview") -> int:
    """Print the grid of a results folder as Markdown."""
    parser = argparse.ArgumentParser(prog=prog, description=overview_module.__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="results folder (as given to run_all.py --out)")
    parser.add_argument("--problems", default=None, help="comma-separated problems, in this order (default: all)")
    parser.add_argument("--methods", default=None, help="comma-separated methods, in this order (default: all)")
    args = parser.parse_args(argv)
    records = rec.load_records(args.out)
    if not records:
        print(f"{prog}: error: no records under {args.out}", file=sys.stderr)
        return 2
    problems, methods = (
        None if text is None else [n.strip() for n in text.split(",") if n.strip()]
        for text in (args.problems, args.methods)
    )
    try:
        grid = overview(records, problems, methods)
    except ValueError as exc:  # a record without the facts the grid reads, named with the fix
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    print(to_markdown(grid), end="")
    return 0
