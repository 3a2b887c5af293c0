"""``tdbench facts``: the command line of :mod:`suite.results.facts` (the work is done there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.results.facts import add_missing_facts


def main(argv: list[str] | None = None, prog: str = "tdbench facts") -> int:
    """``tdbench facts RESULTS_DIR``: add problem facts to records written before they were kept."""
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("out", type=Path, help="a results folder (holding records/)")
    args = parser.parse_args(argv)
    if not (args.out / "records").is_dir():
        print(f"{prog}: error: {args.out} has no records/ folder", file=sys.stderr)
        return 2
    updated, unknown = add_missing_facts(args.out)
    print(f"{updated} record(s) in {args.out} now carry their problem's facts")
    if unknown:
        print(f"not registered here, left as they were: {', '.join(unknown)}")
    return 0
