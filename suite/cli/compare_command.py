"""``tdbench compare``: the command line of :mod:`suite.report.compare` (the work is done there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.report import compare as compare_module
from suite.report.compare import TIMING_METRICS, changes, differences, format_changes, profiles, unpaired
from suite.results.records import load_records


def main(argv: list[str] | None = None, prog: str = "tdbench compare") -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=compare_module.__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, metavar="OLD", help="results folder of the reference run")
    parser.add_argument("after", type=Path, metavar="NEW", help="results folder to compare with it")
    parser.add_argument("--exact", action="store_true", help="run for run, every metric bitwise (walltimes aside)")
    parser.add_argument(
        "--fail-on-worse", action="store_true", help="exit 1 when any main metric is worse beyond noise"
    )
    args = parser.parse_args(argv)
    if args.exact and args.fail_on_worse:
        print(f"{prog}: error: --fail-on-worse applies to the comparison beyond noise, not to --exact", file=sys.stderr)
        return 2
    for folder in (args.before, args.after):
        if not (folder / "records").is_dir():
            print(f"{prog}: error: no records/ folder in {folder}", file=sys.stderr)
            return 2
    before, after = load_records(args.before), load_records(args.after)
    for folder, records in ((args.before, before), (args.after, after)):
        if not records:
            print(f"{prog}: error: no records in {folder}", file=sys.stderr)
            return 2
    old_profiles, new_profiles = profiles(before), profiles(after)
    if old_profiles != new_profiles:
        print(
            f"{prog}: warning: OLD ran profile {', '.join(sorted(old_profiles)) or '?'} and NEW "
            f"{', '.join(sorted(new_profiles)) or '?'}: their settings, and so their numbers, differ by design",
            file=sys.stderr,
        )
    if args.exact:
        lines = differences(before, after)
        for line in lines:
            print(line)
        compared = sum(len(r.get("metrics", {}).keys() - TIMING_METRICS) for r in before)
        print(f"{len(before)} runs, {compared} metric values compared: {len(lines)} difference(s)")
        return 1 if lines else 0
    try:
        table = changes(before, after)
    except ValueError as exc:  # a record without usable facts, named with the fix
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if table.empty:
        print(f"{prog}: error: {args.before} and {args.after} share no (problem, method)", file=sys.stderr)
        return 2
    print(format_changes(table), end="")
    counts = table["verdict"].value_counts()
    summary = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("better", "worse", "within noise"))
    print(f"\n{len(table)} (problem, method) pairs: {summary} (Welch 95% interval over seeds; docs/metrics.md)")
    for side, pairs in zip(("OLD", "NEW"), unpaired(before, after), strict=True):
        if pairs:
            print(f"only in {side}, not compared ({len(pairs)}): {', '.join(pairs)}")
    return 1 if args.fail_on_worse and counts.get("worse", 0) else 0
