"""``tdbench readme-table``: the command line of :mod:`suite.report.readme_table` (the work is done there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.report.readme_table import replace_block, results_table
from suite.results import records as rec


def main(argv: list[str] | None = None, prog: str = "tdbench readme-table") -> int:
    """Print (or write into a Markdown file) the results table of a results folder."""
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("out", type=Path, help="results folder holding records/ (e.g. results/quick)")
    parser.add_argument("--write", type=Path, default=None, metavar="FILE", help="replace the marked block in FILE")
    args = parser.parse_args(argv)
    records = rec.load_records(args.out) if (args.out / "records").is_dir() else []
    if not records:
        print(f"{prog}: error: no records in {args.out}", file=sys.stderr)
        return 2
    try:
        table = results_table(records)
        if args.write is None:
            print(table, end="")
            return 0
        args.write.write_text(replace_block(args.write.read_text(), table, str(args.out)))
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the results table of {args.out} into {args.write}")
    return 0
